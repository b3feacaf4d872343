"""AsyncProducer, AsyncConsumer and AsyncAdmin against the fake cluster."""

from __future__ import annotations

import asyncio

import pytest

from strom.client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    ErrorCode,
    StromError,
    TopicPartition,
)

from .conftest import FakeCluster

TP = TopicPartition("t", 0)


async def test_async_round_trip(fake_cluster: FakeCluster) -> None:
    async with AsyncAdmin(fake_cluster.bootstrap) as admin:
        await admin.create_topic("t", partitions=1)
        assert await admin.list_topics() == ["t"]
    async with AsyncProducer(fake_cluster.bootstrap, linger_ms=1) as producer:
        first = producer.send("t", b"v0")  # before metadata: parked, order kept
        futures = [first] + [producer.send("t", b"v%d" % i) for i in range(1, 500)]
        await producer.flush()
        metas = await asyncio.gather(*futures)
        assert [m.offset for m in metas] == list(range(500))
        md = await producer.send_and_wait("t", b"last", key=b"k")
        assert md.offset == 500
        assert await producer.partitions_for("t") == [0]
    async with AsyncConsumer(fake_cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TP])
        values: list[bytes | None] = []
        while len(values) < 501:
            values += [r.value for r in await consumer.poll(1000)]
        assert values[:2] == [b"v0", b"v1"] and values[-1] == b"last"
        assert await consumer.position(TP) == 501
        assert await consumer.end_offsets([TP]) == {TP: 501}
        await consumer.seek_to_beginning(TP)
        assert (await consumer.poll(1000))[0].offset == 0


async def test_async_retry_and_errors(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    fake_cluster.faults[("Produce", "t", 0)] = [ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                                ErrorCode.INVALID_RECORD]
    async with AsyncProducer(fake_cluster.bootstrap, retry_backoff_ms=5) as producer:
        with pytest.raises(StromError) as info:
            await producer.send("t", b"x")
        assert info.value.code is ErrorCode.INVALID_RECORD  # retried once, then non-retriable
        assert (await producer.send("t", b"y")).offset == 0


async def test_async_unknown_topic(fake_cluster: FakeCluster) -> None:
    async with AsyncProducer(fake_cluster.bootstrap, max_block_ms=200,
                             retry_backoff_ms=20) as producer:
        with pytest.raises(StromError) as info:
            await producer.send("missing", b"x")
    assert info.value.code is ErrorCode.REQUEST_TIMED_OUT
