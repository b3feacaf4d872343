"""Producer.send's fast path (null key, no partition, no headers) routes exactly as the
partitioner would: same sticky partitions, same batches, same indexes, and it steps aside when
the metadata changes. Offline: metadata is injected, the bootstrap port has no listener."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import itertools
import random
import time
from collections.abc import Iterator

import pytest

from strom.client import AsyncProducer, Producer
from strom.client.models import RecordMetadata, record_metadata
from strom.client.partitioner import DefaultPartitioner
from strom.client.producer_batch import RecordFuture
from strom.protocol.records import BatchBuilder, Compression
from strom.protocol.v1 import broker_pb2, common_pb2


def _metadata(partitions: int) -> broker_pb2.MetadataResponse:
    return broker_pb2.MetadataResponse(
        cluster_id="test", controller_id=1,
        brokers=[common_pb2.BrokerEndpoint(broker_id=1, host="127.0.0.1", port=1)],
        topics=[broker_pb2.TopicMetadata(name="t", partitions=[
            broker_pb2.PartitionMetadata(partition=i, leader=1) for i in range(partitions)])])


@pytest.fixture
def producer() -> Iterator[Producer]:
    p = Producer("127.0.0.1:1", acks=1, linger_ms=60_000, batch_size=1024,
                 buffer_memory=1 << 30, retry_backoff_ms=60_000, retry_backoff_max_ms=60_000)
    p._core.metadata.update(_metadata(6), time.monotonic() * 1000)
    p._core.partitioner = DefaultPartitioner(random.Random(7))
    try:
        yield p
    finally:
        p.close(timeout=0)


def _where(f: RecordFuture) -> tuple[int, int, int]:
    """(id of the batch, partition, index in the batch) a record was appended at."""
    batch, index = f._meta[0], f._meta[1]
    return id(batch), batch.tp.partition, index


def test_fast_path_matches_routed_path(producer: Producer) -> None:
    other = Producer("127.0.0.1:1", acks=1, linger_ms=60_000, batch_size=1024,
                     buffer_memory=1 << 30, retry_backoff_ms=60_000, retry_backoff_max_ms=60_000)
    try:
        other._core.metadata.update(_metadata(6), time.monotonic() * 1000)
        other._core.partitioner = DefaultPartitioner(random.Random(7))
        value = b"v" * 100
        fast = [producer.send("t", value) for _ in range(200)]
        routed = [other.send("t", value, headers=[]) for _ in range(200)]  # never the fast path
    finally:
        other.close(timeout=0)
    fast_where = [_where(f) for f in fast]
    routed_where = [_where(f) for f in routed]
    assert [w[1:] for w in fast_where] == [w[1:] for w in routed_where]
    # batches fill in order and the sticky partition moves on with each new batch (KIP-480)
    partitions = [p for _, p, i in fast_where if i == 0]
    assert len(partitions) > 10
    assert all(a != b for a, b in itertools.pairwise(partitions))
    previous: tuple[int, int, int] | None = None
    for w in fast_where:
        if previous is not None and w[0] == previous[0]:
            assert w[2] == previous[2] + 1
        else:
            assert w[2] == 0
        previous = w


def test_keyed_fast_path_matches_routed_path(producer: Producer) -> None:
    other = Producer("127.0.0.1:1", acks=1, linger_ms=60_000, batch_size=1024,
                     buffer_memory=1 << 30, retry_backoff_ms=60_000, retry_backoff_max_ms=60_000)
    try:
        other._core.metadata.update(_metadata(6), time.monotonic() * 1000)
        keys = [b"key-%d" % (i % 13) for i in range(300)]
        fast = [producer.send("t", b"v" * 50, key=k) for k in keys]
        routed = [other.send("t", b"v" * 50, key=k, headers=[]) for k in keys]
    finally:
        other.close(timeout=0)
    assert [_where(f)[1:] for f in fast] == [_where(f)[1:] for f in routed]
    by_partition: dict[int, list[int]] = {}
    for f, k in zip(fast, keys, strict=True):
        assert f._meta[0].tp.partition == producer._core.partitioner.partition_for_key(k, 6)
        by_partition.setdefault(f._meta[0].tp.partition, []).append(id(f._meta[0]))
    assert any(len(set(ids)) > 1 for ids in by_partition.values())  # batches filled and rolled
    first = fast[0]._meta[0]
    assert bytes(first.close()).count(b"key-") == len(first.builder)  # keys were encoded


def test_fast_path_futures_and_callbacks(producer: Producer) -> None:
    seen: list[int] = []

    def on_delivery(md: RecordMetadata | None, err: BaseException | None) -> None:
        seen.append(md.offset if md is not None else -2)

    futures = [producer.send("t", b"x%d" % i, on_delivery=on_delivery) for i in range(3)]
    batch = futures[0]._meta[0]
    assert all(f._meta[0] is batch for f in futures)
    assert not futures[2].done()
    batch.complete(base_offset=100)
    assert [f.result(timeout=1).offset for f in futures] == [100, 101, 102]
    assert futures[1].result().serialized_value_size == 2
    assert seen == [100, 101, 102]


def test_metadata_change_goes_back_through_routing(producer: Producer) -> None:
    core = producer._core
    first = producer.send("t", b"a")
    sticky = first._meta[0].tp.partition
    core.metadata.update(_metadata(max(1, sticky)), time.monotonic() * 1000)  # sticky one gone
    after = producer.send("t", b"b")
    assert after._meta[0].tp.partition < max(1, sticky)
    assert core.sticky_open["t"][1] == core.metadata.version


def test_full_or_failed_batch_is_never_appended_to(producer: Producer) -> None:
    first = producer.send("t", b"a")
    batch = first._meta[0]
    with producer._core.acc.lock:
        batch.full = True  # as drain/expire/abort leave it
    second = producer.send("t", b"b")
    assert second._meta[0] is not batch
    assert len(batch.builder) == 1


def test_builder_fast_methods_produce_the_same_bytes() -> None:
    a, b = BatchBuilder(Compression.NONE, 200), BatchBuilder(Compression.NONE, 200)
    indexes = []
    for i in range(50):
        ok = a.append(b"k", b"v%d" % i, 1000 + i, [("h", b"x")])
        index = b.try_append(b"k", b"v%d" % i, 1000 + i, [("h", b"x")])
        assert ok == (index >= 0)
        if not ok:
            break
        indexes.append(index)
    assert indexes == list(range(len(indexes))) and 1 < len(indexes) < 50
    assert b.try_append(None, b"x" * 300, 1, []) == -1  # over batch_size: refused
    built = b.build_buffer()
    assert isinstance(built, bytearray) and built == a.build()


async def test_async_producer_fast_path_matches_routed_path() -> None:
    producers = []
    for _ in range(2):
        p = AsyncProducer("127.0.0.1:1", acks=1, linger_ms=60_000, batch_size=1024,
                          buffer_memory=1 << 30, retry_backoff_ms=60_000,
                          retry_backoff_max_ms=60_000)
        p._core.metadata.update(_metadata(6), time.monotonic() * 1000)
        p._core.partitioner = DefaultPartitioner(random.Random(7))
        await p.start()
        producers.append(p)
    fast_p, routed_p = producers
    try:
        keys = [None if i % 3 else b"key-%d" % (i % 7) for i in range(300)]
        fast = [fast_p.send("t", b"v" * 60, key=k) for k in keys]
        routed = [routed_p.send("t", b"v" * 60, key=k, headers=[]) for k in keys]

        def where(p: AsyncProducer) -> list[tuple[int, int, int]]:
            out: dict[int, tuple[int, int, int]] = {}
            batches = {id(b): b for b in p._core.acc.incomplete}
            for b in batches.values():
                for index, _ts, _ks, _vs, f in b.async_futures or []:
                    out[id(f)] = (b.tp.partition, index, len(b.builder))
            return [out[id(f)] for f in (fast if p is fast_p else routed)]

        assert where(fast_p) == where(routed_p)
        batch = next(b for b in fast_p._core.acc.incomplete if b.async_futures)
        batch.complete(base_offset=10)
        done = [f for f in fast if f.done()]
        assert done and all(f.result().offset >= 10 for f in done)
    finally:
        for p in producers:
            await p.close(timeout=0)


def test_fast_path_futures_work_with_concurrent_futures(producer: Producer) -> None:
    futures = [producer.send("t", b"x"), producer.send("t", b"y", key=b"k")]
    done, pending = cf.wait(futures, timeout=0.01)
    assert not done and len(pending) == 2
    called: list[cf.Future[RecordMetadata]] = []
    futures[0].add_done_callback(called.append)
    for f in futures:
        f._meta[0].complete(base_offset=5)
    done, pending = cf.wait(futures, timeout=1)
    assert len(done) == 2 and not pending and called == [futures[0]]
    generic: list[cf.Future[RecordMetadata]] = list(futures)
    assert sorted(f.result().offset for f in cf.as_completed(generic, timeout=1)) == [5, 5]


def test_record_metadata_fast_constructor_equals_the_dataclass() -> None:
    fast = record_metadata("t", 3, 42, 1_700_000_000_000, 0, 100)
    slow = RecordMetadata("t", 3, 42, 1_700_000_000_000, 0, 100)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert fast.topic_partition == ("t", 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.offset = 1  # type: ignore[misc]


class _CountedGets(dict):  # type: ignore[type-arg]
    gets = 0

    def get(self, *args: object) -> object:
        _CountedGets.gets += 1
        return super().get(*args)


def test_keyed_fast_path_finds_the_open_batch_by_partition_number(producer: Producer) -> None:
    """Over 1,000 partitions the partition's key object, the accumulator's dict entry and its
    deque were a cache miss each per keyed record: the fast path reads the open batch from a
    list by partition number instead (issue 21). Fails with the dict look-up put back."""
    core = producer._core
    keys = [b"key-%d" % i for i in range(6)]
    for k in keys:
        producer.send("t", b"v", key=k)  # opens the batches (routed)
    core.acc.batches = _CountedGets(core.acc.batches)
    _CountedGets.gets = 0
    fast = [producer.send("t", b"w", key=k) for k in keys * 3]
    assert _CountedGets.gets == 0
    for f, k in zip(fast, keys * 3, strict=True):
        batch = f._meta[0]
        assert batch.tp.partition == core.partitioner.partition_for_key(k, 6)
        assert core.acc.batches[batch.tp][-1] is batch


def test_keyed_fast_path_never_appends_to_a_full_drained_or_finished_batch(
        producer: Producer) -> None:
    core = producer._core
    first = producer.send("t", b"a", key=b"k")
    batch = first._meta[0]
    tp = batch.tp
    with core.acc.lock:  # as drain leaves it: taken from the queue, frozen and full
        core.acc.batches[tp].popleft()
        batch.close()
    second = producer.send("t", b"b", key=b"k")
    assert second._meta[0] is not batch and second._meta[0].tp == tp
    assert len(batch.builder) == 1
    assert core.keyed_open["t"][tp.partition] is second._meta[0]
    with core.acc.lock:
        core.acc.batches[tp].popleft()
        second._meta[0].close()
    core._finish(second._meta[0], 7, -1, None)  # a finished batch's bytes are not kept
    assert core.keyed_open["t"][tp.partition] is None
    third = producer.send("t", b"c", key=b"k")
    assert third._meta[0] not in (batch, second._meta[0])


def test_keyed_fast_path_follows_a_partition_count_change(producer: Producer) -> None:
    core = producer._core
    keys = [b"key-%d" % i for i in range(40)]
    for k in keys:
        producer.send("t", b"v", key=k)
    core.metadata.update(_metadata(3), time.monotonic() * 1000)
    after = [producer.send("t", b"w", key=k) for k in keys]
    for f, k in zip(after, keys, strict=True):
        assert f._meta[0].tp.partition == core.partitioner.partition_for_key(k, 3)
    assert len(core.keyed_open["t"]) == 3
