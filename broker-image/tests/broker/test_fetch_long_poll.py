"""Fetch: long-poll on min_bytes / max_wait_ms, size limits (KIP-74), offsets and errors."""

from __future__ import annotations

import asyncio
import time

import pytest

from strom.broker import fetch, produce
from strom.broker.core import BrokerCore
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import decode_batches, encode_batch
from strom.protocol.v1 import broker_pb2
from strom.testing.waits import async_wait_until


def _fetch(offset: int = 0, *, topic: str = "t", partition: int = 0, min_bytes: int = 1,
           max_wait_ms: int = 0, max_bytes: int = 0, partition_max_bytes: int = 0,
           epoch: int = -1) -> broker_pb2.FetchRequest:
    return broker_pb2.FetchRequest(
        max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
        partitions=[broker_pb2.FetchPartition(topic=topic, partition=partition,
                                              fetch_offset=offset,
                                              partition_max_bytes=partition_max_bytes,
                                              current_leader_epoch=epoch)])


async def _produce(core: BrokerCore, values: list[bytes], topic: str = "t",
                   partition: int = 0) -> int:
    response = await produce.handle(core, broker_pb2.ProduceRequest(acks=1, partitions=[
        broker_pb2.PartitionProduceData(topic=topic, partition=partition,
                                        records=encode_batch([(None, v) for v in values]))]))
    assert response.partitions[0].error_code == 0, response.partitions[0].error_message
    return response.partitions[0].base_offset


@pytest.fixture
async def topic_core(core: BrokerCore) -> BrokerCore:
    await core.topics.create_topic("t", 2)
    return core


async def _parked(core: BrokerCore, fetches: int = 1) -> None:
    """Until ``fetches`` fetches wait in the long poll (registered with the append waiters)."""
    await async_wait_until(lambda: len(core.replicas.waiters) == fetches, 5,
                           what=f"{fetches} fetch(es) waiting")


async def test_returns_data_at_once(topic_core: BrokerCore) -> None:
    await _produce(topic_core, [b"a", b"b"])
    started = time.monotonic()
    response = await fetch.handle(topic_core, _fetch(0, max_wait_ms=5000))
    assert time.monotonic() - started < 1.0
    out = response.partitions[0]
    assert [r.value for r in decode_batches(out.records)] == [b"a", b"b"]
    assert out.high_watermark == 2 and out.log_start_offset == 0


async def test_min_bytes_zero_returns_immediately_even_when_empty(topic_core: BrokerCore
                                                                  ) -> None:
    started = time.monotonic()
    response = await fetch.handle(topic_core, _fetch(0, min_bytes=0, max_wait_ms=5000))
    assert time.monotonic() - started < 1.0
    assert response.partitions[0].records == b""


async def test_waits_max_wait_when_nothing_arrives(topic_core: BrokerCore) -> None:
    started = time.monotonic()
    response = await fetch.handle(topic_core, _fetch(0, max_wait_ms=300))
    elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 2.0
    assert response.partitions[0].records == b""
    assert response.partitions[0].error_code == 0
    assert len(topic_core.replicas.waiters) == 0


async def test_produce_wakes_a_waiting_fetch(topic_core: BrokerCore) -> None:
    async def later() -> None:
        await _parked(topic_core)
        await _produce(topic_core, [b"late"])

    started = time.monotonic()
    task = asyncio.create_task(later())
    response = await fetch.handle(topic_core, _fetch(0, max_wait_ms=10_000))
    await task
    assert time.monotonic() - started < 5.0
    assert [r.value for r in decode_batches(response.partitions[0].records)] == [b"late"]


async def test_produce_to_another_partition_does_not_satisfy(topic_core: BrokerCore) -> None:
    async def later() -> None:
        await _parked(topic_core)
        await _produce(topic_core, [b"elsewhere"], partition=1)

    task = asyncio.create_task(later())
    started = time.monotonic()
    response = await fetch.handle(topic_core, _fetch(0, max_wait_ms=400))
    await task
    assert time.monotonic() - started >= 0.35
    assert response.partitions[0].records == b""


async def test_waits_until_min_bytes_accumulate(topic_core: BrokerCore) -> None:
    await _produce(topic_core, [b"x" * 10])
    first = len((await fetch.handle(topic_core, _fetch(0))).partitions[0].records)

    async def more() -> None:
        await _parked(topic_core)
        await _produce(topic_core, [b"y" * 10])  # still below min_bytes: the fetch waits on
        await _parked(topic_core)
        await _produce(topic_core, [b"z" * 500])

    task = asyncio.create_task(more())
    started = time.monotonic()
    response = await fetch.handle(topic_core, _fetch(0, min_bytes=first + 200,
                                                     max_wait_ms=10_000))
    await task
    assert time.monotonic() - started < 5.0
    values = [r.value for r in decode_batches(response.partitions[0].records)]
    assert values == [b"x" * 10, b"y" * 10, b"z" * 500]


async def test_errors_answer_without_waiting(topic_core: BrokerCore) -> None:
    started = time.monotonic()
    response = await fetch.handle(topic_core, _fetch(0, topic="missing", max_wait_ms=5000))
    assert time.monotonic() - started < 1.0
    assert response.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("offset", [-1, -100, 3, 1000])
async def test_out_of_range_offsets_name_the_valid_range(topic_core: BrokerCore, offset: int
                                                         ) -> None:
    await _produce(topic_core, [b"a", b"b"])
    response = await fetch.handle(topic_core, _fetch(offset))
    out = response.partitions[0]
    assert out.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert "[0, 2]" in out.error_message and str(offset) in out.error_message


async def test_fetch_at_the_end_waits_and_is_not_an_error(topic_core: BrokerCore) -> None:
    await _produce(topic_core, [b"a"])
    response = await fetch.handle(topic_core, _fetch(1, max_wait_ms=50))
    assert response.partitions[0].error_code == 0
    assert response.partitions[0].records == b""


async def test_first_partition_gets_one_batch_even_if_larger_than_limits(
        topic_core: BrokerCore) -> None:
    await _produce(topic_core, [b"x" * 5000])
    await _produce(topic_core, [b"y" * 5000], partition=1)
    request = broker_pb2.FetchRequest(min_bytes=1, max_bytes=1024, partitions=[
        broker_pb2.FetchPartition(topic="t", partition=0, partition_max_bytes=100),
        broker_pb2.FetchPartition(topic="t", partition=1, partition_max_bytes=100)])
    response = await fetch.handle(topic_core, request)
    assert [r.value for r in decode_batches(response.partitions[0].records)] == [b"x" * 5000]
    assert response.partitions[1].records == b""  # does not fit; no error
    assert response.partitions[1].error_code == 0
    assert response.partitions[1].high_watermark == 1


async def test_partition_max_bytes_limits_whole_batches(topic_core: BrokerCore) -> None:
    for i in range(10):
        await _produce(topic_core, [bytes([65 + i]) * 100])
    one = len((await fetch.handle(topic_core, _fetch(0, partition_max_bytes=1))).partitions[0]
              .records)
    response = await fetch.handle(topic_core, _fetch(0, partition_max_bytes=3 * one + 10))
    records = list(decode_batches(response.partitions[0].records))
    assert [r.offset for r in records] == [0, 1, 2]


async def test_max_bytes_across_partitions(topic_core: BrokerCore) -> None:
    for _ in range(5):
        await _produce(topic_core, [b"p0" * 100])
        await _produce(topic_core, [b"p1" * 100], partition=1)
    one = len((await fetch.handle(topic_core, _fetch(0, partition_max_bytes=1))).partitions[0]
              .records)
    request = broker_pb2.FetchRequest(min_bytes=1, max_bytes=one * 3, partitions=[
        broker_pb2.FetchPartition(topic="t", partition=0),
        broker_pb2.FetchPartition(topic="t", partition=1)])
    response = await fetch.handle(topic_core, request)
    total = sum(len(p.records) for p in response.partitions)
    assert total <= one * 3
    assert len(list(decode_batches(response.partitions[0].records))) == 3


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (broker_pb2.FetchRequest(max_wait_ms=-1), ErrorCode.INVALID_REQUEST),
        (broker_pb2.FetchRequest(min_bytes=-1), ErrorCode.INVALID_FETCH_SIZE),
        (broker_pb2.FetchRequest(max_bytes=-5), ErrorCode.INVALID_FETCH_SIZE),
        (broker_pb2.FetchRequest(isolation_level=7), ErrorCode.INVALID_REQUEST),
        (broker_pb2.FetchRequest(partitions=[broker_pb2.FetchPartition(topic="")]),
         ErrorCode.INVALID_TOPIC_EXCEPTION),
    ],
)
async def test_malformed_requests_fail_whole(topic_core: BrokerCore,
                                             request_: broker_pb2.FetchRequest,
                                             code: ErrorCode) -> None:
    with pytest.raises(StromError) as info:
        await fetch.handle(topic_core, request_)
    assert info.value.code == code


async def test_negative_partition_max_bytes_is_per_partition(topic_core: BrokerCore) -> None:
    response = await fetch.handle(topic_core, _fetch(0, partition_max_bytes=-1))
    assert response.partitions[0].error_code == ErrorCode.INVALID_FETCH_SIZE
    assert "partition_max_bytes=-1" in response.partitions[0].error_message


async def test_leader_epoch_is_checked(topic_core: BrokerCore) -> None:
    response = await fetch.handle(topic_core, _fetch(0, epoch=3))
    assert response.partitions[0].error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    ok = await fetch.handle(topic_core, _fetch(0, epoch=0, min_bytes=0))
    assert ok.partitions[0].error_code == 0


async def test_shutdown_wakes_waiting_fetches(topic_core: BrokerCore) -> None:
    task = asyncio.create_task(fetch.handle(topic_core, _fetch(0, max_wait_ms=30_000)))
    await _parked(topic_core)
    topic_core.replicas.waiters.close()
    response = await asyncio.wait_for(task, 2.0)
    assert response.partitions[0].records == b""


async def test_deleting_the_topic_wakes_waiting_fetches(topic_core: BrokerCore) -> None:
    task = asyncio.create_task(fetch.handle(topic_core, _fetch(0, max_wait_ms=30_000)))
    await _parked(topic_core)
    await topic_core.topics.delete("t")
    response = await asyncio.wait_for(task, 2.0)
    assert response.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_metrics_count_bytes_and_messages_out(topic_core: BrokerCore) -> None:
    await _produce(topic_core, [b"a", b"b", b"c"])
    response = await fetch.handle(topic_core, _fetch(0))
    registry = topic_core.metrics.registry
    assert registry.get_sample_value("strom_broker_messages_out_total", {"topic": "t"}) == 3
    assert registry.get_sample_value("strom_broker_bytes_out_total", {"topic": "t"}) == len(
        response.partitions[0].records)


def _count_log_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one for each read of a partition's log."""
    reads: list[int] = []
    from strom.storage.log import PartitionLog
    original = PartitionLog.read

    def counted(self: PartitionLog, *args: object, **kwargs: object) -> object:
        reads.append(1)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(PartitionLog, "read", counted)
    return reads


async def test_a_full_answer_reads_no_further_partition(core: BrokerCore,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the answer holds ``max_bytes``, the partitions after it get their offsets and no
    records without a read of their logs (Kafka reads them with a zero limit); before, each
    was read for a byte that was then dropped: a 25 MB fetch split in 4 MB answers read the
    1,000 partitions again per answer (issue 21). The answer is the one it was."""
    await core.topics.create_topic("wide", 6)
    for p in range(6):
        await _produce(core, [b"x" * 300] * (p + 1), topic="wide", partition=p)
    await core.topics.create_topic("gone", 1)
    reads = _count_log_reads(monkeypatch)
    request = broker_pb2.FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=600, partitions=[
        broker_pb2.FetchPartition(topic="wide", partition=p, fetch_offset=offset,
                                  current_leader_epoch=-1)
        for p, offset in [(1, 0), (0, 0), (2, 0), (3, 9), (4, 5), (5, 6)]]
        + [broker_pb2.FetchPartition(topic="nope", partition=0, fetch_offset=0,
                                     current_leader_epoch=-1)])
    response = await fetch.handle(core, request)
    parts = response.partitions
    assert [len(list(decode_batches(p.records))) for p in parts] == [2, 0, 0, 0, 0, 0, 0]
    assert [(p.high_watermark, p.log_start_offset) for p in parts[:6]] == [
        (2, 0), (1, 0), (3, 0), (-1, -1), (5, 0), (6, 0)]
    assert [ErrorCode(p.error_code).name for p in parts] == [
        "NONE", "NONE", "NONE", "OFFSET_OUT_OF_RANGE", "NONE", "NONE",
        "UNKNOWN_TOPIC_OR_PARTITION"]
    assert len(reads) == 1  # the first partition only (3 before: each with data to give)


async def test_a_partition_cut_by_the_room_left_fills_the_answer(
        core: BrokerCore, monkeypatch: pytest.MonkeyPatch) -> None:
    """When a partition's records are cut by the room left in the answer (less than its own
    ``partition_max_bytes``), the answer is full: the partitions after it get offsets and no
    records without a read. Before, each was read for the few bytes left (two preads: the
    room, then its whole first batch) and dropped: ~2,450 such reads in a 200,000-record
    catch-up over 1,000 partitions (issue 21). Partitions cut by their own limit do not."""
    await core.topics.create_topic("wide", 4)
    for p in range(4):
        for _ in range(3):
            await _produce(core, [b"x" * 300], topic="wide", partition=p)
    one = len((await fetch.handle(core, _fetch(0, topic="wide", partition_max_bytes=1)))
              .partitions[0].records)
    reads = _count_log_reads(monkeypatch)

    def request(partition_max_bytes: int) -> broker_pb2.FetchRequest:
        return broker_pb2.FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=3 * one + 100,
                                       partitions=[broker_pb2.FetchPartition(
                                           topic="wide", partition=p, fetch_offset=0,
                                           partition_max_bytes=partition_max_bytes,
                                           current_leader_epoch=-1) for p in range(4)])

    # 3 batches of partition 0, then 100 bytes of room: partitions 1-3 are not read
    response = await fetch.handle(core, request(0))
    assert [len(list(decode_batches(p.records))) for p in response.partitions] == [3, 0, 0, 0]
    assert [p.high_watermark for p in response.partitions] == [3, 3, 3, 3]
    assert len(reads) == 2  # partition 0, then partition 1 cut by the room left (before: 4)
    # cut by their own limit (one batch each), the partitions after are still read
    reads.clear()
    response = await fetch.handle(core, request(one + 10))
    assert [len(list(decode_batches(p.records))) for p in response.partitions] == [1, 1, 1, 0]
    assert len(reads) == 4
