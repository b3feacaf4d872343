"""Bounded load for the Kubernetes flows: produce numbered records with acks=all and report
which were acknowledged; read a topic back; check that every acknowledged record came back
exactly once and in order per partition.

Runs the same way in a pod (a Job in the broker image: ``python -m strom.testing.kube.loadgen
produce ...``) and on the host (through the cluster's DNS, see
:mod:`strom.testing.kube.platform`). Each record's value is ``<source>:<seq>`` (``seq`` counts
from 0 per producer); the key spreads records over partitions. ``produce`` prints one JSON line:
how many were sent, acknowledged and failed, the acknowledged sequence numbers as ranges, and per
partition the longest time without an acknowledgement while records were waiting (what the
partition's unavailability looks like to a producer). With ``--progress-s S`` it also prints,
every S seconds while it sends, a ``{"progress": {...}}`` line (sent and acknowledged so far;
:func:`last_progress` reads the newest), so a test can wait until load is really flowing
instead of sleeping; the result stays the last line. ``read`` writes every record of a topic,
as a consumer group member that commits, to a file of JSON lines; :func:`check` is the pure
verdict over both.

Loops are bounded: ``--count`` records at most ``--rate`` per second, and ``--max-seconds``;
SIGTERM stops ``produce`` early (it still waits for what it sent and reports).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from strom.client.consumer import Consumer
from strom.client.models import RecordMetadata, TopicPartition
from strom.client.producer import Producer
from strom.client.producer_batch import DeliveryCallback


def ranges(values: Iterable[int]) -> list[list[int]]:
    """Sorted integers as inclusive ``[first, last]`` runs."""
    out: list[list[int]] = []
    for v in sorted(values):
        if out and v == out[-1][1] + 1:
            out[-1][1] = v
        else:
            out.append([v, v])
    return out


def expand(runs: Sequence[Sequence[int]]) -> set[int]:
    return {v for first, last in runs for v in range(first, last + 1)}


class _Acks:
    """Delivery callbacks (on the producer's thread): what was acknowledged, and per partition
    the longest wait between acknowledgements while records were outstanding."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: list[int] = []
        self.errors: dict[str, int] = {}
        self.last_ack: dict[int, float] = {}
        self.gap: dict[int, float] = {}
        self.gap_at: dict[int, float] = {}

    def callback(self, seq: int) -> DeliveryCallback:
        def done(meta: RecordMetadata | None, err: BaseException | None) -> None:
            now = time.monotonic()
            with self.lock:
                if err is not None or meta is None:
                    name = type(err).__name__ + (f": {err}"[:80] if err else "")
                    self.errors[name] = self.errors.get(name, 0) + 1
                    return
                self.acked.append(seq)
                p = meta.partition
                last = self.last_ack.get(p)
                if last is not None and now - last > self.gap.get(p, 0.0):
                    self.gap[p] = now - last
                    self.gap_at[p] = time.time() - (now - last)
                self.last_ack[p] = now
        return done


def last_progress(output: str) -> dict[str, int] | None:
    """The newest progress report (``sent``, ``acked``) in a producer's output so far, or
    None before the first one (a line cut short by a concurrent write is skipped)."""
    for line in reversed(output.splitlines()):
        if not line.startswith('{"progress"'):
            continue
        try:
            report: dict[str, int] = json.loads(line)["progress"]
        except ValueError:
            continue
        return report
    return None


def produce(bootstrap: str, topic: str, source: str, count: int, rate: float,
            max_seconds: float, keys: int = 240, progress_s: float = 0.0) -> dict[str, Any]:
    acks = _Acks()
    started = time.monotonic()
    sent = 0
    reported = started
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    producer = Producer(bootstrap, acks="all", enable_idempotence=True, linger_ms=20,
                        delivery_timeout_ms=180_000, request_timeout_ms=10_000,
                        retries=2_147_483_647, retry_backoff_ms=100, max_block_ms=60_000)
    try:
        tick = 0.05
        per_tick = max(1, int(rate * tick))
        while sent < count and time.monotonic() - started < max_seconds and not stop.is_set():
            if progress_s > 0 and time.monotonic() - reported >= progress_s:
                reported = time.monotonic()
                with acks.lock:
                    acked = len(acks.acked)
                print(json.dumps({"progress": {"sent": sent, "acked": acked}}), flush=True)
            due = started + (sent / rate)
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(min(delay, tick))
                continue
            for _ in range(min(per_tick, count - sent)):
                producer.send(topic, f"{source}:{sent}".encode(),
                              key=f"{source}-{sent % keys}".encode(),
                              on_delivery=acks.callback(sent))
                sent += 1
        producer.flush(timeout=240)
    finally:
        producer.close(timeout=30)
    with acks.lock:
        return {
            "source": source, "sent": sent, "acked": len(acks.acked),
            "failed": sum(acks.errors.values()), "errors": acks.errors,
            "acked_ranges": ranges(acks.acked),
            "max_ack_gap_s": {str(p): round(g, 3) for p, g in sorted(acks.gap.items())},
            "max_ack_gap_at": {str(p): round(t, 3) for p, t in sorted(acks.gap_at.items())},
            "seconds": round(time.monotonic() - started, 1), "stopped": stop.is_set(),
        }


def read(bootstrap: str, topic: str, group: str, out_path: str,
         max_seconds: float) -> dict[str, Any]:
    """Every record of ``topic`` up to the end offsets seen at the start, in offset order per
    partition, as a group member that commits what it read."""
    started = time.monotonic()
    consumer = Consumer(bootstrap, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False, max_poll_records=2000)
    try:
        consumer.subscribe([topic])
        ends: dict[TopicPartition, int] | None = None
        positions: dict[int, int] = {}
        n = 0
        with open(out_path, "w", encoding="utf-8") as out:
            while time.monotonic() - started < max_seconds:
                records = consumer.poll(timeout_ms=1000)
                for r in records:
                    out.write(json.dumps([r.partition, r.offset,
                                          (r.value or b"").decode()]) + "\n")
                    positions[r.partition] = r.offset + 1
                    n += 1
                if records:
                    consumer.commit()
                assignment = consumer.assignment()
                if ends is None and assignment:
                    ends = consumer.end_offsets(assignment)
                if ends is not None and all(
                        positions.get(tp.partition, 0) >= end for tp, end in ends.items()
                        if end > 0) and len(ends) == len(assignment):
                    break
        consumer.commit()
        return {"records": n, "end_offsets": {str(tp.partition): e for tp, e in
                                              sorted((ends or {}).items())},
                "seconds": round(time.monotonic() - started, 1)}
    finally:
        consumer.close()


def check(acked: Mapping[str, set[int]], records: Iterable[tuple[int, int, str]]
          ) -> dict[str, Any]:
    """Every acknowledged ``source:seq`` read exactly once; per partition and source, sequence
    numbers strictly increasing (order kept, no duplicate); offsets dense and increasing."""
    seen: dict[str, dict[int, int]] = {s: {} for s in acked}
    last_seq: dict[tuple[int, str], int] = {}
    last_offset: dict[int, int] = {}
    out_of_order: list[str] = []
    duplicates: list[str] = []
    for partition, offset, value in records:
        source, _, seq_text = value.partition(":")
        seq = int(seq_text)
        prev_offset = last_offset.get(partition)
        if prev_offset is not None and offset <= prev_offset:
            out_of_order.append(f"p{partition} offset {offset} after {prev_offset}")
        last_offset[partition] = offset
        counts = seen.setdefault(source, {})
        counts[seq] = counts.get(seq, 0) + 1
        if counts[seq] > 1:
            duplicates.append(f"{value} (p{partition}@{offset})")
        prev = last_seq.get((partition, source))
        if prev is not None and seq <= prev:
            out_of_order.append(f"p{partition}: {value} after {source}:{prev}")
        last_seq[(partition, source)] = seq
    lost = {s: sorted(want - set(seen.get(s, {}))) for s, want in acked.items()}
    return {
        "lost": {s: ranges(v) for s, v in lost.items() if v},
        "lost_count": sum(len(v) for v in lost.values()),
        "duplicates": duplicates[:20], "duplicate_count": len(duplicates),
        "out_of_order": out_of_order[:20], "out_of_order_count": len(out_of_order),
        "read": {s: len(v) for s, v in seen.items()},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strom.testing.kube.loadgen")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--rate", type=float, default=1000.0)
    p.add_argument("--max-seconds", type=float, default=600.0)
    p.add_argument("--progress-s", type=float, default=0.0,
                   help="print a progress line (sent, acknowledged) this often (0: never)")
    r = sub.add_parser("read")
    r.add_argument("--bootstrap", required=True)
    r.add_argument("--topic", required=True)
    r.add_argument("--group", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--max-seconds", type=float, default=300.0)
    args = parser.parse_args(argv)
    if args.cmd == "produce":
        result = produce(args.bootstrap, args.topic, args.source, args.count, args.rate,
                         args.max_seconds, progress_s=args.progress_s)
    else:
        result = read(args.bootstrap, args.topic, args.group, args.out, args.max_seconds)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
