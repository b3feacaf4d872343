"""Idle CPU per broker on three brokers once the metadata has stopped moving (issue 21 item 2),
beside Apache Kafka's in the same windows (``--kafka``).

What "idle" means here: a fresh cluster of 3 local brokers (every setting at its production
default, as ``benchmarks/failover.py``; the topic, when there is one, has RF 3 and
``min.insync.replicas=2``), every partition led with its full ISR, and then the **metadata log
settled**: the applied metadata offset (DescribeCluster's ``metadata_offset``) unchanged for
``settle_s``. Only then does each window start: each broker's ``utime + stime`` from
``/proc/PID/stat`` over ``window_s`` seconds, ``windows`` times in a row. Measuring right
after the last ISR fills (what ``partition_scale_rf3`` did first) counts the tail of the
creation - preferred-leader elections, ISR expansions, segment files made in the background -
which at 10,000 partitions goes on for a minute or two; that is not what a broker costs when
nothing happens. The load average is sampled at every window (a shared 2-core machine).

Every window also reads each process's threads (:mod:`benchmarks.thread_cpu`): CPU from
``/proc/PID/task/*/schedstat`` beside the stat figure, and **wake episodes per second** (the
third schedstat field, summed over threads) with the CPU per wake. On this VM a wake-up's
charged CPU grows with the sleep before it, so an idle figure is only read with its wake-ups.

**Calibration rows.** Two null processes run through the whole measurement, a Python loop of
``time.sleep(0.1)`` (10 Hz) and one of ``time.sleep(1.0)`` (1 Hz), measured in the same
windows: what this VM charges for doing nothing but waking, at the moment the brokers are
measured.

**Apache Kafka beside it** (``--kafka``): 3 Kafka nodes in KRaft combined mode through the
project's reference launcher (:func:`strom.testing.kafka.running_kafka`, jars from
``kafka-ref/pom.xml``), at Kafka's defaults (its scripts' 1 GiB heap, the launcher's internal
topics at RF 3, no auto-created topics), the same topic (N partitions, RF 3,
``min.insync.replicas=2``; created in steps of 5,000 partitions, as one operation of Kafka's
controller takes at most 10,000 metadata records). Kafka has no metadata offset that stands
still (KRaft appends a no-op record every 500 ms, ``metadata.max.idle.interval.ms``), so
"settled" there is: every partition's leader and ISR unchanged for ``settle_s`` and each JVM
under 10 % of a core over 2 s. Both clusters run at once and every window measures all six
brokers and the null processes over the same seconds: the same load, the same neighbours, no
alternation needed (each cluster's idle work is background to the other, symmetrically). The
table gives each system's mean per broker and the ratio Strom / Kafka.

``--partitions 0`` is the empty cluster's floor: what the Raft timer, the Raft heartbeats, the
brokers' heartbeats to the controller, the controller's loop and the followers' long-polls cost
when there is nothing to do.

Run: ``uv run --all-packages python -m benchmarks.idle_cpu [--partitions N] [--window-s 20]
[--windows 3] [--settle-s 10] [--kafka] [--json PATH] [--logs DIR] [--set KEY=VALUE ...]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.failover import production_defaults
from benchmarks.partition_scale import cpu_seconds
from benchmarks.thread_cpu import ProcessWindow, sample, top_groups, window
from strom.client import Admin
from strom.testing import Cluster, running_cluster
from strom.testing.process import ManagedProcess

TOPIC = "idle"
#: The calibration processes: name -> seconds slept per loop.
NULL_SLEEPERS = {"null-10hz": 0.1, "null-1hz": 1.0}
#: Kafka's own heap (kafka-server-start.sh: -Xmx1G -Xms1G), not the launcher's test-sized one.
KAFKA_HEAP = ("-Xms1g", "-Xmx1g")
#: A Kafka JVM counts as quiet under this % of a core over :data:`KAFKA_QUIET_S`.
KAFKA_QUIET_PCT = 10.0
KAFKA_QUIET_S = 2.0
#: New partitions per Kafka request (see :func:`kafka_creation_steps`).
KAFKA_MAX_NEW_PARTITIONS = 5_000


@dataclass
class Window:
    cpu_pct: dict[int, float]
    """Strom broker id -> its CPU over the window, % of one core (``/proc/PID/stat``)."""
    load_avg: float
    seconds: float = 0.0
    processes: dict[str, ProcessWindow] = field(default_factory=dict)
    """``strom-B``, ``kafka-B`` and the null sleepers -> their figures over this window."""


@dataclass
class IdlePoint:
    partitions: int
    settled_after_s: float | None = None
    """Seconds from every partition led with a full ISR (or the cluster up) to the metadata
    offset having stayed put for ``settle_s``."""
    metadata_offset: int = -1
    windows: list[Window] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    overrides: dict[str, str] = field(default_factory=dict)
    """Broker settings given instead of their defaults (``--set``): an A/B of a default
    alternated in the same code, e.g. ``--set controller.heartbeat.interval.ms=100``."""
    kafka_version: str | None = None
    """Set when Apache Kafka ran beside Strom (``--kafka``)."""
    kafka_settled_after_s: float | None = None

    def median_per_broker(self) -> dict[int, float]:
        ids = sorted({b for w in self.windows for b in w.cpu_pct})
        return {b: statistics.median(w.cpu_pct[b] for w in self.windows) for b in ids}

    def summary(self) -> dict[str, dict[str, float]]:
        """Per process and per system (``strom``, ``kafka``: the mean over its brokers in each
        window), the median over windows of CPU (stat and threads), wakes/s and us per wake."""
        return summarise(self.windows)


def _median_figures(ws: list[ProcessWindow]) -> dict[str, float]:
    return {"cpu_pct": statistics.median(w.cpu_pct for w in ws),
            "thread_cpu_pct": statistics.median(w.thread_cpu_pct for w in ws),
            "wakes_per_s": statistics.median(w.wakes_per_s for w in ws),
            "preempted_per_s": statistics.median(w.preempted_per_s for w in ws),
            "us_per_wake": statistics.median(w.us_per_wake for w in ws),
            "threads": statistics.median(w.threads for w in ws)}


def system_mean(processes: dict[str, ProcessWindow], system: str) -> ProcessWindow | None:
    """The mean broker of ``system`` (``strom`` or ``kafka``) in one window: each figure
    averaged over the processes named ``SYSTEM-B``; None if there is none."""
    mine = [w for name, w in processes.items() if name.startswith(f"{system}-")]
    if not mine:
        return None
    n = len(mine)
    return ProcessWindow(cpu_pct=sum(w.cpu_pct for w in mine) / n,
                         thread_cpu_pct=sum(w.thread_cpu_pct for w in mine) / n,
                         wakes_per_s=sum(w.wakes_per_s for w in mine) / n,
                         threads=round(sum(w.threads for w in mine) / n),
                         preempted_per_s=sum(w.preempted_per_s for w in mine) / n)


def summarise(windows: list[Window]) -> dict[str, dict[str, float]]:
    """Medians over ``windows`` per process, per system's mean broker, and the Strom / Kafka
    ratios when both ran."""
    names = sorted({name for w in windows for name in w.processes})
    out = {name: _median_figures([w.processes[name] for w in windows if name in w.processes])
           for name in names}
    for system in ("strom", "kafka"):
        means = [m for w in windows if (m := system_mean(w.processes, system)) is not None]
        if means:
            out[f"{system} (mean broker)"] = _median_figures(means)
    strom, kafka = out.get("strom (mean broker)"), out.get("kafka (mean broker)")
    if strom and kafka:
        out["strom / kafka"] = {key: strom[key] / kafka[key] if kafka[key] else float("nan")
                                for key in ("cpu_pct", "thread_cpu_pct", "wakes_per_s",
                                            "us_per_wake")}
    return out


def _all_full(cluster: Cluster, n: int) -> bool:
    for t in cluster.metadata([TOPIC], timeout=30).topics:
        if t.name == TOPIC:
            parts = list(t.partitions)
            return len(parts) == n and all(p.leader >= 0 and len(p.isr) == 3 for p in parts)
    return False


def wait_settled(cluster: Cluster, settle_s: float, timeout_s: float) -> tuple[float | None, int]:
    """Seconds until the applied metadata offset stayed the same for ``settle_s`` (None after
    ``timeout_s``), and that offset. Polled once a second (one DescribeCluster: cheap)."""
    start = time.monotonic()
    last, since = -2, start
    while time.monotonic() - start < timeout_s:
        try:
            offset = int(cluster.describe().metadata_offset)
        except Exception:
            offset = -2
        now = time.monotonic()
        if offset != last or offset < 0:
            last, since = offset, now
        elif now - since >= settle_s:
            return now - start, offset
        time.sleep(1.0)
    return None, last


@contextlib.contextmanager
def null_sleepers(directory: Path) -> Iterator[dict[str, int]]:
    """The calibration processes, running until the block ends: name -> pid."""
    procs = {name: ManagedProcess(
        [sys.executable, "-I", "-S", "-c", f"import time\nwhile True:\n    time.sleep({s})"],
        directory / f"{name}.log", name=name).start() for name, s in NULL_SLEEPERS.items()}
    try:
        yield {name: p.pid for name, p in procs.items()}
    finally:
        for p in procs.values():
            p.stop(5.0)


# -- Apache Kafka (--kafka) ------------------------------------------------------------------

def _kafka_state(admin: Any) -> dict[int, tuple[int, tuple[int, ...]]] | None:
    """Partition -> (leader, sorted ISR) of the topic on Kafka; None if it is not there."""
    meta = admin.list_topics(topic=TOPIC, timeout=30)
    topic = meta.topics.get(TOPIC)
    if topic is None or topic.error is not None:
        return None
    return {p.id: (p.leader, tuple(sorted(p.isrs))) for p in topic.partitions.values()}


def kafka_creation_steps(partitions: int) -> list[int]:
    """The topic's partition count after each Kafka request: CreateTopics with the first
    :data:`KAFKA_MAX_NEW_PARTITIONS`, then CreatePartitions up to ``partitions`` by as many.
    Kafka's controller refuses one operation of more than 10,000 metadata records
    (``POLICY_VIOLATION``: "Unable to perform excessively large batch operation",
    KAFKA-14996 / KAFKA-17870), and a topic of 10,000 partitions is 10,002 of them."""
    steps = [min(partitions, KAFKA_MAX_NEW_PARTITIONS)]
    while steps[-1] < partitions:
        steps.append(min(partitions, steps[-1] + KAFKA_MAX_NEW_PARTITIONS))
    return steps


def kafka_full(state: dict[int, tuple[int, tuple[int, ...]]] | None, n: int) -> bool:
    """Every one of ``n`` partitions led with an ISR of 3."""
    return (state is not None and len(state) == n
            and all(leader >= 0 and len(isr) == 3 for leader, isr in state.values()))


def start_kafka_topic(bootstrap: str, partitions: int, max_seconds: float,
                      log: Callable[[str], object]) -> str | None:
    """Create the topic on Kafka and wait until every partition is led with a full ISR;
    a note on failure, None on success."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        NewPartitions,
        NewTopic,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if partitions:
        steps = kafka_creation_steps(partitions)
        futures = admin.create_topics(
            [NewTopic(TOPIC, steps[0], 3, config={"min.insync.replicas": "2"})],
            request_timeout=max_seconds, operation_timeout=max_seconds)
        futures[TOPIC].result(timeout=max_seconds)
        for total in steps[1:]:
            futures = admin.create_partitions([NewPartitions(TOPIC, total)],
                                              request_timeout=max_seconds,
                                              operation_timeout=max_seconds)
            futures[TOPIC].result(timeout=max_seconds)
        deadline = time.monotonic() + max_seconds
        while not kafka_full(_kafka_state(admin), partitions):
            if time.monotonic() > deadline:
                return f"Kafka: not all led with full ISRs after {max_seconds} s"
            time.sleep(1.0)
        log(f"idle: Kafka's {partitions:,} partitions led with full ISRs")
    return None


def wait_kafka_settled(bootstrap: str, pids: list[int], settle_s: float,
                       timeout_s: float) -> float | None:
    """Seconds until the topic's leaders and ISRs stayed the same for ``settle_s`` and then
    every JVM used under :data:`KAFKA_QUIET_PCT` of a core over :data:`KAFKA_QUIET_S`; None
    after ``timeout_s``."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    start = time.monotonic()
    last: object = None
    since = start
    while time.monotonic() - start < timeout_s:
        state = _kafka_state(admin)
        now = time.monotonic()
        if state != last:
            last, since = state, now
        elif now - since >= settle_s:
            before = [cpu_seconds(p) for p in pids]
            time.sleep(KAFKA_QUIET_S)
            busy = [(cpu_seconds(p) - b) / KAFKA_QUIET_S * 100 for p, b in zip(pids, before,
                                                                                 strict=True)]
            if max(busy) < KAFKA_QUIET_PCT:
                return time.monotonic() - start
            continue
        time.sleep(1.0)
    return None


# -- the measurement ---------------------------------------------------------------------------

def measure(partitions: int, *, window_s: float = 20.0, windows: int = 3,
            settle_s: float = 10.0, max_seconds: float = 600.0,
            say: object = print, logs_dir: Path | None = None,
            overrides: dict[str, str] | None = None, kafka: bool = False) -> IdlePoint:
    log: Callable[[str], object] = say if callable(say) else print
    point = IdlePoint(partitions, overrides=dict(overrides or {}))
    config = {**production_defaults(), "min.insync.replicas": "2", **point.overrides}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="strom-bench-idle-")))
        nulls = stack.enter_context(null_sleepers(tmp))
        cluster = stack.enter_context(running_cluster(tmp / "strom", brokers=3, config=config,
                                                      startup_timeout=600))
        pids = {f"strom-{b}": cluster.brokers[b].pid for b in cluster.brokers}
        if partitions:
            with Admin(cluster.bootstrap, request_timeout_ms=int(max_seconds * 1000)) as admin:
                admin.create_topic(TOPIC, partitions=partitions, replication_factor=3,
                                   configs={"min.insync.replicas": "2"})
            deadline = time.monotonic() + max_seconds
            while not _all_full(cluster, partitions):
                if time.monotonic() > deadline:
                    point.notes.append(f"not all led with full ISRs after {max_seconds} s")
                    return point
                time.sleep(1.0)
            log(f"idle: {partitions:,} partitions led with full ISRs")
        ref = None
        if kafka:
            from strom.testing.kafka import running_kafka

            log("idle: starting 3 Apache Kafka nodes beside the Strom brokers")
            ref = stack.enter_context(running_kafka(
                3, root=tmp, heap=KAFKA_HEAP, startup_timeout=max_seconds,
                config={"auto.create.topics.enable": "false"}))
            point.kafka_version = ref.version
            note = start_kafka_topic(ref.bootstrap, partitions, max_seconds, log)
            if note:
                point.notes.append(note)
                return point
            for i, node in ref.nodes.items():
                assert node.process is not None
                pids[f"kafka-{i}"] = node.process.pid
        point.settled_after_s, point.metadata_offset = wait_settled(cluster, settle_s,
                                                                    max_seconds)
        if point.settled_after_s is None:
            point.notes.append(f"metadata still moving after {max_seconds} s")
            return point
        log(f"idle: metadata settled at offset {point.metadata_offset} after "
            f"{point.settled_after_s:.1f} s")
        if ref is not None:
            point.kafka_settled_after_s = wait_kafka_settled(
                ref.bootstrap, [p for n, p in pids.items() if n.startswith("kafka-")],
                settle_s, max_seconds)
            if point.kafka_settled_after_s is None:
                point.notes.append(f"Kafka still moving after {max_seconds} s")
                return point
            log(f"idle: Kafka settled after {point.kafka_settled_after_s:.1f} s")
        pids.update(nulls)
        for _ in range(windows):
            point.windows.append(one_window(pids, window_s))
            w = point.windows[-1]
            for name, pw in w.processes.items():
                log(f"idle: {name}: {pw.cpu_pct:.2f} % (threads {pw.thread_cpu_pct:.2f} %), "
                    f"{pw.wakes_per_s:.0f} wakes/s, {pw.us_per_wake:.0f} us/wake; "
                    f"{top_groups(pw, 4)}")
            log(f"idle: load {w.load_avg:.1f}")
        try:
            offset = int(cluster.describe().metadata_offset)
            if offset != point.metadata_offset:
                point.notes.append(f"metadata moved during the windows: offset "
                                   f"{point.metadata_offset} -> {offset}")
        except Exception as exc:
            point.notes.append(f"describe after the windows failed: {exc}")
        if logs_dir is not None:
            logs_dir.mkdir(parents=True, exist_ok=True)
            for b, broker in cluster.brokers.items():
                shutil.copy(broker.stderr_path, logs_dir / f"{partitions}-broker-{b}.log")
            if ref is not None:
                for i, node in ref.nodes.items():
                    shutil.copy(node.log_path, logs_dir / f"{partitions}-kafka-{i}.log")
    return point


def one_window(pids: dict[str, int], window_s: float) -> Window:
    """Every process in ``pids`` over the same ``window_s`` seconds."""
    before = {name: sample(pid) for name, pid in pids.items()}
    start = time.monotonic()
    time.sleep(window_s)
    after = {name: sample(pid) for name, pid in pids.items()}
    seconds = time.monotonic() - start
    processes = {name: window(before[name], after[name], seconds) for name in pids}
    strom = {int(name.split("-")[1]): pw.cpu_pct for name, pw in processes.items()
             if name.startswith("strom-")}
    return Window(strom, os.getloadavg()[0], seconds, processes)


def table(point: IdlePoint) -> str:
    """The medians as a markdown table (one row per process and per system's mean broker)."""
    lines = ["| process | CPU % (stat) | CPU % (threads) | wakes/s | of which preempted/s | "
             "us/wake | threads |", "|---|---|---|---|---|---|---|"]
    for name, f in point.summary().items():
        if name == "strom / kafka":
            continue
        lines.append(f"| {name} | {f['cpu_pct']:.2f} | {f['thread_cpu_pct']:.2f} | "
                     f"{f['wakes_per_s']:.0f} | {f['preempted_per_s']:.0f} | "
                     f"{f['us_per_wake']:.0f} | {f['threads']:.0f} |")
    ratio = point.summary().get("strom / kafka")
    if ratio:
        lines.append(f"| strom / kafka | {ratio['cpu_pct']:.2f}x | "
                     f"{ratio['thread_cpu_pct']:.2f}x | {ratio['wakes_per_s']:.2f}x | | "
                     f"{ratio['us_per_wake']:.2f}x | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=0)
    parser.add_argument("--window-s", type=float, default=20.0)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--settle-s", type=float, default=10.0)
    parser.add_argument("--max-seconds", type=float, default=600.0)
    parser.add_argument("--kafka", action="store_true",
                        help="also 3 Apache Kafka nodes with the same topic, measured in the "
                             "same windows (needs Java and the jars kafka-ref/fetch gets)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--logs", type=Path, help="copy the brokers' logs into this directory")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting instead of its default (repeatable)")
    args = parser.parse_args()
    overrides = dict(item.split("=", 1) for item in args.set)
    point = measure(args.partitions, window_s=args.window_s, windows=args.windows,
                    settle_s=args.settle_s, max_seconds=args.max_seconds, logs_dir=args.logs,
                    overrides=overrides, kafka=args.kafka)
    medians = point.median_per_broker()
    print(f"idle CPU at {args.partitions:,} partitions, median of {len(point.windows)} "
          f"windows of {args.window_s:.0f} s: "
          + " / ".join(f"{v:.2f} %" for v in medians.values())
          + f" (load {[round(w.load_avg, 1) for w in point.windows]})"
          + (f" with {overrides}" if overrides else ""))
    if point.windows:
        print(table(point))
    for note in point.notes:
        print(f"note: {note}")
    if args.json:
        args.json.write_text(json.dumps({**asdict(point), "median_per_broker": medians,
                                         "summary": point.summary()}, indent=2))


if __name__ == "__main__":
    main()
