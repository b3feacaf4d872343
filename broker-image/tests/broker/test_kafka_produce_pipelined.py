"""Pipelined Kafka Produce requests (what a broker that is behind reads from librdkafka at
1,000 partitions: runs of one-partition requests for different partitions) answer exactly as
each request served alone by the general path, in turn: the same answers, whole-request
errors, logs and byte/message/error counters, for good, bad, unknown, internal, auto-created,
same-partition, multi-partition and acks=0 requests mixed in one run; and the one-partition
acks=1 requests of a pass are served by ``produce.handle_each_now`` in one call, without a
protobuf response each (issue 21 item 1)."""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.produce.v9 import request as produce_req
from kio.schema.produce.v9 import response as produce_resp
from kio.serial import entity_reader

from strom.broker import produce
from strom.broker.core import BrokerCore
from strom.broker.kafka import produce as kafka_produce
from strom.broker.kafka.apis import ADVERTISED, SUPPORTED
from strom.broker.kafka.context import Context
from strom.broker.kafka.frames import Request, encode_response, parse_request
from strom.protocol.records import encode_batch
from strom.testing.kafka_wire import frame as request_frame

from .test_produce_in_turn import _assert_same_logs_and_counts, _core

CoreFactory = Callable[..., Awaitable[BrokerCore]]
_read_answer = entity_reader(produce_resp.ProduceResponse)


def _ok(n: int, tag: int) -> bytes:
    return encode_batch([(b"k%d-%d" % (tag, i), b"v%d" % i) for i in range(n)])


def _corrupt(batch: bytes) -> bytes:
    buf = bytearray(batch)
    buf[-1] ^= 0xFF
    return bytes(buf)


def _request(correlation_id: int, parts: list[tuple[str, int, bytes]], acks: int = 1,
             timeout_ms: int = 30_000) -> Request:
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, records in parts:
        by_topic.setdefault(topic, []).append(
            produce_req.PartitionProduceData(index=partition, records=records))  # type: ignore[arg-type]
    data = request_frame(0, 9, correlation_id, produce_req.ProduceRequest(
        transactional_id=None, acks=acks,  # type: ignore[arg-type]
        timeout=datetime.timedelta(milliseconds=timeout_ms),  # type: ignore[arg-type]
        topic_data=tuple(produce_req.TopicProduceData(  # type: ignore[arg-type]
            name=t, partition_data=tuple(ps)) for t, ps in by_topic.items())))  # type: ignore[arg-type]
    parsed = parse_request(data[4:], SUPPORTED)
    assert isinstance(parsed, Request)
    return parsed


def _requests() -> list[Request]:
    one = [("t", 0, _ok(2, 0)), ("t", 1, _ok(1, 1)), ("t", 0, _ok(3, 2)),
           ("t", 2, _corrupt(_ok(3, 3))), ("t", 9, _ok(1, 4)),
           ("__consumer_offsets", 0, _ok(1, 5)), ("lat", 0, _ok(2, 6)), ("t", 3, _ok(1, 7)),
           ("t", 3, _ok(2, 8))]  # the last two: one partition twice in a row (handle_run)
    requests = [_request(i, [p]) for i, p in enumerate(one)]
    n = len(requests)
    requests += [
        _request(n, [("t", 1, _ok(1, 9))], timeout_ms=-1),  # refused whole
        _request(n + 1, [("auto", 1, _ok(2, 10))]),  # unknown: auto-created, first of a pass
        _request(n + 2, [("auto", 2, _ok(1, 11))]),
        _request(n + 3, [("t", 2, _ok(1, 12))]),
        _request(n + 4, [("t", 0, _ok(1, 13)), ("t", 1, _ok(1, 14))]),  # two partitions
        _request(n + 5, [("t", 2, _ok(1, 15)), ("t", 7, _ok(1, 16))]),
        _request(n + 6, [("t", 1, _ok(1, 17))], acks=0),
        _request(n + 7, [("t", 2, b"")]),  # INVALID_RECORD
        _request(n + 8, [("big", 0, _ok(40, 18))]),  # over max.message.bytes
        _request(n + 9, [("t", 0, _ok(1, 19))]),
    ]
    return requests


def _fields(request: Request, answer: Any) -> Any:
    """An answer as comparable fields (the log append time only as set or not: the two cores'
    clocks differ)."""
    if answer is None:
        return None
    data = answer if isinstance(answer, bytes) else encode_response(request.correlation_id,
                                                                    answer)
    response, _ = _read_answer(data[4:], 5)  # past the size; header v1: correlation id, tags
    return [(t.name, int(p.index), int(p.error_code), int(p.base_offset),
             p.log_append_time is not None, int(p.log_start_offset), p.error_message)
            for t in response.responses for p in t.partition_responses]


async def test_pipelined_requests_answer_as_each_served_alone(
        make_core: CoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pipelined = await _core(make_core, tmp_path / "pipelined")
    alone = await _core(make_core, tmp_path / "alone")
    requests = _requests()
    passes: list[list[int]] = []
    in_turn: list[list[int]] = []
    each_now, handle_in_turn = produce.handle_each_now, produce.handle_in_turn

    def spy_each(core: BrokerCore, reqs: Any) -> Any:
        passes.append([len(r.partitions) for r in reqs])
        return each_now(core, reqs)

    async def spy_turn(core: BrokerCore, reqs: Any) -> Any:
        in_turn.append([len(r.partitions) for r in reqs])
        return await handle_in_turn(core, reqs)

    monkeypatch.setattr(produce, "handle_each_now", spy_each)
    monkeypatch.setattr(produce, "handle_in_turn", spy_turn)
    answers = await kafka_produce.handle_pipelined(
        [Context(pipelined, r, "PLAINTEXT", ADVERTISED) for r in requests])
    expected = [await kafka_produce.handle(Context(alone, r, "PLAINTEXT", ADVERTISED))
                for r in requests]
    assert [_fields(r, a) for r, a in zip(requests, answers, strict=True)] == \
        [_fields(r, a) for r, a in zip(requests, expected, strict=True)]
    codes = [[f[2] for f in _fields(r, a)] if a is not None else None
             for r, a in zip(requests, answers, strict=True)]
    assert codes == [[0], [0], [0], [2], [3], [17], [0], [0], [0], [42], [0], [0], [0],
                     [0, 0], [0, 3], None, [87], [10], [0]]
    assert passes and all(sizes and set(sizes) == {1} for sizes in passes)
    assert max(len(sizes) for sizes in passes) >= 5  # one call for the run of requests
    assert in_turn == [[2, 2]]  # only the requests naming two partitions
    _assert_same_logs_and_counts(pipelined, alone)
    registry_a, registry_b = pipelined.metrics.registry, alone.metrics.registry
    for code in ("CORRUPT_MESSAGE", "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_RECORD",
                 "INVALID_TOPIC_EXCEPTION", "MESSAGE_TOO_LARGE"):
        labels = {"api": "Produce", "error": code}
        assert registry_a.get_sample_value("strom_broker_partition_errors_total", labels) == \
            registry_b.get_sample_value("strom_broker_partition_errors_total", labels), code


async def test_lone_requests_served_now_answer_as_each_served_alone(
        make_core: CoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request that arrives alone and is served now (``answer_now`` with one request: what
    the listener's ``data_received`` does for most of librdkafka's requests at 1,000
    partitions) gets the answer, log, counters and partition errors the general path gives
    it, for every kind of request in the mixed run; the acks=1 one-partition ones are served
    without stepping ``handle_pipelined``'s coroutine, and their successful answers are the
    templated bytes (issue 21 item 1)."""
    now_core = await _core(make_core, tmp_path / "now")
    alone = await _core(make_core, tmp_path / "alone")
    stepped: list[int] = []
    pipelined = kafka_produce.handle_pipelined

    def spy(ctxs: Any) -> Any:
        stepped.extend(c.request.correlation_id for c in ctxs)
        return pipelined(ctxs)

    monkeypatch.setattr(kafka_produce, "handle_pipelined", spy)
    served_now: list[int] = []
    for request in _requests():
        ctx = Context(now_core, request, "PLAINTEXT", ADVERTISED)
        got = kafka_produce.answer_now([ctx])
        if got is None:  # waits (an auto-creation): served by the general path on both
            got = [await kafka_produce.handle(ctx)]
        else:
            served_now.append(request.correlation_id)
        expected = await kafka_produce.handle(Context(alone, request, "PLAINTEXT", ADVERTISED))
        assert len(got) == 1
        answer = got[0]
        assert _fields(request, answer) == _fields(request, expected), request.correlation_id
        body = request.body
        lone = body.acks == 1 and len(body.topics) == 1 and len(body.topics[0][2]) == 1
        if request.correlation_id in served_now and lone:
            assert request.correlation_id not in stepped, request.correlation_id
            if _fields(request, answer)[0][2] == 0:
                assert isinstance(answer, bytes)  # the template, as the general path's
    assert len(served_now) >= 14
    assert set(stepped) == {r.correlation_id for r in _requests()
                            if r.correlation_id in served_now and not (
                                r.body.acks == 1 and len(r.body.topics) == 1
                                and len(r.body.topics[0][2]) == 1)}
    _assert_same_logs_and_counts(now_core, alone)
    for code in ("CORRUPT_MESSAGE", "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_RECORD",
                 "INVALID_TOPIC_EXCEPTION", "MESSAGE_TOO_LARGE"):
        labels = {"api": "Produce", "error": code}
        assert now_core.metrics.registry.get_sample_value(
            "strom_broker_partition_errors_total", labels) == alone.metrics.registry.\
            get_sample_value("strom_broker_partition_errors_total", labels), code
