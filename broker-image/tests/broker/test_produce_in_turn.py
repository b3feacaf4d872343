"""An acks 0/1 request's partitions are appended in one loop (issue 21: hundreds of one-batch
partitions a request), with what ``_produce_one`` answers for each partition alone: the same
codes, messages, offsets, log contents and metrics, for good, bad, unknown, internal,
auto-created and repeated partitions mixed in one request; and each topic is looked up once
per request, not twice per partition."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from strom.broker import produce
from strom.broker.core import BrokerCore
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import encode_batch
from strom.protocol.v1 import broker_pb2

CoreFactory = Callable[..., Awaitable[BrokerCore]]


def _corrupt(batch: bytes) -> bytes:
    buf = bytearray(batch)
    buf[-1] ^= 0xFF
    return bytes(buf)


def _parts() -> list[tuple[str, int, bytes]]:
    def ok(n: int) -> bytes:
        return encode_batch([(b"k%d" % i, b"v%d" % i) for i in range(n)])
    return [
        ("t", 0, ok(2)), ("t", 1, ok(1)), ("nope", 0, ok(1)), ("t", 7, ok(1)),
        ("__consumer_offsets", 0, ok(1)), ("t", 2, _corrupt(ok(3))), ("t", 3, b"junk" * 20),
        ("auto", 1, ok(2)), ("t", 0, ok(3)), ("lat", 0, ok(1)), ("t", 1, b""),
        ("big", 0, ok(40)), ("auto", 5, ok(1)), ("t", 3, ok(4)), ("nope", 1, ok(1)),
    ]


async def _core(make_core: CoreFactory, path: Path) -> BrokerCore:
    core = await make_core(log_dirs=str(path), auto_create_topics_enable="true",
                           num_partitions="3")
    await core.topics.create_topic("t", partitions=4)
    await core.topics.create_topic("__consumer_offsets")
    await core.topics.create_topic("lat", configs={"message.timestamp.type": "LogAppendTime"})
    await core.topics.create_topic("big", configs={"max.message.bytes": "200"})
    return core


def _answer(out: Any) -> tuple[object, ...]:
    return (out.topic, out.partition, out.error_code, out.error_message, out.base_offset,
            out.log_start_offset, out.log_append_time_ms > 0)


async def test_one_request_answers_as_each_partition_alone(make_core: CoreFactory,
                                                           tmp_path: Path) -> None:
    together = await _core(make_core, tmp_path / "together")
    alone = await _core(make_core, tmp_path / "alone")
    parts = _parts()
    request = broker_pb2.ProduceRequest(acks=1, partitions=[
        broker_pb2.PartitionProduceData(topic=t, partition=p, records=r) for t, p, r in parts])
    answers = [_answer(out) for out in (await produce.handle(together, request)).partitions]
    expected = []
    for t, p, r in parts:  # acks=-1, one partition: served by _produce_one, as before
        one = broker_pb2.ProduceRequest(acks=-1, partitions=[
            broker_pb2.PartitionProduceData(topic=t, partition=p, records=r)])
        expected.append(_answer((await produce.handle(alone, one)).partitions[0]))
    assert answers == expected
    assert [ErrorCode(a[2]).name for a in answers] == [
        "NONE", "NONE", "NONE", "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_TOPIC_EXCEPTION",
        "CORRUPT_MESSAGE", "CORRUPT_MESSAGE", "NONE", "NONE", "NONE", "INVALID_RECORD",
        "MESSAGE_TOO_LARGE", "UNKNOWN_TOPIC_OR_PARTITION", "NONE", "NONE"]
    _assert_same_logs_and_counts(together, alone)


async def test_a_topic_is_looked_up_once_per_request(core: BrokerCore,
                                                     monkeypatch: Any) -> None:
    await core.topics.create_topic("t", partitions=40)
    lookups = _counted_lookups(core, monkeypatch)
    request = broker_pb2.ProduceRequest(acks=1, partitions=[
        broker_pb2.PartitionProduceData(topic="t", partition=p,
                                        records=encode_batch([(b"k", b"v")]))
        for p in range(40)])
    response = await produce.handle(core, request)
    assert all(out.error_code == 0 for out in response.partitions)
    assert len(lookups) <= 2  # the record, and the log config's check of it (80 before)


def _requests(parts: list[tuple[str, int, bytes]]) -> list[broker_pb2.ProduceRequest]:
    """The parts as pipelined requests: one partition each (librdkafka's), one with three, one
    acks=0, one refused whole (a negative timeout), one with an invalid topic name."""
    def request(chosen: list[tuple[str, int, bytes]], timeout_ms: int = 0
                ) -> broker_pb2.ProduceRequest:
        return broker_pb2.ProduceRequest(acks=1, timeout_ms=timeout_ms, partitions=[
            broker_pb2.PartitionProduceData(topic=t, partition=p, records=r)
            for t, p, r in chosen])
    out = [request([part]) for part in parts[:6]]
    out.append(request(parts[6:9]))
    out.append(request([parts[9]], timeout_ms=-1))
    out.append(request([("bad name!", 0, parts[9][2])]))
    out += [request([part]) for part in parts[9:]]
    out[3].acks = 0
    return out


async def test_requests_in_one_pass_answer_as_each_served_in_turn(make_core: CoreFactory,
                                                                  tmp_path: Path) -> None:
    """``handle_in_turn`` (pipelined Kafka requests for different partitions) gives each
    request what ``handle`` gives it served after the ones before: the same answers, whole
    request errors, log contents and metrics."""
    together = await _core(make_core, tmp_path / "together")
    alone = await _core(make_core, tmp_path / "alone")
    requests = _requests(_parts())
    served = await produce.handle_in_turn(together, requests)
    expected: list[Any] = []
    for request in requests:
        try:
            expected.append([_answer(o) for o in (await produce.handle(alone, request)).partitions])
        except StromError as err:
            expected.append((err.code, err.message))
    answers = [(a.code, a.message) if isinstance(a, StromError)
               else [_answer(o) for o in a.partitions] for a in served]
    assert answers == expected
    assert answers[7] == (ErrorCode.INVALID_REQUEST, answers[7][1])  # the negative timeout
    _assert_same_logs_and_counts(together, alone)


async def test_a_topic_is_looked_up_once_for_a_pass_of_requests(core: BrokerCore,
                                                                monkeypatch: Any) -> None:
    await core.topics.create_topic("t", partitions=40)
    lookups = _counted_lookups(core, monkeypatch)
    requests = [broker_pb2.ProduceRequest(acks=1, partitions=[
        broker_pb2.PartitionProduceData(topic="t", partition=p,
                                        records=encode_batch([(b"k", b"v")]))])
        for p in range(40)]
    served = await produce.handle_in_turn(core, requests)
    assert all(not isinstance(a, StromError) and a.partitions[0].error_code == 0
               for a in served)
    assert len(lookups) <= 2  # one request each: 80 served by handle() one at a time
    with pytest.raises(ValueError, match="acks 0 and 1"):
        await produce.handle_in_turn(core, [broker_pb2.ProduceRequest(acks=-1)])


async def test_one_partition_served_now_answers_as_handle(make_core: CoreFactory,
                                                          tmp_path: Path) -> None:
    """``handle_one_now`` (a lone one-partition Kafka request, acks 0/1) gives each request
    what ``handle`` gives it: the same answer, whole-request error, log contents and metrics;
    an unknown topic (an auto-creation, which waits) is left to ``handle``, nothing done."""
    now = await _core(make_core, tmp_path / "now")
    alone = await _core(make_core, tmp_path / "alone")
    requests = [r for r in _requests(_parts()) if len(r.partitions) == 1]
    answers: list[Any] = []
    expected: list[Any] = []
    for request in requests:
        try:
            out = produce.handle_one_now(now, request)
            if out is None:  # the caller's fallback, as the Kafka adapter does
                assert now.metadata.topic(request.partitions[0].topic) is None
                out = (await produce.handle(now, request)).partitions[0]
            answers.append(_answer(out))
        except StromError as err:
            answers.append((err.code, err.message))
        try:
            expected.append(_answer((await produce.handle(alone, request)).partitions[0]))
        except StromError as err:
            expected.append((err.code, err.message))
    assert answers == expected
    assert {a[2] for a in answers if isinstance(a[0], str)} >= {0, int(ErrorCode.CORRUPT_MESSAGE)}
    assert any(isinstance(a[0], ErrorCode) for a in answers)  # a whole-request error
    _assert_same_logs_and_counts(now, alone)
    for name in ("strom_broker_partition_errors_total",):
        for code in ("CORRUPT_MESSAGE", "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_RECORD"):
            labels = {"api": "Produce", "error": code}
            assert now.metrics.registry.get_sample_value(name, labels) == \
                alone.metrics.registry.get_sample_value(name, labels), (name, code)
    with pytest.raises(ValueError, match="acks 0 or 1"):
        produce.handle_one_now(now, broker_pb2.ProduceRequest(acks=-1))


def _assert_same_logs_and_counts(together: BrokerCore, alone: BrokerCore) -> None:
    """Both brokers hold the same logs (end offset, high watermark, size per partition) and
    counted the same bytes and messages in per topic."""
    for topic, partitions in (("t", 4), ("auto", 3), ("lat", 1)):
        for p in range(partitions):
            a, b = together.replicas.get(topic, p), alone.replicas.get(topic, p)
            assert a is not None and b is not None
            assert (a.log_end_offset, a.high_watermark, a.size_bytes) == (
                b.log_end_offset, b.high_watermark, b.size_bytes), (topic, p)
    for name in ("strom_broker_bytes_in_total", "strom_broker_messages_in_total"):
        for topic in ("t", "auto", "lat"):
            assert together.metrics.registry.get_sample_value(name, {"topic": topic}) == \
                alone.metrics.registry.get_sample_value(name, {"topic": topic}), (name, topic)


def _counted_lookups(core: BrokerCore, monkeypatch: Any) -> list[str]:
    """The names ``core.metadata.topic`` is asked for from now on, in order."""
    lookups: list[str] = []
    topic = core.metadata.topic

    def counted(name: str) -> Any:
        lookups.append(name)
        return topic(name)

    monkeypatch.setattr(core.metadata, "topic", counted)
    return lookups
