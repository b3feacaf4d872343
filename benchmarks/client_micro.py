"""Micro-benchmark of the client's per-record costs, without a broker.

Measures what bounds a single Python producer or consumer: the cost of ``Producer.send()`` (route,
append to the open batch, lazy future) with the network out of the picture, what the sender does
per batch after that (close: the codec's CRC; the Produce request bytes), the broker's leader
append of a 1 MiB batch (into a temp dir) and its record validation alone, and the cost of
turning fetched bytes into ``Record`` objects (``decode_batches``, as ``Consumer.poll`` does;
the poll path with and without CRC checks). All per record.
Not a test; run ``uv run python benchmarks/client_micro.py [--records N]``. Prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from strom.client import AsyncProducer, Producer, TopicPartition
from strom.client.consumer_settings import ConsumerSettings
from strom.client.fetcher import ConsumerCore
from strom.client.partitioner import murmur2
from strom.client.positions import CompletedFetch
from strom.client.produce_request import encode_produce_request
from strom.protocol.batch import validate_batches
from strom.protocol.records import BatchBuilder, Compression, decode_batches
from strom.protocol.v1 import broker_pb2, common_pb2
from strom.protocol.validation import RecordPolicy, validate_records
from strom.storage import LogConfig, PartitionLog


def _offline_producer(**kw: object) -> Producer:
    """A producer whose metadata is injected, pointed at a port nobody listens on."""
    p = Producer("127.0.0.1:1", linger_ms=60_000, batch_size=1 << 20, buffer_memory=1 << 32,
                 max_in_flight_requests_per_connection=1, retry_backoff_ms=1000,
                 **kw)  # type: ignore[arg-type]
    p._core.metadata.update(_metadata(), time.monotonic() * 1000)
    return p


def _metadata() -> broker_pb2.MetadataResponse:
    """Topic ``t`` with 8 partitions led by broker 1 on a port nobody listens on."""
    return broker_pb2.MetadataResponse(
        cluster_id="bench", controller_id=1,
        brokers=[common_pb2.BrokerEndpoint(broker_id=1, host="127.0.0.1", port=1)],
        topics=[broker_pb2.TopicMetadata(name="t", partitions=[
            broker_pb2.PartitionMetadata(partition=i, leader=1) for i in range(8)])])


def bench_send(n: int, value: bytes, keyed: bool, callback: bool) -> float:
    p = _offline_producer()
    send = p.send
    keys = [b"k%d" % i for i in range(1024)]
    cb = (lambda md, err: None) if callback else None
    start = time.perf_counter()
    if keyed:
        for i in range(n):
            send("t", value, key=keys[i & 1023], on_delivery=cb)
    else:
        for _ in range(n):
            send("t", value, on_delivery=cb)
    elapsed = time.perf_counter() - start
    p.close(timeout=0)
    return elapsed


def bench_async_send(n: int, value: bytes) -> float:
    """``AsyncProducer.send()`` (an asyncio future per record) with injected metadata."""

    async def run() -> float:
        p = AsyncProducer("127.0.0.1:1", linger_ms=60_000, batch_size=1 << 20,
                          buffer_memory=1 << 32, retry_backoff_ms=1000, acks=1)
        p._core.metadata.update(_metadata(), time.monotonic() * 1000)
        await p.start()
        send = p.send
        futures = []
        start = time.perf_counter()
        for _ in range(n):
            futures.append(send("t", value))
        elapsed = time.perf_counter() - start
        await p.close(timeout=0)
        for f in futures:  # failed by the close (no broker): retrieve so asyncio stays quiet
            f.exception()
        return elapsed

    return asyncio.run(run())


def bench_builder(n: int, value: bytes) -> float:
    start = time.perf_counter()
    b = BatchBuilder(Compression.NONE, 1 << 20)
    for _ in range(n):
        if not b.append(None, value, 1_700_000_000_000):
            b.build()
            b = BatchBuilder(Compression.NONE, 1 << 20)
            b.append(None, value, 1_700_000_000_000)
    return time.perf_counter() - start


def bench_batch_out(value: bytes, batches: int = 20) -> tuple[float, float, int]:
    """Per 1 MiB batch, the sender's work after the appends: close (the codec's header and
    CRC-32C) and the Produce request bytes. Returns (close s, encode s, records per batch)."""
    closing = encoding = 0.0
    count = 0
    for _ in range(batches):
        b = BatchBuilder(Compression.NONE, 1 << 20)
        while b.append(None, value, 1_700_000_000_000):
            pass
        count = len(b)
        start = time.perf_counter()
        data = b.build_buffer()
        closing += time.perf_counter() - start
        start = time.perf_counter()
        encode_produce_request(1, 30_000, [("t", 0, data)])
        encoding += time.perf_counter() - start
    return closing / batches, encoding / batches, count


def bench_leader_append(value: bytes, batches: int = 50) -> tuple[float, int]:
    """The broker's ``PartitionLog.append_as_leader`` of 1 MiB batches into a temp dir."""
    b = BatchBuilder(Compression.NONE, 1 << 20)
    while b.append(None, value, 1_700_000_000_000):
        pass
    data, count = b.build(), len(b)
    with tempfile.TemporaryDirectory() as tmp:
        plog = PartitionLog.open(Path(tmp), LogConfig(segment_bytes=1 << 30), topic="t",
                                 partition=0)
        start = time.perf_counter()
        for _ in range(batches):
            plog.append_as_leader(data, 0)
        elapsed = time.perf_counter() - start
        plog.close()
    return elapsed / batches, count


def _batches(n: int, value: bytes, compression: Compression) -> bytes:
    out = bytearray()
    b = BatchBuilder(compression, 1 << 20)
    for _ in range(n):
        if not b.append(None, value, 1_700_000_000_000):
            out += b.build()
            b = BatchBuilder(compression, 1 << 20)
            b.append(None, value, 1_700_000_000_000)
    out += b.build()
    return bytes(out)


def bench_decode(data: bytes) -> tuple[float, int]:
    start = time.perf_counter()
    count = sum(1 for _ in decode_batches(data, "t", 0, 0))
    return time.perf_counter() - start, count


def bench_validate(data: bytes) -> tuple[float, int]:
    """The leader's record validation alone (Kafka's LogValidator: every record decoded)."""
    headers = validate_batches(data)
    start = time.perf_counter()
    validate_records(data, headers, RecordPolicy(), 1_700_000_000_000)
    return time.perf_counter() - start, sum(h.records_count for h in headers)


def bench_poll_path(data: bytes, n: int, check_crcs: bool = True) -> float:
    """Consumer.take() over a prefetched answer: decode + slicing + position bookkeeping."""
    settings = ConsumerSettings.build("127.0.0.1:1", fetch_max_wait_ms=0, fetch_min_bytes=1,
                                      fetch_max_bytes=1 << 26, max_partition_fetch_bytes=1 << 26,
                                      max_poll_records=100_000, auto_offset_reset="earliest",
                                      request_timeout_ms=1000, retry_backoff_ms=100,
                                      retry_backoff_max_ms=100, check_crcs=check_crcs)
    core = ConsumerCore(settings, lambda: None)
    tp = TopicPartition("t", 0)
    core.subs.assign([tp])
    core.subs.seek(tp, 0)
    gen = core.subs.states[tp].generation
    core.subs.completed.append(CompletedFetch(tp, gen, data, 0, n))
    core.subs.states[tp].buffered = 1
    start = time.perf_counter()
    got = 0
    while got < n:
        records, _ = core.take(100_000)
        got += len(records)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--value-size", type=int, default=100)
    args = ap.parse_args()
    n, value = args.records, os.urandom(args.value_size)
    rows: list[tuple[str, float]] = []

    def row(name: str, seconds: float, count: int = n) -> None:
        rows.append((name, seconds / count * 1e6))

    row("BatchBuilder.append (codec floor)", bench_builder(n, value))
    row("Producer.send() null key (sticky)", bench_send(n, value, keyed=False, callback=False))
    row("Producer.send() keyed (1024 keys)", bench_send(n, value, keyed=True, callback=False))
    row("Producer.send() + on_delivery", bench_send(n, value, keyed=False, callback=True))
    row("AsyncProducer.send() null key", bench_async_send(n // 2, value), n // 2)
    big = os.urandom(1024)
    row("Producer.send() null key, 1 KiB value", bench_send(n // 4, big, keyed=False,
                                                            callback=False), n // 4)
    for v in (value, big):
        close_s, encode_s, count = bench_batch_out(v)
        row(f"batch close (codec CRC), {len(v)} B", close_s, count)
        row(f"Produce request encode, {len(v)} B", encode_s, count)
        append_s, count = bench_leader_append(v)
        row(f"broker append_as_leader, {len(v)} B", append_s, count)
    keys = [os.urandom(16) for _ in range(10_000)]
    start = time.perf_counter()
    for k in keys:
        murmur2(k)
    row("murmur2 (16-byte key, uncached)", time.perf_counter() - start, len(keys))
    for comp in (Compression.NONE, Compression.LZ4, Compression.ZSTD):
        data = _batches(n, value, comp)
        seconds, count = bench_decode(data)
        row(f"decode_batches ({comp.name.lower()})", seconds, count)
        seconds, count = bench_validate(data)
        row(f"broker record validation ({comp.name.lower()})", seconds, count)
    data = _batches(n, value, Compression.NONE)
    row("Consumer poll path (take), check_crcs", bench_poll_path(data, n))
    row("Consumer poll path, check_crcs=False", bench_poll_path(data, n, check_crcs=False))

    print(f"{'operation':40} {'us/record':>10} {'records/s':>12}")
    for name, us in rows:
        print(f"{name:40} {us:10.3f} {1e6 / us:12,.0f}")


if __name__ == "__main__":
    main()
