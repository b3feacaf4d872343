"""Failover: how long acks=all writes stop when a partition leader dies, hangs or is cut off.

Three brokers, RF=3, ``min.insync.replicas=2``, every broker and client setting at its
production default (not ``strom.testing``'s fast test timeouts). A producer thread sends one
record every ``interval_s``; a fault hits the partition's leader; the figure is the time from the
fault to the first acknowledgement of a record *sent after* the fault (writes work again). The
broker is brought back and the ISR is whole again before the next run.

Faults:

- ``kill``: ``kill -9`` of the leader (its sockets close at once);
- ``stop``: ``SIGSTOP`` of the leader (sockets open, nothing answers: a hung process);
- ``partition``: the leader's network namespace loses its link (no packet in or out), so it
  needs ``strom.testing.netns`` (root, ``ip``); skipped with a reason otherwise;
- ``kill-controller``: ``kill -9`` of a leader that is also the active controller (leadership
  is moved to the controller first): the quorum must elect a new controller before anyone can
  fence the dead broker. In the other runs the victim is whichever broker leads.

Besides the total, each run records when a surviving broker's metadata first showed another
leader (fencing + election + propagation), so the rest is the client's share.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.background_writer import BackgroundWriter
from strom.broker.config import KEYS
from strom.client import Admin, Producer, RecordMetadata
from strom.testing import Cluster, running_cluster
from strom.testing.cluster import CLUSTER_TEST_DEFAULTS

TOPIC = "failover"
FAULTS = ("kill", "kill-controller", "stop", "partition")
#: Longest a run waits for writes to resume before it records the cap.
RESUME_CAP_S = 90.0


def production_defaults() -> dict[str, str]:
    """The broker's own defaults for every key the test harness speeds up."""
    out = {key: str(KEYS[key].default) for key in CLUSTER_TEST_DEFAULTS}
    out["shutdown.timeout.ms"] = CLUSTER_TEST_DEFAULTS["shutdown.timeout.ms"]  # teardown only
    return out


@dataclass
class Run:
    fault: str
    victim: int
    resume_s: float
    new_leader_s: float | None
    """Fault to a surviving broker's metadata naming another leader (None: not seen)."""
    failed_sends: int
    victim_was_controller: bool = False


@dataclass
class Writer(BackgroundWriter):
    """One acks=all record every ``interval_s`` with default producer settings (to
    ``partition`` of ``topic`` when given: the partition-scale failover probes one moved
    partition); ack times recorded."""

    topic: str = TOPIC
    partition: int | None = None

    def _run(self) -> None:
        with Producer(self.bootstrap, acks="all", linger_ms=0) as producer:
            deadline = self.deadline()
            while self.running(deadline):
                sent = time.monotonic()
                producer.send(self.topic, b"x", partition=self.partition,
                              on_delivery=lambda md, err, t=sent: self._done(t, md, err))
                time.sleep(self.interval_s)
            producer.flush(150)

    def _done(self, sent: float, md: RecordMetadata | None, err: Exception | None) -> None:
        if err is None and md is not None:
            with self.lock:
                self.acks.append((sent, time.monotonic()))
        else:
            self.error(repr(err))


def _lead_from_the_controller(cluster: Cluster) -> None:
    """Make the active controller the partition's preferred replica and leader."""
    controller = cluster.controller_id()
    if cluster.leader_of(TOPIC, 0) == controller:
        return
    order = [controller] + [b for b in sorted(cluster.brokers) if b != controller]
    with Admin(cluster.bootstrap) as admin:
        admin.alter_partition_reassignments({(TOPIC, 0): order})
        cluster.wait_reassignments_done([TOPIC], timeout=60)
        cluster.wait_until(
            lambda: admin.elect_leaders([(TOPIC, 0)], raise_on_error=False) is not None
            and cluster.leader_of(TOPIC, 0) == controller, timeout=60,
            what=f"broker {controller} (the controller) to lead {TOPIC}-0")


@contextmanager
def _fault(cluster: Cluster, fault: str, victim: int, hooks: Any) -> Iterator[None]:
    if fault in ("kill", "kill-controller"):
        cluster.kill(victim)
        try:
            yield
        finally:
            cluster.start_broker(victim)
    elif fault == "stop":
        cluster.pause(victim)
        try:
            yield
        finally:
            cluster.resume(victim)
    else:
        hooks.cut(victim)
        try:
            yield
        finally:
            hooks.heal(victim)


def measure(cluster: Cluster, fault: str, runs: int, progress: Callable[[str], None],
            hooks: Any = None) -> list[Run]:
    """``runs`` faults of ``fault`` on the leader of ``failover-0``, one after the other."""
    with Admin(cluster.bootstrap) as admin:
        if TOPIC not in admin.list_topics():
            admin.create_topic(TOPIC, partitions=1, replication_factor=3,
                               configs={"min.insync.replicas": "2"})
    cluster.wait_for_isr(TOPIC, 0, 3, timeout=60)
    out: list[Run] = []
    with Writer(cluster.bootstrap) as writer:
        cluster.wait_until(lambda: writer.first_ack_of_record_sent_after(0.0), timeout=60,
                           what="the writer's first acknowledgement")
        for k in range(runs):
            time.sleep(1.0)
            if fault == "kill-controller":
                _lead_from_the_controller(cluster)
            victim = cluster.wait_for_leader(TOPIC, 0, timeout=60)
            controller = cluster.controller_id()
            others = [b for b in cluster.brokers if b != victim]
            errors_before = len(writer.errors)
            progress(f"failover {fault} {k + 1}/{runs}: broker {victim} leads")
            with _fault(cluster, fault, victim, hooks):
                t0 = time.monotonic()
                new_leader_s: float | None = None
                resumed: float | None = None
                while time.monotonic() - t0 < RESUME_CAP_S:
                    if new_leader_s is None:
                        for b in others:
                            try:
                                leader = cluster.leader_of(TOPIC, 0, via=b)
                            except Exception:
                                continue
                            if leader not in (-1, victim):
                                new_leader_s = time.monotonic() - t0
                                break
                    resumed = writer.first_ack_of_record_sent_after(t0)
                    if resumed is not None and new_leader_s is not None:
                        break
                    time.sleep(0.02)
                resume_s = (resumed - t0) if resumed is not None else RESUME_CAP_S
                run = Run(fault, victim, resume_s, new_leader_s,
                          len(writer.errors) - errors_before, controller == victim)
                seen = "never" if new_leader_s is None else f"{new_leader_s:.2f} s"
                progress(f"  writes resumed after {run.resume_s:.2f} s (another leader in the "
                         f"metadata after {seen}; the victim was "
                         f"{'' if run.victim_was_controller else 'not '}the controller)")
                out.append(run)
            cluster.wait_for_isr(TOPIC, 0, 3, timeout=120)
    return out


def summary(runs: list[Run]) -> dict[str, float]:
    times = [r.resume_s for r in runs]
    return {"median_s": statistics.median(times), "max_s": max(times), "runs": len(times)}


def run_faults(root: Path, faults: tuple[str, ...], runs: int,
               progress: Callable[[str], None]) -> dict[str, list[Run]]:
    """Each fault on a fresh cluster with production defaults."""
    results: dict[str, list[Run]] = {}
    for fault in faults:
        hooks: Any = None
        cm: Any
        if fault == "partition":
            from strom.testing import netns

            reason = netns.unavailable()
            if reason is not None:
                progress(f"failover partition skipped: {reason}")
                continue
            cm = netns.running_partitionable_cluster(root / fault, brokers=3, prefix="failover",
                                                     config=production_defaults())
        else:
            cm = running_cluster(root / fault, brokers=3, config=production_defaults())
        with cm as cluster:
            if fault == "partition":
                hooks = cluster
            results[fault] = measure(cluster, fault, runs, progress, hooks)
    return results


def _burn(until: float) -> None:
    x = 0
    while time.monotonic() < until:
        x += 1


def false_fences(root: Path, seconds: float, burners: int,
                 progress: Callable[[str], None]) -> dict[str, Any]:
    """No fault at all for ``seconds``: 3 brokers at production defaults, a writer, and
    ``burners`` busy-looping processes on top of whatever else the machine runs. Every fencing
    the controllers log is a false one (the brokers all live)."""
    import multiprocessing
    import os

    with running_cluster(root / "soak", brokers=3, config=production_defaults()) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic(TOPIC, partitions=3, replication_factor=3,
                               configs={"min.insync.replicas": "2"})
        for p in range(3):
            cluster.wait_for_isr(TOPIC, p, 3, timeout=60)
        logs = {b: cluster.brokers[b].stderr_path for b in cluster.brokers}
        marks = {b: len(path.read_bytes()) for b, path in logs.items()}
        until = time.monotonic() + seconds
        procs = [multiprocessing.Process(target=_burn, args=(until,), daemon=True)
                 for _ in range(burners)]
        load: list[float] = []
        with Writer(cluster.bootstrap) as writer:
            for proc in procs:
                proc.start()
            progress(f"soak: {seconds:.0f} s, {burners} CPU burner(s), no fault")
            while time.monotonic() < until:
                time.sleep(5)
                load.append(os.getloadavg()[0])
            for proc in procs:
                proc.join(10)
                if proc.is_alive():
                    proc.kill()
            acked = len(writer.acks)
        fences: list[str] = []
        for b, path in logs.items():
            text = path.read_bytes()[marks[b]:].decode(errors="replace")
            fences += [line for line in text.splitlines() if "fencing broker" in line]
    return {"seconds": seconds, "burners": burners, "fences": len(fences),
            "fence_lines": fences[:10], "acked": acked,
            "load_avg_1m": {"min": min(load, default=0.0), "max": max(load, default=0.0),
                            "mean": statistics.fmean(load) if load else 0.0}}


if __name__ == "__main__":  # a quick look: python -m benchmarks.failover [runs] [faults...]
    import sys
    import tempfile

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    chosen = tuple(sys.argv[2:]) or FAULTS
    with tempfile.TemporaryDirectory(prefix="strom-failover-") as tmp:
        if chosen[0] == "soak":  # python -m benchmarks.failover SECONDS soak [BURNERS]
            burn = int(chosen[1]) if len(chosen) > 1 else 2
            print(false_fences(Path(tmp), float(n), burn, lambda m: print(m, flush=True)))
            sys.exit(0)
        found = run_faults(Path(tmp), chosen, n, lambda m: print(m, flush=True))
    for name, rs in found.items():
        print(name, summary(rs), [round(r.resume_s, 2) for r in rs],
              [None if r.new_leader_s is None else round(r.new_leader_s, 2) for r in rs])
