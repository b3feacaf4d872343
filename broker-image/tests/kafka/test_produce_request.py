"""The one-pass Produce reader gives what the general path gives (declared-length walk, kio's
reader, null check, then ``from_kio``), for every Produce version served: on valid requests of
many shapes (which it must read itself when they are of the common shape), on mutated ones, and
on issue 13's hostile frames (every declared length inflated beyond the bytes left), which
are still refused, naming the field, before kio reads them."""

from __future__ import annotations

import datetime
import importlib
import io
import random
import struct
import uuid
from typing import Any

import pytest
from kio.serial import entity_writer

from strom.broker.kafka.apis import SUPPORTED
from strom.broker.kafka.declared_lengths import check_lengths, length_fields
from strom.broker.kafka.frames import (
    Parsed,
    Reject,
    Request,
    parse_general,
    parse_request,
    request_type,
)
from strom.broker.kafka.produce_request import ProduceBody, from_kio, read_produce
from strom.protocol.records import BatchBuilder
from strom.protocol.wire import varint

PRODUCE = 0
VERSIONS = range(SUPPORTED[PRODUCE][0], SUPPORTED[PRODUCE][1] + 1)


def _batch(rng: random.Random) -> bytes:
    b = BatchBuilder(batch_size=1 << 20)
    for _ in range(rng.randrange(1, 4)):
        b.append(None, rng.randbytes(rng.choice([0, 1, 100, 200])), None)
    return bytes(b.build())


def _body(version: int, rng: random.Random, common: bool) -> Any:
    """A random valid kio ProduceRequest; ``common``: of the shape the one-pass reader reads."""
    module = importlib.import_module(f"kio.schema.produce.v{version}.request")
    names = ["t", "orders", "", "x" * 249, "a.b_c-d"] + ([] if common else ["tö", "\u2603"])

    def records() -> bytes | None:
        return rng.choice([_batch(rng), _batch(rng), b"", rng.randbytes(rng.randrange(1, 300))]
                          + ([] if common else [None]))

    def topic() -> Any:
        parts = tuple(module.PartitionProduceData(index=rng.choice([0, 1, 7, -1, 2**31 - 1]),
                                                  records=records())
                      for _ in range(rng.randrange(1 if common else 0, 4)))
        if version >= 13:
            return module.TopicProduceData(topic_id=rng.choice(
                [uuid.UUID(int=rng.getrandbits(128)), uuid.UUID(int=0)]), partition_data=parts)
        return module.TopicProduceData(name=rng.choice(names), partition_data=parts)

    return module.ProduceRequest(
        transactional_id=None if common or rng.random() < 0.5 else "txn",
        acks=rng.choice([-1, 0, 1, 2, -32768, 32767]),
        timeout=datetime.timedelta(milliseconds=rng.choice([0, 1, 30_000, -5, 2**31 - 1, -2**31])),
        topic_data=tuple(topic() for _ in range(rng.randrange(1 if common else 0, 4))))


def _frame(version: int, body: Any, rng: random.Random, client_id: str | None) -> bytes:
    header_type = body.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_type)(buffer, header_type(
        request_api_key=PRODUCE, request_api_version=version,
        correlation_id=rng.randrange(-2**31, 2**31), client_id=client_id))
    entity_writer(type(body))(buffer, body)
    return buffer.getvalue()


def _before(frame: bytes) -> Parsed:
    """What parse_request gave before the one-pass reader (the general path only)."""
    if len(frame) < 10:
        return parse_request(frame, SUPPORTED)  # refused before either path
    key, version, correlation_id = struct.unpack_from(">hhi", frame)
    if key != PRODUCE or version not in VERSIONS:
        return parse_request(frame, SUPPORTED)
    parsed = parse_general(frame, key, version, correlation_id)
    if isinstance(parsed, Request):
        return Request(key, version, correlation_id, parsed.client_id, from_kio(parsed.body))
    return parsed


def _same(frame: bytes) -> Parsed:
    now, before = parse_request(frame, SUPPORTED), _before(frame)
    assert now == before, (frame.hex(), now, before)
    return now


def _valid(version: int, rng: random.Random, common: bool) -> bytes:
    client_id = "rdkafka" if common else rng.choice([None, "", "rdkafka", "clïent"])
    return _frame(version, _body(version, rng, common), rng, client_id)


@pytest.mark.parametrize("version", VERSIONS)
def test_common_requests_are_read_in_one_pass_to_what_kio_reads(version: int) -> None:
    rng = random.Random(f"common-{version}")
    cls = request_type(PRODUCE, version)
    for _ in range(150):
        frame = _valid(version, rng, common=True)
        fast = read_produce(frame, cls)
        assert fast is not None, frame.hex()  # the hot path is taken
        parsed = _same(frame)
        assert isinstance(parsed, Request) and isinstance(parsed.body, ProduceBody)
        assert fast == (parsed.client_id, parsed.body)


@pytest.mark.parametrize("version", VERSIONS)
def test_other_valid_requests_parse_as_before(version: int) -> None:
    """Transactional ids, empty and null arrays, null records, non-ASCII names: declined by the
    one-pass reader or read to the same values (a null topic array is still refused)."""
    rng = random.Random(f"other-{version}")
    for _ in range(150):
        _same(_valid(version, rng, common=False))


@pytest.mark.parametrize("version", [7, 9])
def test_declined_shapes(version: int) -> None:
    """Each feature outside the common shape makes the reader decline (and the general path
    decide), checked on a legacy and a flexible version."""
    cls = request_type(PRODUCE, version)
    module = importlib.import_module(f"kio.schema.produce.v{version}.request")
    rng = random.Random(version)

    def body(**changes: Any) -> Any:
        values: dict[str, Any] = {
            "transactional_id": None, "acks": 1, "timeout": datetime.timedelta(seconds=1),
            "topic_data": (module.TopicProduceData(name="t", partition_data=(
                module.PartitionProduceData(index=0, records=b"r"),)),)}
        values.update(changes)
        return module.ProduceRequest(**values)

    assert read_produce(_frame(version, body(), rng, "c"), cls) is not None
    frame = _frame(version, body(), rng, "c")
    declined = {
        "transactional": _frame(version, body(transactional_id="x"), rng, "c"),
        "no topics": _frame(version, body(topic_data=()), rng, "c"),
        "no partitions": _frame(version, body(topic_data=(module.TopicProduceData(
            name="t", partition_data=()),)), rng, "c"),
        "non-ASCII name": _frame(version, body(topic_data=(module.TopicProduceData(
            name="é", partition_data=()),)), rng, "c"),
        "non-ASCII client id": _frame(version, body(), rng, "é"),
        "a byte after the body": frame + b"\x00",
        "cut short": frame[:-1],
        "a memoryview": memoryview(frame),
    }
    if version >= 9:  # a tagged field in the body: one unknown tag of 1 byte
        declined["tagged field"] = frame[:-1] + b"\x01\x05\x01\x00"
    for what, case in declined.items():
        assert read_produce(case, cls) is None, what  # type: ignore[arg-type]
        _same(bytes(case))
    # nulls where the schema has none: refused by the general path (kio or the null check)
    flexible = version >= 9
    no_topics = _frame(version, body(topic_data=()), rng, "c")
    no_partitions = _frame(version, body(topic_data=(module.TopicProduceData(
        name="t", partition_data=()),)), rng, "c")
    nulls = {
        "topic_data": (no_topics[:-2] + b"\x00\x00" if flexible
                       else no_topics[:-4] + b"\xff\xff\xff\xff"),
        "topic_data.name": (frame.replace(b"\x02t", b"\x00", 1) if flexible
                            else frame.replace(b"\x00\x01t", b"\xff\xff", 1)),
        "topic_data.partition_data": (no_partitions[:-3] + b"\x00\x00\x00" if flexible
                                      else no_partitions[:-4] + b"\xff\xff\xff\xff"),
    }
    for what, case in nulls.items():
        assert read_produce(case, cls) is None, what
        parsed = _same(case)
        assert isinstance(parsed, Reject) and "null" in parsed.reason, (what, parsed)


def _mutate(frame: bytes, rng: random.Random) -> bytes:
    out = bytearray(frame)
    for _ in range(rng.randrange(1, 3)):
        kind = rng.randrange(4)
        at = rng.randrange(8, len(out) + 1)  # the api key and version stay Produce's
        if kind == 0 and at < len(out):
            out[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            out[at:at] = rng.randbytes(rng.randrange(1, 4))
        elif kind == 2:
            del out[at:at + rng.randrange(1, 6)]
        else:
            out[at:at + 2] = rng.choice([b"\xff\xff", b"\x7f\xff", b"\x00\x00", b"\x80\x80"])
    return bytes(out)


@pytest.mark.parametrize("version", VERSIONS)
def test_mutated_requests_parse_as_before(version: int) -> None:
    rng = random.Random(f"mutated-{version}")
    outcomes = {"read": 0, "refused": 0}
    for _ in range(400):
        parsed = _same(_mutate(_valid(version, rng, common=rng.random() < 0.8), rng))
        outcomes["read" if isinstance(parsed, Request) else "refused"] += 1
    assert outcomes["read"] and outcomes["refused"], outcomes  # both kinds were exercised




@pytest.mark.parametrize("version", VERSIONS)
def test_inflated_lengths_are_still_refused_before_kio(version: int) -> None:
    """Issue 13's hostile frames: each declared length of valid requests (the header's client
    id included) replaced by one more than the bytes left, the most its encoding holds, and
    (varints) exactly the bytes left: the same answer as before, and every one that declares
    more than is left refused by the length check, naming the field."""
    rng = random.Random(f"inflated-{version}")
    cls = request_type(PRODUCE, version)
    refused = 0
    for _ in range(6):
        frame = _valid(version, rng, common=True)
        for at, encoding in length_fields(frame, cls.__header_schema__, cls) or ():
            if encoding == "uvarint":
                width = 1
                while frame[at + width - 1] >= 0x80:
                    width += 1
            else:
                width = 2 if encoding == "int16" else 4
            rest = frame[at + width:]
            left = len(rest)
            if encoding == "int16":
                news = [(struct.pack(">h", n), n) for n in {left + 1, 2**15 - 1} if n < 2**15]
            elif encoding == "int32":
                news = [(struct.pack(">i", n), n) for n in (left + 1, 2**31 - 1)]
            else:  # compact lengths hold n + 1; a tagged-field count or size holds n
                news = [(varint(n), n - 1) for n in (left + 1, left + 2, 2**35 - 1)]
            for new, declared in news:
                hostile = frame[:at] + new + rest
                parsed = _same(hostile)
                if declared > left:
                    assert read_produce(hostile, cls) is None
                    reason = check_lengths(hostile, cls.__header_schema__, cls)
                    assert reason is not None and ("declares" in reason or "varint" in reason)
                    assert isinstance(parsed, Reject) and reason in parsed.reason
                    refused += 1
    assert refused > 20
