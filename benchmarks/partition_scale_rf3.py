"""Partition scale on three brokers (issue 21 item 7): RF 3, N partitions in all, kill -9.

For each N on a fresh cluster of 3 local brokers (every broker and client setting at its
production default, as ``benchmarks/failover.py``; the topic has ``min.insync.replicas=2``):

- **create**: one CreateTopics of N partitions at RF 3 (3N replicas) until every partition has
  a leader and all 3 replicas in its ISR (wall seconds, and each broker's CPU seconds);
- **idle**: once the metadata has stopped moving (the applied metadata offset unchanged for
  ``SETTLE_S``: the preferred-leader elections and ISR changes that follow a creation at 10,000
  partitions go on for a minute or two, and are not idle), each broker's CPU over
  ``idle_seconds``, its RSS and its open files (:mod:`benchmarks.idle_cpu` measures the idle
  figure alone, in longer windows);
- **keyed produce, acks=all**: ``records`` 100 B values with distinct keys, Strom's
  ``Producer`` at its defaults (bounded by ``max_seconds``); rate of acknowledged records;
- **kill -9** of one broker that is not the active controller (it leads about N/3
  partitions): seconds until a surviving broker's metadata names a new leader for every
  partition it led, and until the first acknowledged acks=all write, sent after the kill, to
  one of those partitions (issue 12's bounds: writes back within 2 s median, 5 s max);
- **restart** of the killed broker: seconds until it is back in every partition's ISR.

Replication runs in fetch sessions (KIP-227): one ReplicaFetch stream per broker pair carrying
all its partitions, incremental after the first full fetch; each broker's fetch sessions are
counted from its ``/metrics``.

Every wait is bounded (``max_seconds``); one that runs out is recorded as the finding (the
figure is None and ``notes`` says what did not happen) and the point ends there.

Run: ``uv run --all-packages python -m benchmarks.partition_scale --brokers 3 --counts
1000,10000 [--records N] [--max-seconds S] [--json PATH] [--png PATH]``; the suite runs it as
the section ``partition-scale-rf3``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.failover import Writer, production_defaults
from benchmarks.idle_cpu import wait_settled
from benchmarks.partition_scale import cpu_seconds, open_fds, rss_mib
from strom.client import Admin, Producer, RecordMetadata
from strom.testing import Cluster, running_cluster

TOPIC = "scale3"
#: Issue 12's failover bound for kill -9 (writes back within 2 s median, 5 s max).
FAILOVER_MAX_S = 5.0
#: Seconds the metadata offset must stay put before the idle window starts.
SETTLE_S = 10.0


@dataclass
class BrokerFigures:
    broker_id: int
    idle_cpu_pct: float
    rss_mib: float
    fds: int
    create_cpu_s: float
    fetch_sessions: int | None = None
    """Fetch sessions followers hold open on this broker (one per follower broker)."""


@dataclass
class Rf3Point:
    partitions: int
    create_s: float | None = None
    """CreateTopics until every partition is led with 3 replicas in its ISR."""
    create_call_s: float | None = None
    """The CreateTopics call alone."""
    settled_s: float | None = None
    """All led with full ISRs to the metadata offset unchanged for ``SETTLE_S``."""
    brokers: list[BrokerFigures] = field(default_factory=list)
    produce_rps: float | None = None
    produced: int = 0
    victim: int | None = None
    victim_led: int = 0
    new_leaders_s: float | None = None
    """kill -9 to a survivor's metadata naming a new leader for every partition it led."""
    first_write_s: float | None = None
    """kill -9 to the first acknowledged write (sent after the kill) to a moved partition."""
    back_in_isr_s: float | None = None
    """Start of the killed broker to it being in every partition's ISR again."""
    false_fencings: int | None = None
    """Brokers the controllers fenced before the kill (every broker was alive: all false)."""
    load_avg: float | None = None
    notes: list[str] = field(default_factory=list)


def _fetch_sessions(metrics_url: str) -> int | None:
    try:
        with urllib.request.urlopen(metrics_url, timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("strom_replica_fetch_sessions "):
            return int(float(line.split()[1]))
    return None


def _partitions(cluster: Cluster, via: int | None = None) -> list[Any]:
    for t in cluster.metadata([TOPIC], via=via, timeout=30).topics:
        if t.name == TOPIC:
            return list(t.partitions)
    return []


def _wait(what: str, check: Callable[[], bool], timeout: float, interval: float = 0.2
          ) -> float | None:
    """Seconds until ``check()`` holds (exceptions count as not yet), None after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if check():
                return time.monotonic() - start
        except Exception:
            pass
        time.sleep(interval)
    return None


def produce_keyed_all(bootstrap: str, records: int, max_seconds: float) -> tuple[int, float]:
    """Keyed 100 B records with acks=all until ``records`` are sent or ``max_seconds`` pass;
    (acknowledged records, seconds including the flush)."""
    value = os.urandom(100)
    acked = 0
    lock = threading.Lock()

    def done(md: RecordMetadata | None, err: Exception | None) -> None:
        nonlocal acked
        if err is None:
            with lock:
                acked += 1

    producer = Producer(bootstrap, acks="all")
    try:
        start = time.perf_counter()
        deadline = start + max_seconds
        for i in range(records):
            if i % 1000 == 0 and time.perf_counter() > deadline:
                break
            producer.send(TOPIC, value, key=b"key-%d" % i, on_delivery=done)
        producer.flush(max(deadline - time.perf_counter(), 10.0))
        elapsed = time.perf_counter() - start
    finally:
        producer.close()
    return acked, elapsed


def measure_point(root: Path, n: int, records: int, max_seconds: float,
                  idle_seconds: float, say: Callable[[str], None],
                  logs_dir: Path | None = None) -> Rf3Point:
    point = Rf3Point(n)
    config = {**production_defaults(), "min.insync.replicas": "2"}
    with running_cluster(root, brokers=3, config=config, startup_timeout=600) as cluster:
        pids = {b: cluster.brokers[b].pid for b in cluster.brokers}
        say(f"rf3: creating {n:,} partitions at RF 3 on 3 brokers")
        cpu = {b: cpu_seconds(pid) for b, pid in pids.items()}
        start = time.monotonic()
        with Admin(cluster.bootstrap, request_timeout_ms=int(max_seconds * 1000)) as admin:
            admin.create_topic(TOPIC, partitions=n, replication_factor=3,
                               configs={"min.insync.replicas": "2"})
        point.create_call_s = time.monotonic() - start

        def all_full() -> bool:
            parts = _partitions(cluster)
            return len(parts) == n and all(p.leader >= 0 and len(p.isr) == 3 for p in parts)

        waited = _wait("all led, ISR full", all_full, max_seconds, 0.5)
        if waited is None:
            point.notes.append(f"not every partition led with a full ISR after {max_seconds} s")
            return point
        point.create_s = time.monotonic() - start
        create_cpu = {b: cpu_seconds(pid) - cpu[b] for b, pid in pids.items()}
        say(f"rf3: {n:,} partitions led, ISR full after {point.create_s:.1f} s")
        point.settled_s, offset = wait_settled(cluster, SETTLE_S, max_seconds)
        if point.settled_s is None:
            point.notes.append(f"metadata still moving {max_seconds} s after the ISRs filled")
        else:
            say(f"rf3: metadata settled at offset {offset} {point.settled_s:.1f} s later")
        idle0 = {b: cpu_seconds(pid) for b, pid in pids.items()}
        time.sleep(idle_seconds)
        for b, pid in pids.items():
            point.brokers.append(BrokerFigures(
                b, (cpu_seconds(pid) - idle0[b]) / idle_seconds * 100, rss_mib(pid),
                open_fds(pid), create_cpu[b],
                _fetch_sessions(cluster.brokers[b].metrics_url)))
        say(f"rf3: idle {[round(f.idle_cpu_pct, 1) for f in point.brokers]} % CPU, "
            f"RSS {[round(f.rss_mib) for f in point.brokers]} MiB, "
            f"fds {[f.fds for f in point.brokers]}")
        say(f"rf3: keyed produce, acks=all, {records:,} x 100 B over {n:,} partitions")
        try:
            acked, elapsed = produce_keyed_all(cluster.bootstrap, records, max_seconds)
            point.produced = acked
            point.produce_rps = acked / elapsed if elapsed > 0 else None
            say(f"rf3: {acked:,} acknowledged in {elapsed:.1f} s")
        except Exception as exc:  # the finding: recorded, and the failover still measured
            point.notes.append(f"keyed produce failed: {exc}")
            say(f"rf3: keyed produce failed: {exc}")
        point.false_fencings = _fencings(cluster)
        try:
            _failover(cluster, point, max_seconds, say)
        finally:
            if logs_dir is not None:
                logs_dir.mkdir(parents=True, exist_ok=True)
                for b, broker in cluster.brokers.items():
                    shutil.copy(broker.stderr_path, logs_dir / f"{n}-broker-{b}.log")
    point.load_avg = os.getloadavg()[0]
    return point


def _fencings(cluster: Cluster) -> int:
    """Fencings for a missed heartbeat the brokers' controllers logged so far."""
    count = 0
    for broker in cluster.brokers.values():
        with open(broker.stderr_path, errors="replace") as f:
            count += sum(1 for line in f if ": fencing broker" in line and "heartbeat" in line)
    return count


def _failover(cluster: Cluster, point: Rf3Point, max_seconds: float,
              say: Callable[[str], None]) -> None:
    controller = cluster.controller_id()
    parts = _partitions(cluster)
    led: dict[int, list[int]] = {}
    for p in parts:
        led.setdefault(p.leader, []).append(p.partition)
    victim = max((b for b in led if b != controller), key=lambda b: len(led[b]))
    moved = set(led[victim])
    point.victim, point.victim_led = victim, len(moved)
    survivors = [b for b in cluster.brokers if b != victim]
    probe = min(moved)
    with Writer(cluster.bootstrap, topic=TOPIC, partition=probe) as writer:
        if _wait("a first write", lambda: writer.first_ack_of_record_sent_after(0.0) is not None,
                 60) is None:
            point.notes.append(f"no write acknowledged on {TOPIC}-{probe} before the kill")
            return
        say(f"rf3: kill -9 of broker {victim} (leads {len(moved):,}; controller {controller})")
        t0 = time.monotonic()
        cluster.kill(victim)
        new_leaders: float | None = None
        first: float | None = None
        while time.monotonic() - t0 < max_seconds and (new_leaders is None or first is None):
            if new_leaders is None:
                try:
                    seen = {p.partition: p.leader for b in survivors
                            for p in _partitions(cluster, via=b) if p.partition in moved}
                    if len(seen) == len(moved) and all(v not in (-1, victim)
                                                       for v in seen.values()):
                        new_leaders = time.monotonic() - t0
                except Exception:
                    pass
            if first is None:
                ack = writer.first_ack_of_record_sent_after(t0)
                if ack is not None:
                    first = ack - t0
            time.sleep(0.05)
        point.new_leaders_s, point.first_write_s = new_leaders, first
        if writer.errors:
            point.notes.append(f"{len(writer.errors)} write(s) failed during the failover, "
                               f"e.g. {writer.errors[0]}")
    say(f"rf3: new leaders for all {len(moved):,} after {new_leaders} s; first write after "
        f"{first} s")
    if new_leaders is None or first is None:
        point.notes.append(f"failover not complete after {max_seconds} s")
    start = time.monotonic()
    cluster.start_broker(victim)

    def back_in_isr() -> bool:
        ps = _partitions(cluster)
        return len(ps) == point.partitions and all(victim in p.isr for p in ps)

    waited = _wait("back in ISR", back_in_isr, max_seconds, 0.5)
    point.back_in_isr_s = None if waited is None else time.monotonic() - start
    if waited is None:
        point.notes.append(f"broker {victim} not back in every ISR after {max_seconds} s")
    say(f"rf3: broker {victim} back in every ISR after {point.back_in_isr_s} s")


def measure(counts: list[int], records: int, max_seconds: float = 900.0,
            idle_seconds: float = 20.0, progress: object = print,
            logs_dir: Path | None = None) -> list[Rf3Point]:
    """One fresh cluster per N; ``logs_dir``: where the brokers' logs are copied."""
    say = progress if callable(progress) else print
    points = []
    for n in counts:
        with tempfile.TemporaryDirectory(prefix="strom-bench-rf3-") as tmp:
            point = measure_point(Path(tmp), n, records, max_seconds, idle_seconds, say,
                                  logs_dir)
        say(f"rf3: {point}")
        points.append(point)
    return points


def _f(value: float | None, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def format_points(points: list[Rf3Point]) -> str:
    lines = ["| partitions (replicas) | create -> all led, ISR full s (call s) | idle CPU % "
             "per broker | RSS MiB per broker | fds per broker | fetch sessions per broker "
             "| keyed produce acks=all rec/s | false fencings | kill -9: broker (led) "
             "| -> all new leaders s | -> first write s | restart -> back in every ISR s "
             "| load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        b = sorted(p.brokers, key=lambda f: f.broker_id)
        lines.append(
            f"| {p.partitions:,} ({3 * p.partitions:,}) | {_f(p.create_s)} "
            f"({_f(p.create_call_s)}) | {' / '.join(f'{f.idle_cpu_pct:.1f}' for f in b)} | "
            f"{' / '.join(f'{f.rss_mib:.0f}' for f in b)} | "
            f"{' / '.join(str(f.fds) for f in b)} | "
            f"{' / '.join('-' if f.fetch_sessions is None else str(f.fetch_sessions) for f in b)}"
            f" | {_f(p.produce_rps, ',.0f')} | "
            f"{'-' if p.false_fencings is None else p.false_fencings} | "
            f"{p.victim} ({p.victim_led:,}) | "
            f"{_f(p.new_leaders_s, '.2f')} | {_f(p.first_write_s, '.2f')} | "
            f"{_f(p.back_in_isr_s)} | {_f(p.load_avg, '.1f')} |")
    notes = [f"- {p.partitions:,}: {note}" for p in points for note in p.notes]
    return "\n".join(lines + (["", *notes] if notes else []))


def plot(points: list[Rf3Point], path: Path) -> bool:
    """Seconds (create, failover, rejoin) against N, if matplotlib is installed."""
    try:
        import matplotlib  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [p.partitions for p in points]
    for label, values in (("create -> all led, ISR full", [p.create_s for p in points]),
                          ("kill -9 -> all new leaders", [p.new_leaders_s for p in points]),
                          ("kill -9 -> first write", [p.first_write_s for p in points]),
                          ("restart -> back in every ISR", [p.back_in_isr_s for p in points])):
        pts = [(x, v) for x, v in zip(xs, values, strict=True) if v is not None]
        if pts:
            ax.plot([x for x, _ in pts], [v for _, v in pts], marker="o", label=label)
    ax.axhline(FAILOVER_MAX_S, color="grey", linestyle=":", label="failover bound (5 s)")
    ax.set_xscale("log")
    ax.set_xlabel("partitions (3 brokers, RF 3)")
    ax.set_ylabel("seconds")
    ax.legend(fontsize=8)
    bx.plot(xs, [statistics.fmean(f.rss_mib for f in p.brokers) if p.brokers else 0
                 for p in points], marker="o", label="RSS MiB per broker")
    bx.plot(xs, [statistics.fmean(f.idle_cpu_pct for f in p.brokers) * 10 if p.brokers else 0
                 for p in points], marker="o", label="idle CPU per broker (% x 10)")
    bx.set_xscale("log")
    bx.set_xlabel("partitions (3 brokers, RF 3)")
    bx.legend(fontsize=8)
    loads = [p.load_avg for p in points if p.load_avg is not None]
    if loads:
        fig.suptitle(f"3 brokers on 2 shared cores, load average {min(loads):.0f}-"
                     f"{max(loads):.0f}")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    return True
