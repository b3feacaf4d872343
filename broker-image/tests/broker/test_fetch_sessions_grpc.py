"""Fetch sessions (KIP-227) on the gRPC Fetch: the same cache and rules as the Kafka listener's
(:mod:`strom.broker.fetch_sessions`); an incremental fetch names only what moved and its answer
carries only partitions with news."""

from __future__ import annotations

import pytest

from strom.broker import fetch, produce
from strom.broker.core import BrokerCore
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import decode_batches, encode_batch
from strom.protocol.v1 import broker_pb2


def _request(offsets: dict[int, int], *, epoch: int | None, session_id: int = 0,
             forgotten: tuple[int, ...] = ()) -> broker_pb2.FetchRequest:
    request = broker_pb2.FetchRequest(max_wait_ms=0, min_bytes=0, session_id=session_id)
    if epoch is not None:
        request.session_epoch = epoch
    for partition, offset in offsets.items():
        request.partitions.add(topic="t", partition=partition, fetch_offset=offset,
                               current_leader_epoch=-1)
    for partition in forgotten:
        request.forgotten.add(topic="t", partition=partition)
    return request


async def _produce(core: BrokerCore, partition: int, *values: bytes) -> None:
    response = await produce.handle(core, broker_pb2.ProduceRequest(acks=1, partitions=[
        broker_pb2.PartitionProduceData(topic="t", partition=partition,
                                        records=encode_batch([(None, v) for v in values]))]))
    assert response.partitions[0].error_code == 0, response.partitions[0].error_message


def _answered(response: broker_pb2.FetchResponse) -> dict[int, list[bytes | None]]:
    return {p.partition: [r.value for r in decode_batches(p.records)]
            for p in response.partitions}


@pytest.fixture
async def three(core: BrokerCore) -> BrokerCore:
    await core.topics.create_topic("t", 3)
    for partition in range(3):
        await _produce(core, partition, b"p%d" % partition)
    return core


async def test_incremental_fetches_name_and_answer_only_what_moved(three: BrokerCore) -> None:
    full = await fetch.handle(three, _request({0: 0, 1: 0, 2: 0}, epoch=0))
    session = full.session_id
    assert session != 0
    assert _answered(full) == {0: [b"p0"], 1: [b"p1"], 2: [b"p2"]}
    # every partition moved to offset 1: named; nothing new there, so nothing answered
    caught_up = await fetch.handle(three, _request({0: 1, 1: 1, 2: 1}, epoch=1,
                                                   session_id=session))
    assert caught_up.session_id == session
    assert _answered(caught_up) == {}
    # an append to partition 2 only: a fetch naming nothing answers partition 2 alone, read at
    # the offset the session holds
    await _produce(three, 2, b"later")
    news = await fetch.handle(three, _request({}, epoch=2, session_id=session))
    assert _answered(news) == {2: [b"later"]}
    assert news.partitions[0].high_watermark == 2
    # a partition the session still holds at an old offset is read there again (Kafka's rule:
    # the client names a partition whose offset moved)
    again = await fetch.handle(three, _request({}, epoch=3, session_id=session))
    assert _answered(again) == {2: [b"later"]}
    # forgotten: no longer read or answered
    await _produce(three, 1, b"unseen")
    forgot = await fetch.handle(three, _request({2: 2}, epoch=4, session_id=session,
                                                forgotten=(1,)))
    assert _answered(forgot) == {}


async def test_session_errors_fail_the_call(three: BrokerCore) -> None:
    full = await fetch.handle(three, _request({0: 0}, epoch=0))
    with pytest.raises(StromError) as wrong_epoch:
        await fetch.handle(three, _request({}, epoch=5, session_id=full.session_id))
    assert wrong_epoch.value.code is ErrorCode.INVALID_FETCH_SESSION_EPOCH
    with pytest.raises(StromError) as unknown:
        await fetch.handle(three, _request({}, epoch=1, session_id=full.session_id + 1))
    assert unknown.value.code is ErrorCode.FETCH_SESSION_ID_NOT_FOUND


async def test_without_a_session_epoch_every_partition_is_answered(three: BrokerCore) -> None:
    for _ in range(2):
        response = await fetch.handle(three, _request({0: 1, 1: 1, 2: 0}, epoch=None))
        assert response.session_id == 0
        assert _answered(response) == {0: [], 1: [], 2: [b"p2"]}
    assert len(three.fetch_sessions) == 0
