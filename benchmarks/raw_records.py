"""What the equal-cost raw clients of section ``kafka-listener`` share: the pre-built batch they
produce, the walk over RecordBatch headers that counts what a Fetch returned, and the two loops.

Issue 14's target is "the Kafka listener within 0.8x of the gRPC path's throughput with the same
client-side cost". The rows of real clients (Strom's Python client on gRPC, librdkafka through
confluent-kafka on the listener) do not cost the same on the client side: catch-up consume
through confluent-kafka was bound by its Python consume loop. The raw clients
(:mod:`benchmarks.raw_grpc`, :mod:`benchmarks.raw_kafka`) differ only in the protocol: both run
these loops, send the same batch bytes, read the same bytes of record batches, and count them
here without decoding a record. Pure: no sockets, testable alone.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Mapping

from benchmarks.strom_workloads import Throughput
from strom.protocol.records import BatchBuilder

#: RecordBatch v2 header: baseOffset int64 at 0, batchLength int32 at 8 (bytes after it),
#: lastOffsetDelta int32 at 23, recordsCount int32 at 57; 61 bytes in all.
_BASE_AND_LENGTH = struct.Struct(">qi")
_LAST_DELTA = struct.Struct(">i")
_HEADER_BYTES = 61
_LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count

#: A Fetch answer's records per partition: partition -> its bytes (bytes or a view of them).
Answer = Mapping[int, bytes | memoryview]


def build_batch(records: int, value_size: int) -> bytes:
    """One uncompressed RecordBatch v2 of ``records`` values of ``value_size`` random-ish bytes,
    no key, no producer id (not idempotent): the broker accepts the same bytes again and
    again, giving each copy new offsets."""
    value = bytes(range(256)) * (value_size // 256 + 1)
    builder = BatchBuilder(batch_size=(1 << 31) - 1)
    for _ in range(records):
        builder.append(None, value[:value_size], None)
    return builder.build()


def count_records(records: bytes | memoryview, fetch_offset: int) -> tuple[int, int]:
    """(records at or after ``fetch_offset``, the next offset to fetch) of the whole batches in
    ``records``, read from their headers only.

    The first batch may start before ``fetch_offset`` (a fetch answers whole batches); its
    records below it are not counted (offsets in a batch are consecutive in an uncompacted
    log, which is what the benchmark reads). A batch cut off at the end (a size limit) is
    not counted and the next offset stays at its start. Empty: (0, ``fetch_offset``)."""
    view = memoryview(records)
    size = len(view)
    position, count, next_offset = 0, 0, fetch_offset
    while position + _HEADER_BYTES <= size:
        base, length = _BASE_AND_LENGTH.unpack_from(view, position)
        end = position + _LOG_OVERHEAD + length
        if end > size:
            break
        last = base + _LAST_DELTA.unpack_from(view, position + 23)[0]
        if last >= next_offset:
            count += last + 1 - max(base, next_offset)
            next_offset = last + 1
        position = end
    return count, next_offset


def catch_up(fetch: Callable[[Mapping[int, int]], Answer], partitions: int, records: int,
             value_size: int, timeout_s: float = 300.0) -> Throughput:
    """Fetch every partition from offset 0 with ``fetch`` (one request for all partitions at
    their next offsets, the answer's record bytes per partition) until ``records`` are read;
    both raw clients run this loop, so the work per answer is the same."""
    offsets = dict.fromkeys(range(partitions), 0)
    got = 0
    start = time.perf_counter()
    deadline = start + timeout_s
    while got < records:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"fetched only {got} of {records} records in {timeout_s}s")
        for partition, data in fetch(offsets).items():
            n, offsets[partition] = count_records(data, offsets[partition])
            got += n
    elapsed = time.perf_counter() - start
    return Throughput(got, elapsed, got * value_size)


def requests_for(records: int, partitions: int, batch_records: int) -> int:
    """Produce requests (one batch of ``batch_records`` to each partition) that carry at least
    ``records``."""
    per_request = partitions * batch_records
    return -(-records // per_request)


def produce_loop(send: Callable[[], None], requests: int, records_per_request: int,
                 value_size: int) -> Throughput:
    """Call ``send`` (one request, waits for its answer, raises on an error) ``requests``
    times, one in flight: the timed part of both raw producers."""
    start = time.perf_counter()
    for _ in range(requests):
        send()
    elapsed = time.perf_counter() - start
    n = requests * records_per_request
    return Throughput(n, elapsed, n * value_size)
