"""Partition scale (issue 21): what one broker and Strom's own client cost as partitions grow.

For each N (10, 100, 1,000 by default) on one fresh broker (RF 1, acks=1): the time to create a
topic of N partitions, keyed produce of 100 B records spread over all N with a default
``Producer`` (what a new user writes), catch-up consume of them, and the broker's open file
handles idle and after the produce (``/proc/PID/fd``). Keyed produce is the case that used to
collapse: the sender scanned every partition on each wake-up.

Run alone: ``uv run --all-packages python -m benchmarks.partition_scale [--records N]
[--counts 10,100,1000] [--png PATH]``; ``python -m benchmarks --only partition-scale`` runs it as
a section of the suite (table + JSON).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import strom_workloads as sw
from strom.client import Admin, Producer


@dataclass
class ScalePoint:
    partitions: int
    create_s: float
    produce_rps: float
    consume_rps: float
    fds_idle: int
    fds_after_produce: int


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def produce_keyed(bootstrap: str, topic: str, records: int, value_size: int = 100,
                  acks: int = 1) -> sw.Throughput:
    """``records`` values with distinct keys (so they spread over every partition), default
    producer settings apart from ``acks``; the time includes the final flush."""
    value = os.urandom(value_size)
    keys = [b"key-%d" % i for i in range(records)]
    producer = Producer(bootstrap, acks=acks)
    try:
        send = producer.send
        start = time.perf_counter()
        for key in keys:
            send(topic, value, key=key)
        producer.flush()
        elapsed = time.perf_counter() - start
    finally:
        producer.close()
    return sw.Throughput(records, elapsed, records * value_size)


def create_topic(bootstrap: str, topic: str, partitions: int) -> float:
    """Seconds to create ``topic`` (the broker answers once its partitions exist); a long
    timeout: at thousands of partitions creation is slow (issue 21 item 2)."""
    admin = Admin(bootstrap, request_timeout_ms=300_000)
    try:
        start = time.perf_counter()
        admin.create_topic(topic, partitions=partitions, replication_factor=1)
        return time.perf_counter() - start
    finally:
        admin.close()


def measure(counts: list[int], records: int, progress: object = print) -> list[ScalePoint]:
    from strom.testing import running_broker

    say = progress if callable(progress) else print
    points: list[ScalePoint] = []
    for n in counts:
        with tempfile.TemporaryDirectory(prefix="strom-bench-scale-") as tmp, \
                running_broker(Path(tmp)) as broker:
            bs = broker.bootstrap
            create_s = create_topic(bs, "scale", n)
            time.sleep(0.5)  # let every partition's log open
            idle = open_fds(broker.pid)
            say(f"partition scale: keyed produce of {records:,} x 100 B over {n:,} partitions")
            p = produce_keyed(bs, "scale", records)
            after = open_fds(broker.pid)
            c = sw.consume_all(bs, "scale", n, records, 100)
            points.append(ScalePoint(n, create_s, p.records_per_s, c.records_per_s, idle, after))
            say(f"partition scale: {points[-1]}")
    return points


def format_points(points: list[ScalePoint]) -> str:
    base = points[0]
    lines = ["| partitions | create s | keyed produce rec/s | x first | consume rec/s | x first "
             "| fds idle / after produce |",
             "|---|---|---|---|---|---|---|"]
    for p in points:
        lines.append(f"| {p.partitions:,} | {p.create_s:.2f} | {p.produce_rps:,.0f} | "
                     f"{p.produce_rps / base.produce_rps:.2f} | {p.consume_rps:,.0f} | "
                     f"{p.consume_rps / base.consume_rps:.2f} | {p.fds_idle} / "
                     f"{p.fds_after_produce} |")
    return "\n".join(lines)


def plot(points: list[ScalePoint], path: Path) -> bool:
    """A PNG of the rates against the partition count, if matplotlib is installed (it is not
    a dependency of Strom; the table and JSON do not need it)."""
    try:
        import matplotlib  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [p.partitions for p in points]
    ax.plot(xs, [p.produce_rps for p in points], marker="o", label="keyed produce")
    ax.plot(xs, [p.consume_rps for p in points], marker="o", label="consume")
    ax.set_xscale("log")
    ax.set_xlabel("partitions (one broker, RF 1)")
    ax.set_ylabel("records/s")
    ax.legend()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--counts", default="10,100,1000")
    parser.add_argument("--png", type=Path, default=None)
    args = parser.parse_args(argv)
    points = measure([int(c) for c in args.counts.split(",")], args.records)
    print(format_points(points))
    if args.png is not None and not plot(points, args.png):
        print("matplotlib is not installed: no PNG")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
