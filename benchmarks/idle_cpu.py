"""Idle CPU per broker on three brokers once the metadata has stopped moving (issue 21 item 2).

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

``--partitions 0`` is the empty cluster's floor: what the Raft timer, the Raft heartbeats, the
brokers' heartbeats to the controller, the controller's loop and the followers' long-polls cost
when there is nothing to do.

Run: ``uv run --all-packages python -m benchmarks.idle_cpu [--partitions N] [--window-s 20]
[--windows 3] [--settle-s 10] [--json PATH] [--logs DIR] [--set KEY=VALUE ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.failover import production_defaults
from benchmarks.partition_scale import cpu_seconds
from strom.client import Admin
from strom.testing import Cluster, running_cluster

TOPIC = "idle"


@dataclass
class Window:
    cpu_pct: dict[int, float]
    """Broker id -> its CPU over the window, % of one core."""
    load_avg: float


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

    def median_per_broker(self) -> dict[int, float]:
        ids = sorted({b for w in self.windows for b in w.cpu_pct})
        return {b: statistics.median(w.cpu_pct[b] for w in self.windows) for b in ids}


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


def measure(partitions: int, *, window_s: float = 20.0, windows: int = 3,
            settle_s: float = 10.0, max_seconds: float = 600.0,
            say: object = print, logs_dir: Path | None = None,
            overrides: dict[str, str] | None = None) -> IdlePoint:
    log = say if callable(say) else print
    point = IdlePoint(partitions, overrides=dict(overrides or {}))
    config = {**production_defaults(), "min.insync.replicas": "2", **point.overrides}
    with tempfile.TemporaryDirectory(prefix="strom-bench-idle-") as tmp, \
            running_cluster(Path(tmp), brokers=3, config=config, startup_timeout=600) as cluster:
        pids = {b: cluster.brokers[b].pid for b in cluster.brokers}
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
        point.settled_after_s, point.metadata_offset = wait_settled(cluster, settle_s,
                                                                    max_seconds)
        if point.settled_after_s is None:
            point.notes.append(f"metadata still moving after {max_seconds} s")
            return point
        log(f"idle: metadata settled at offset {point.metadata_offset} after "
            f"{point.settled_after_s:.1f} s")
        for _ in range(windows):
            before = {b: cpu_seconds(pid) for b, pid in pids.items()}
            time.sleep(window_s)
            w = Window({b: (cpu_seconds(pid) - before[b]) / window_s * 100
                        for b, pid in pids.items()}, os.getloadavg()[0])
            point.windows.append(w)
            log(f"idle: {[round(v, 2) for v in w.cpu_pct.values()]} % per broker, "
                f"load {w.load_avg:.1f}")
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
    return point


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=0)
    parser.add_argument("--window-s", type=float, default=20.0)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--settle-s", type=float, default=10.0)
    parser.add_argument("--max-seconds", type=float, default=600.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--logs", type=Path, help="copy the brokers' logs into this directory")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting instead of its default (repeatable)")
    args = parser.parse_args()
    overrides = dict(item.split("=", 1) for item in args.set)
    point = measure(args.partitions, window_s=args.window_s, windows=args.windows,
                    settle_s=args.settle_s, max_seconds=args.max_seconds, logs_dir=args.logs,
                    overrides=overrides)
    medians = point.median_per_broker()
    print(f"idle CPU at {args.partitions:,} partitions, median of {len(point.windows)} "
          f"windows of {args.window_s:.0f} s: "
          + " / ".join(f"{v:.2f} %" for v in medians.values())
          + f" (load {[round(w.load_avg, 1) for w in point.windows]})"
          + (f" with {overrides}" if overrides else ""))
    for note in point.notes:
        print(f"note: {note}")
    if args.json:
        args.json.write_text(json.dumps({**asdict(point), "median_per_broker": medians},
                                        indent=2))


if __name__ == "__main__":
    main()
