"""Produce maps every bad batch to the right Kafka code and leaves the log unchanged."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from strom.broker import produce
from strom.broker.core import BrokerCore
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import encode_batch
from strom.protocol.v1 import broker_pb2


def _request(records: bytes, topic: str = "t", partition: int = 0, acks: int = 1
             ) -> broker_pb2.ProduceRequest:
    return broker_pb2.ProduceRequest(acks=acks, partitions=[
        broker_pb2.PartitionProduceData(topic=topic, partition=partition, records=records)])


def _corrupt(batch: bytes) -> bytes:
    buf = bytearray(batch)
    buf[-1] ^= 0xFF
    return bytes(buf)


async def test_appends_and_assigns_offsets(core: BrokerCore) -> None:
    await core.topics.create_topic("t")
    first = await produce.handle(core, _request(encode_batch([(None, b"a"), (None, b"b")])))
    second = await produce.handle(core, _request(encode_batch([(None, b"c")])))
    assert first.partitions[0].error_code == 0
    assert first.partitions[0].base_offset == 0
    assert second.partitions[0].base_offset == 2
    assert first.partitions[0].log_append_time_ms == -1
    plog = core.replicas.get("t", 0)
    assert plog is not None and plog.log_end_offset == 3 and plog.high_watermark == 3


@pytest.mark.parametrize(
    ("records", "topic", "partition", "code", "fragment"),
    [
        (encode_batch([(None, b"x")]), "nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
         "does not exist"),
        (encode_batch([(None, b"x")]), "t", 5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
         "partition 5"),
        (encode_batch([(None, b"x")]), "t", -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
         "partition -1"),
        (_corrupt(encode_batch([(None, b"x")])), "t", 0, ErrorCode.CORRUPT_MESSAGE, "CRC"),
        (b"\xde\xad\xbe\xef" * 40, "t", 0, ErrorCode.CORRUPT_MESSAGE, "record batch"),
        (b"short", "t", 0, ErrorCode.CORRUPT_MESSAGE, "whole record batch"),
        (b"", "t", 0, ErrorCode.INVALID_RECORD, "empty"),
        (encode_batch([(None, b"x" * 2000)]), "t", 0, ErrorCode.MESSAGE_TOO_LARGE,
         "max.message.bytes"),
    ],
    # Named ids: the batches' bytes hold the current time, and ids built from them differ
    # between pytest-xdist workers, which then refuse to run the suite.
    ids=["unknown-topic", "partition-5", "partition-minus-1", "bad-crc", "garbage", "short",
         "empty", "too-large"],
)
async def test_bad_partitions_change_nothing(
    core: BrokerCore, records: bytes, topic: str, partition: int, code: ErrorCode,
    fragment: str,
) -> None:
    await core.topics.create_topic("t", configs={"max.message.bytes": "1000"})
    await produce.handle(core, _request(encode_batch([(None, b"ok")])))
    response = await produce.handle(core, _request(records, topic, partition))
    out = response.partitions[0]
    assert out.error_code == code, out.error_message
    assert fragment in out.error_message
    assert out.base_offset == -1
    plog = core.replicas.get("t", 0)
    assert plog is not None and plog.log_end_offset == 1


async def test_one_bad_partition_does_not_fail_the_others(core: BrokerCore) -> None:
    await core.topics.create_topic("t", partitions=2)
    request = broker_pb2.ProduceRequest(acks=1, partitions=[
        broker_pb2.PartitionProduceData(topic="t", partition=0, records=b"junk" * 30),
        broker_pb2.PartitionProduceData(topic="t", partition=1,
                                        records=encode_batch([(None, b"v")])),
    ])
    response = await produce.handle(core, request)
    assert response.partitions[0].error_code == ErrorCode.CORRUPT_MESSAGE
    assert response.partitions[1].error_code == 0


@pytest.mark.parametrize("acks", [2, -2, 100])
async def test_invalid_acks_fail_the_request(core: BrokerCore, acks: int) -> None:
    with pytest.raises(StromError) as info:
        await produce.handle(core, _request(encode_batch([(None, b"v")]), acks=acks))
    assert info.value.code == ErrorCode.INVALID_REQUIRED_ACKS
    assert f"acks={acks}" in info.value.message


async def test_empty_topic_name_fails_the_request(core: BrokerCore) -> None:
    with pytest.raises(StromError) as info:
        await produce.handle(core, _request(encode_batch([(None, b"v")]), topic=""))
    assert info.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("acks", [-1, 0])
async def test_acks_all_and_zero_append(core: BrokerCore, acks: int) -> None:
    await core.topics.create_topic("t")
    response = await produce.handle(core, _request(encode_batch([(None, b"v")]), acks=acks))
    assert response.partitions[0].error_code == 0


async def test_acks_all_checks_min_insync_replicas(core: BrokerCore) -> None:
    await core.topics.create_topic("t", configs={"min.insync.replicas": "2"})
    response = await produce.handle(core, _request(encode_batch([(None, b"v")]), acks=-1))
    assert response.partitions[0].error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    ok = await produce.handle(core, _request(encode_batch([(None, b"v")]), acks=1))
    assert ok.partitions[0].error_code == 0


async def test_auto_create_only_when_enabled(
        make_core: Callable[..., Awaitable[BrokerCore]]) -> None:
    off = await make_core()
    response = await produce.handle(off, _request(encode_batch([(None, b"v")]), topic="auto"))
    assert response.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    await off.stop()
    on = await make_core(auto_create_topics_enable="true", num_partitions="3")
    response = await produce.handle(on, _request(encode_batch([(None, b"v")]), topic="auto"))
    assert response.partitions[0].error_code == 0
    record = on.metadata.topic("auto")
    assert record is not None and record.partitions == 3


async def test_log_append_time_topics_report_the_time(core: BrokerCore) -> None:
    await core.topics.create_topic("t", configs={"message.timestamp.type": "LogAppendTime"})
    response = await produce.handle(core, _request(encode_batch([(None, b"v")])))
    assert response.partitions[0].log_append_time_ms > 0


async def test_metrics_count_bytes_and_messages(core: BrokerCore) -> None:
    await core.topics.create_topic("t")
    batch = encode_batch([(None, b"a"), (None, b"b")])
    await produce.handle(core, _request(batch))
    registry = core.metrics.registry
    assert registry.get_sample_value("strom_broker_bytes_in_total", {"topic": "t"}) == len(batch)
    assert registry.get_sample_value("strom_broker_messages_in_total", {"topic": "t"}) == 2


async def test_the_offsets_topic_refuses_producers(core: BrokerCore) -> None:
    for name in ("__consumer_offsets", "__other"):
        await core.topics.create_topic(name)
    refused = await produce.handle(core, _request(encode_batch([(None, b"v")]),
                                                  topic="__consumer_offsets"))
    out = refused.partitions[0]
    assert out.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION and "internal" in out.error_message
    allowed = await produce.handle(core, _request(encode_batch([(None, b"v")]), topic="__other"))
    assert allowed.partitions[0].error_code == 0
