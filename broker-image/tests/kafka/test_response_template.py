"""ResponseTemplate and RecordsTemplate: the answers to Produce and Fetch requests made from one
kio encoding are byte for byte kio's own encoding of each answer, in every version served; the
templates kept across requests (by version, topic, partition, ...) give each request its own
answer, and errors are still built by kio."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from strom.broker.kafka import fetch, produce
from strom.broker.kafka.context import Context
from strom.broker.kafka.frames import BIG_WRITE, Request, ResponseTemplate, encode_response
from strom.broker.produce import PartitionResult
from strom.protocol.errors import ErrorCode
from strom.protocol.produce_wire import ProduceRequest
from strom.protocol.v1 import broker_pb2


def _context(version: int, correlation_id: int = 1) -> Context:
    core: Any = None  # building a response needs no broker
    return Context(core, Request(produce.KEY, version, correlation_id, "test", None),
                   "PLAINTEXT", {})


@pytest.mark.parametrize("version", range(produce.VERSIONS[0], produce.VERSIONS[1] + 1))
@pytest.mark.parametrize("append_time", [-1, 1_700_000_000_123])
def test_templated_answers_are_kios_encoding(version: int, append_time: int) -> None:
    ctx = _context(version)
    slots = [produce._Slot("orders", uuid.UUID(int=7), 3)]

    def make(values: list[int]) -> Any:
        part = broker_pb2.PartitionProduceResponse(topic="orders", partition=3,
                                                   base_offset=values[0],
                                                   log_append_time_ms=append_time,
                                                   log_start_offset=42)
        return produce._response(ctx, slots, {("orders", 3): part}, None)

    template = ResponseTemplate(make)
    for correlation_id, base in [(1, 0), (7, 1), (2**31 - 1, 2**40 + 5), (-3, 2**63 - 1)]:
        assert template.encode(correlation_id, base) == encode_response(correlation_id,
                                                                        make([base]))


@pytest.mark.parametrize("version", range(produce.VERSIONS[0], produce.VERSIONS[1] + 1))
def test_one_template_answers_every_partition_of_a_topic(version: int) -> None:
    """The partition index, base offset, log append time and log start offset are written into
    one template per (version, topic, topic id): answers for 1,000 partitions with assorted
    offsets and times are each kio's encoding of that answer, and one template was made (one
    per partition before: ~0.1 ms each on a fresh topic's first answers)."""
    produce._TEMPLATES.clear()
    for i in range(1000):
        partition = (i * 7919) % 1000
        append_time = -1 if i % 3 else 1_700_000_000_000 + i
        log_start = 0 if i % 5 else i * 1_000_003
        ctx = _context(version, correlation_id=i)
        prepared = _prepared("orders", uuid.UUID(int=5), partition)
        part = PartitionResult("orders", partition, 0, "", i * 2**33 + 1, append_time, log_start)
        results = {("orders", partition): part}
        answer = produce._answer(ctx, prepared, results, None)
        assert isinstance(answer, bytes)
        assert answer == encode_response(i, produce._response(
            ctx, prepared.slots, results, None)), (version, i)
    assert len(produce._TEMPLATES) == 1


def test_a_field_that_is_not_a_fixed_width_integer_is_refused() -> None:
    ctx = _context(9)
    slots = [produce._Slot("orders", None, 3)]

    def make(values: list[int]) -> Any:  # the value moves the message's length: not in place
        part = broker_pb2.PartitionProduceResponse(topic="orders", partition=3, error_code=1,
                                                   error_message="x" * (values[0] + 2))
        return produce._response(ctx, slots, {("orders", 3): part}, None)

    with pytest.raises(ValueError, match="not a fixed-width integer"):
        ResponseTemplate(make)

    def overlapping(values: list[int]) -> Any:  # two values on the same bytes
        part = broker_pb2.PartitionProduceResponse(topic="orders", partition=3,
                                                   base_offset=values[0] | values[1])
        return produce._response(ctx, slots, {("orders", 3): part}, None)

    with pytest.raises(ValueError, match="not one fixed-width integer"):
        ResponseTemplate(overlapping, (8, 8))


def _prepared(topic: str, topic_id: uuid.UUID | None, partition: int) -> Any:
    return produce._Prepared([produce._Slot(topic, topic_id, partition)],
                             ProduceRequest(1, 30_000, []), False, None)


@pytest.mark.parametrize("version", range(produce.VERSIONS[0], produce.VERSIONS[1] + 1))
def test_answers_from_kept_templates_are_each_requests_own(version: int) -> None:
    """Requests that differ in topic, topic id, partition, append time or log start offset,
    interleaved and repeated (templates made by earlier ones are reused): every answer is kio's
    encoding of that request's own response."""
    produce._TEMPLATES.clear()
    shapes = [("orders", None, 3, -1, 42), ("orders", None, 4, -1, 42),
              ("orders", None, 3, -1, 43), ("orders", None, 3, 1_700_000_000_123, 42),
              ("other", uuid.UUID(int=9), 3, -1, 0), ("other", uuid.UUID(int=10), 3, -1, 0)]
    for i in range(3 * len(shapes)):
        topic, topic_id, partition, append_time, log_start = shapes[(i * 5) % len(shapes)]
        ctx = _context(version, correlation_id=1000 + i)
        prepared = _prepared(topic, topic_id, partition)
        part = PartitionResult(topic, partition, 0, "", 17 * i, append_time, log_start)
        results = {(topic, partition): part}
        answer = produce._answer(ctx, prepared, results, None)
        assert isinstance(answer, bytes)
        assert answer == encode_response(1000 + i, produce._response(
            ctx, prepared.slots, results, None)), (version, i)
    assert 0 < len(produce._TEMPLATES) <= len(shapes)


def test_errors_are_built_by_kio_and_the_kept_templates_are_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _context(9)
    prepared = _prepared("orders", None, 0)
    failed = PartitionResult("orders", 0, int(ErrorCode.CORRUPT_MESSAGE), "bad CRC", -1, -1, -1)
    answer = produce._answer(ctx, prepared, {("orders", 0): failed}, None)
    assert not isinstance(answer, bytes)
    assert answer.responses[0].partition_responses[0].error_message == "bad CRC"
    monkeypatch.setattr(produce._TEMPLATES, "limit", 3)
    produce._TEMPLATES.clear()
    for log_start in range(10):
        part = PartitionResult("orders", 0, 0, "", 5, -1, log_start)
        assert isinstance(produce._answer(ctx, prepared, {("orders", 0): part}, None), bytes)
        assert len(produce._TEMPLATES) <= 3


def _fetch_context(version: int, correlation_id: int) -> Context:
    core: Any = None
    return Context(core, Request(fetch.KEY, version, correlation_id, "test", None),
                   "PLAINTEXT", {})


@pytest.mark.parametrize("version", range(fetch.VERSIONS[0], fetch.VERSIONS[1] + 1))
def test_fetch_answers_from_templates_are_kios_encoding(version: int) -> None:
    """One partition without error (a long poll's answer): for record sets whose length needs
    1, 2 or 3 varint bytes, one large enough to stay its own chunk, read_committed or not, with
    and without a topic id, each answer is kio's encoding of the response built by the
    handler's own builder."""
    fetch._TEMPLATES.clear()
    records_sizes = [0, 1, 126, 127, 200, 16_383, 16_384, 70_000]
    i = 0
    for committed in (False, True):
        for name, topic_id in (("orders", None), ("orders", uuid.UUID(int=5))):
            for size in records_sizes:
                i += 1
                ctx = _fetch_context(version, 500 + i)
                records = bytes([i % 251]) * size
                part = (3, 0, 1000 + i, 7 * i, records)
                session_id = 0 if i % 3 else 2**31 - i
                chunks = fetch._encoded(ctx, name, topic_id, part, session_id, committed)
                assert chunks is not None, (version, committed, size)
                expected = encode_response(500 + i, fetch._response(
                    ctx, session_id, {name: (topic_id, [part])}, committed))
                assert b"".join(chunks) == expected, (version, committed, topic_id, size)
                if size >= BIG_WRITE:  # the record set itself, not a copy
                    assert any(c is records for c in chunks)
    assert len(fetch._TEMPLATES) == 4


@pytest.mark.parametrize("version", range(fetch.VERSIONS[0], fetch.VERSIONS[1] + 1))
def test_fetch_answers_over_many_partitions_are_kios_encoding(version: int) -> None:
    """Answers naming several partitions (a consumer catching up on 1,000) are spliced from
    kio's encoding of the response and each topic without partitions and one partition
    template per (version, read_committed): for several topics (named, with ids, unknown),
    partitions with errors, empty, small, varint-boundary and large record sets, read_committed
    or not, each answer is kio's encoding of the response the handler's builder makes."""
    fetch._PARTS.clear()
    sizes = [0, 1, 126, 127, 200, 16_383, 16_384, 70_000]
    for committed in (False, True):
        for n in (2, 3, 1000):
            by_topic: dict[str, tuple[Any, list[Any]]] = {}
            big: list[bytes] = []
            for i in range(n):
                size = sizes[i % len(sizes)] if n < 1000 else (i * 37) % 300
                records = bytes([i % 251]) * size
                if size >= BIG_WRITE:
                    big.append(records)
                error = 0 if i % 4 else [1, 3, 6, 0][(i // 4) % 4]
                name, topic_id = [("orders", None), ("clicks", uuid.UUID(int=9)),
                                  ("\0x", uuid.UUID(int=11))][i % 3]
                part = (i, error, -1 if error else 1000 + i, -1 if error else 7 * i,
                        b"" if error else records)
                by_topic.setdefault(name, (topic_id, []))[1].append(part)
            session_id = 0 if n % 2 else 2**31 - n
            ctx = _fetch_context(version, 900 + n)
            chunks = fetch._encoded_many(ctx, session_id, by_topic, committed)
            assert chunks is not None, (version, committed, n)
            expected = encode_response(900 + n, fetch._response(ctx, session_id, by_topic,
                                                                committed))
            assert b"".join(chunks) == expected, (version, committed, n)
            for records in big:  # the record sets themselves, not copies
                assert any(c is records for c in chunks)
    assert len(fetch._PARTS) == 2
