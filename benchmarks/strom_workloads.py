"""Workloads run against Strom with its own Python client: producer throughput, consumer catch-up,
end-to-end latency at a fixed rate below saturation.

Each function takes a bootstrap address and returns plain numbers, so the same workloads can be
pointed at a single broker, at RF=3 on three local brokers, or at a log pre-filled with 2 GB.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strom.client import Admin, Consumer, Producer, TopicPartition

_TS = struct.Struct(">d")


@dataclass
class Throughput:
    records: int
    seconds: float
    bytes: int

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds else 0.0


def median_run(runs: list[Throughput]) -> Throughput:
    """The run with the median rate (the lower middle one of an even count)."""
    ordered = sorted(runs, key=lambda t: t.records_per_s)
    return ordered[(len(ordered) - 1) // 2]


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int = 1,
                 configs: dict[str, str] | None = None) -> None:
    admin = Admin(bootstrap)
    try:
        admin.create_topic(topic, partitions=partitions, replication_factor=replication_factor,
                           configs=configs or {})
    finally:
        admin.close()


def delete_topics(bootstrap: str, topics: list[str], data_root: Path,
                  timeout_s: float = 30.0) -> None:
    """Delete ``topics`` and wait until no broker under ``data_root`` has their logs (so their
    page cache is free again before the next run)."""
    admin = Admin(bootstrap)
    try:
        admin.delete_topics(topics)
    finally:
        admin.close()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(next(data_root.rglob(f"{t}-[0-9]*"), None) for t in topics):
            return
        time.sleep(0.1)
    raise RuntimeError(f"logs of {topics} still on disk {timeout_s:.0f}s after deletion")


def produce(bootstrap: str, topic: str, records: int, value_size: int, *, acks: int | str = 1,
            batch_size: int = 1 << 20, linger_ms: int = 5, keyed: bool = False) -> Throughput:
    """Send ``records`` values as fast as the client allows; time includes the final flush."""
    value = os.urandom(value_size)
    producer = Producer(bootstrap, acks=acks, batch_size=batch_size, linger_ms=linger_ms)
    try:
        send = producer.send
        start = time.perf_counter()
        if keyed:
            for i in range(records):
                send(topic, value, key=b"k%d" % (i % 1024))
        else:
            for _ in range(records):
                send(topic, value)
        producer.flush()
        elapsed = time.perf_counter() - start
    finally:
        producer.close()
    return Throughput(records, elapsed, records * value_size)


def consume_all(bootstrap: str, topic: str, partitions: int, records: int, value_size: int,
                timeout_s: float = 300.0, *, tail: bool = False) -> Throughput:
    """Read ``records`` from the beginning of every partition (consumer catch-up), or with
    ``tail`` the last ``records / partitions`` of each (reads at the head of a big log).

    Like the peers' consume loops, it counts what each poll returns and does not touch the
    records (a per-record loop here cost ~0.3 us a record, ~30 % of the measured time, which
    the peers' loops do not pay); ``value_size`` gives the bytes, as it does for them."""
    consumer = Consumer(bootstrap, max_poll_records=100_000, fetch_max_bytes=64 << 20,
                        max_partition_fetch_bytes=8 << 20)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        if tail:
            for tp, end in consumer.end_offsets(tps).items():
                consumer.seek(tp, max(0, end - records // partitions))
        else:
            consumer.seek_to_beginning(*tps)
        return timed_catch_up(lambda: len(consumer.poll(timeout_ms=1000)), records, value_size,
                              timeout_s)
    finally:
        consumer.close()


def timed_catch_up(poll: Callable[[], int], records: int, value_size: int,
                   timeout_s: float) -> Throughput:
    """Call ``poll`` (it returns how many records it read) until ``records`` are read; the
    time it took, or RuntimeError after ``timeout_s``."""
    got = 0
    start = time.perf_counter()
    deadline = start + timeout_s
    while got < records and time.perf_counter() < deadline:
        got += poll()
    elapsed = time.perf_counter() - start
    if got < records:
        raise RuntimeError(f"consumed only {got} of {records} records in {timeout_s}s")
    return Throughput(got, elapsed, got * value_size)


def _latency_consumer(bootstrap: str, topic: str, partitions: int, expected: int,
                      ready: mp.synchronize.Event, out: mp.Queue[list[float]],
                      timeout_s: float) -> None:
    consumer = Consumer(bootstrap, fetch_max_wait_ms=100, max_poll_records=10_000)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_end(*tps)
    for tp in tps:
        consumer.position(tp)
    ready.set()
    latencies: list[float] = []
    deadline = time.time() + timeout_s
    while len(latencies) < expected and time.time() < deadline:
        for r in consumer.poll(timeout_ms=200):
            now = time.time()
            if r.value is not None and len(r.value) >= 8:
                latencies.append((now - _TS.unpack_from(r.value)[0]) * 1000.0)
    consumer.close()
    out.put(latencies)


def end_to_end_latency(bootstrap: str, topic: str, partitions: int, rate: int, seconds: float,
                       value_size: int = 100, acks: int | str = 1) -> list[float]:
    """Produce at a fixed ``rate`` for ``seconds``; return sorted producer-to-consumer latencies
    in ms, measured by a consumer in another process (wall clock on the same machine)."""
    total = int(rate * seconds)

    def produce_paced() -> None:
        producer = Producer(bootstrap, acks=acks, linger_ms=0, batch_size=16384)
        send_paced(lambda value: producer.send(topic, value), rate, total, value_size)
        producer.flush()
        producer.close()

    return run_latency(_latency_consumer, (bootstrap, topic, partitions), total, seconds,
                       produce_paced)


def send_paced(send: Callable[[bytes], object], rate: int, total: int, value_size: int) -> None:
    """``total`` values of ``value_size`` bytes at ``rate`` a second, each starting with its send
    time (wall clock, the ``_TS`` format the latency consumers read)."""
    pad = b"\0" * max(0, value_size - 8)
    start = time.perf_counter()
    interval = 1.0 / rate
    for i in range(total):
        target = start + i * interval
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send(_TS.pack(time.time()) + pad)


def run_latency(consumer: Callable[..., None], consumer_args: tuple[object, ...], total: int,
                seconds: float, produce: Callable[[], None]) -> list[float]:
    """Start ``consumer(*consumer_args, total, ready, out, timeout_s)`` in a spawned process,
    run ``produce`` once it is ready, and return the sorted latencies (ms) it puts on ``out``."""
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    out: mp.Queue[list[float]] = ctx.Queue()
    proc = ctx.Process(target=consumer, args=(*consumer_args, total, ready, out, seconds + 60))
    proc.start()
    try:
        if not ready.wait(60):
            raise RuntimeError("latency consumer did not start within 60 s")
        produce()
        latencies: list[float] = out.get(timeout=seconds + 90)
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
    latencies.sort()
    return latencies


def prefill(bootstrap: str, topic: str, total_bytes: int, value_size: int = 1024) -> Throughput:
    """Write ``total_bytes`` of data into ``topic`` (for the big-log vs empty-log comparison)."""
    return produce(bootstrap, topic, max(1, total_bytes // value_size), value_size)
