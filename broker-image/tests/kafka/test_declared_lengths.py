"""Declared lengths checked against the bytes left before kio reads a request (issue 13).

Each wire encoding is tested on a small kio-style entity (kio's own reader and writer accept
them), at the boundary: a length that exactly fits the bytes left passes the check, one more
byte is refused naming the field, and every frame the check passes is read by kio to the same
extent. Then every API and version the listener serves: seeded valid requests all pass with
kio's extent; and the frame that aborted the process (kio allocating a 26 GB array) is refused.
"""

# no ``from __future__ import annotations``: kio reads the entities' field types at runtime

import dataclasses
import datetime
import io
import random
import struct
import typing
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from strom.broker.kafka.apis import SUPPORTED
from strom.broker.kafka.declared_lengths import Field, Malformed, end_of, fields, length_fields
from strom.broker.kafka.frames import Reject, parse_request, request_type


def entity(name: str, flexible: bool, *spec: tuple[Any, ...]) -> type[Any]:
    """A kio-style entity class: fields (name, type, metadata[, default]) in wire order."""
    return dataclasses.make_dataclass(
        name, [(n, t, dataclasses.field(metadata=m, default=d[0] if d else dataclasses.MISSING))
               for n, t, m, *d in spec],
        namespace={"__type__": EntityType.nested, "__version__": 0, "__flexible__": flexible},
        frozen=True, slots=True, kw_only=True)


def encode(cls: type[Any], **values: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, cls(**values))
    return buffer.getvalue()


def kio_extent(cls: type[Any], data: bytes) -> int:
    return int(entity_reader(cls)(data, 0)[1])


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def refused(data: bytes, cls: type[Any]) -> Malformed:
    with pytest.raises(Malformed) as caught:
        end_of(data, cls)
    return caught.value


STR = {"kafka_type": "string"}
BYTES = {"kafka_type": "bytes"}
RECORDS = {"kafka_type": "records"}
I32 = {"kafka_type": "int32"}
I64 = {"kafka_type": "int64"}


# ---- each encoding, at the boundary -------------------------------------------------------------
# (flexible, kafka metadata, field type, a value, how a declared length n is written)

def _legacy16(n: int) -> bytes:
    return struct.pack(">h", n)


def _legacy32(n: int) -> bytes:
    return struct.pack(">i", n)


def _compact(n: int) -> bytes:
    return uvarint(n + 1)


LENGTHS = [
    pytest.param(False, STR, str, "abc", 2, _legacy16, id="legacy string (int16)"),
    pytest.param(False, STR, str | None, "abc", 2, _legacy16, id="legacy nullable string"),
    pytest.param(False, BYTES, bytes, b"abcd", 4, _legacy32, id="legacy bytes (int32)"),
    pytest.param(False, RECORDS, bytes | None, b"abcd", 4, _legacy32, id="legacy records"),
    pytest.param(True, STR, str, "abc", 1, _compact, id="compact string (uvarint+1)"),
    pytest.param(True, STR, str | None, "abc", 1, _compact, id="compact nullable string"),
    pytest.param(True, BYTES, bytes, b"abcd", 1, _compact, id="compact bytes"),
    pytest.param(True, RECORDS, bytes | None, b"x" * 300, 2, _compact, id="compact records"),
]


@pytest.mark.parametrize(("flexible", "meta", "hint", "value", "prefix", "write"), LENGTHS)
def test_a_length_that_exactly_fits_passes_and_one_byte_more_is_refused(
        flexible: bool, meta: dict[str, Any], hint: Any, value: Any, prefix: int,
        write: Any) -> None:
    cls = entity("One", flexible, ("before", int, I32), ("field", hint, meta))
    data = encode(cls, before=7, field=value)
    assert end_of(data, cls) == kio_extent(cls, data) == len(data)
    content = data[4 + prefix:]  # the value, then (flexible) the tagged-field count
    left = len(content)
    exactly = data[:4] + write(left) + content  # declares every byte left: fits the frame
    try:
        end_of(exactly, cls)
    except Malformed as exc:  # it fits; only the tagged-field count after it is then missing
        assert flexible and exc.path == "tagged fields", exc
    error = refused(data[:4] + write(left + 1) + content, cls)
    assert error.path == "field"
    assert f"declares {left + 1} bytes, but only {left} bytes are left" in error.reason


@pytest.mark.parametrize(("flexible", "meta", "hint", "value", "prefix", "write"), LENGTHS)
def test_null_and_negative_lengths(flexible: bool, meta: dict[str, Any], hint: Any, value: Any,
                                   prefix: int, write: Any) -> None:
    cls = entity("One", flexible, ("field", hint, meta))
    tail = b"\x00" if flexible else b""
    null = (b"\x00" if flexible else write(-1)) + tail
    assert end_of(null, cls) == len(null)
    if type(None) in typing.get_args(hint):
        assert kio_extent(cls, null) == len(null)
        assert entity_reader(cls)(null, 0)[0].field is None
    if not flexible:
        assert "negative length -2" in refused(write(-2) + tail, cls).reason


ARRAYS = [
    pytest.param(False, _legacy32, id="legacy array (int32 count)"),
    pytest.param(True, _compact, id="compact array (uvarint count+1)"),
]


@pytest.mark.parametrize(("flexible", "write"), ARRAYS)
def test_an_array_count_is_bounded_by_its_smallest_elements(flexible: bool, write: Any) -> None:
    cls = entity("Longs", flexible, ("values", tuple[int, ...], I64))
    data = encode(cls, values=(1, 2, 3))
    assert end_of(data, cls) == kio_extent(cls, data) == len(data)
    prefix = 4 if not flexible else 1
    body = data[prefix:]
    # 3 x 8 bytes fit; 4 x 8 do not, though 4 <= the bytes left: refused before any element
    error = refused(write(4) + body, cls)
    assert error.path == "values"
    assert f"declares 4 elements, but only {len(body)} bytes are left" in error.reason
    assert "at least 8" in error.reason
    # the count that aborted the broker: billions of elements declared in a few bytes
    huge = uvarint(26093992033) if flexible else write(2**31 - 1)
    assert "elements, but only" in refused(huge + body, cls).reason
    null = b"\x00\x00" if flexible else write(-1)
    assert end_of(null, cls) == kio_extent(cls, null) == len(null)
    if not flexible:
        assert "negative count -2" in refused(write(-2), cls).reason


def test_a_count_within_the_bound_still_has_each_element_checked() -> None:
    cls = entity("Names", False, ("names", tuple[str, ...], STR))
    data = encode(cls, names=("ab", "cd"))
    assert end_of(data, cls) == len(data)
    # 3 names would fit at 2 bytes each, but the third is missing: the walk finds the end
    inflated = struct.pack(">i", 3) + data[4:]
    assert refused(inflated, cls).path == "names[2]"


def test_every_nesting_level_is_walked_and_named() -> None:
    for flexible in (False, True):
        leaf = entity("Leaf", flexible, ("id", int, I32), ("name", str, STR))
        middle = entity("Middle", flexible, ("leaves", tuple[leaf, ...], {}),  # type: ignore[valid-type]
                        ("spare", leaf | None, {}))
        top = entity("Top", flexible, ("middles", tuple[middle, ...], {}))  # type: ignore[valid-type]
        value = top(middles=(middle(leaves=(), spare=None),
                             middle(leaves=(leaf(id=1, name="a"), leaf(id=2, name="bc")),
                                    spare=leaf(id=3, name="def"))))
        buffer = io.BytesIO()
        entity_writer(top)(buffer, value)
        data = buffer.getvalue()
        assert end_of(data, top) == kio_extent(top, data) == len(data)
        assert entity_reader(top)(data, 0)[0] == value
        # the second leaf's name "bc": its length prefix sits right before it
        at = data.index(b"bc") - (1 if flexible else 2)
        bumped = (uvarint(3 + 100) if flexible else struct.pack(">h", 100))
        error = refused(data[:at] + bumped + data[at + len(bumped):], top)
        assert error.path == "middles[1].leaves[1].name", (flexible, error)
        # the nullable struct's marker: -1 is null, anything else is followed by the struct
        spare = data.index(b"def") - (1 if flexible else 2) - 4 - 1
        assert data[spare] == 1
        cut = data[:spare + 1] + b"\x00\x00"
        assert refused(cut, top).path.startswith("middles[1].spare")


def test_tagged_fields_are_walked_within_their_declared_size() -> None:
    inner = entity("Inner", True, ("n", int, I32))
    cls = entity("Tagged", True, ("a", int, I32),
                 ("note", str | None, {"kafka_type": "string", "tag": 0}, None),
                 ("state", inner, {"tag": 1}, inner(n=0)))
    data = encode(cls, a=1, note="hi", state=inner(n=5))
    assert end_of(data, cls) == kio_extent(cls, data) == len(data)
    # layout: a (4) | count 2 | tag 0, size 3, "hi" as compact | tag 1, size 5, n, 0
    assert data[4:] == b"\x02" + b"\x00\x03\x03hi" + b"\x01\x05\x00\x00\x00\x05\x00"
    head = data[:4]

    def with_tags(*tags: bytes, count: int | None = None) -> bytes:
        return head + uvarint(len(tags) if count is None else count) + b"".join(tags)

    assert end_of(with_tags(), cls) == 5
    assert end_of(with_tags(b"\x00\x03\x03hi"), cls) == 10
    # a declared size beyond the frame
    error = refused(with_tags(b"\x00\x04\x03hi"), cls)
    assert error.path == "tagged field 0" and "declares 4 bytes, but only 3" in error.reason
    # a size that does not match the value (the value ends before it)
    assert "declares 4 bytes but its value takes 3" in refused(
        with_tags(b"\x00\x04\x03hi!"), cls).reason
    # a length inside the tagged value that exceeds its declared size
    assert refused(with_tags(b"\x00\x03\x09hi"), cls).path == "note"
    # a tag count beyond the frame
    assert refused(with_tags(count=200), cls).path == "tagged fields"
    # an unknown tag is skipped by its size (kio then refuses it: see the frames test)
    assert end_of(with_tags(b"\x07\x02zz"), cls) == 9


def test_a_varint_longer_than_five_bytes_or_cut_short_is_refused() -> None:
    cls = entity("One", True, ("name", str, STR))
    assert "longer than 5" in refused(b"\x80\x80\x80\x80\x80\x00", cls).reason
    assert "ends inside a varint" in refused(b"\x80", cls).reason


def test_fixed_size_fields_past_the_end_are_refused() -> None:
    cls = entity("Fixed", False, ("a", int, I32), ("b", int, I64))
    assert end_of(bytes(12), cls) == 12
    assert refused(bytes(11), cls).path == "a..b"


# ---- every served API and version ---------------------------------------------------------------


def _value(kafka_type: str | None, rng: random.Random) -> Any:
    if kafka_type in ("int8", "int16", "int32", "int64"):
        bits = int(kafka_type[3:])
        return rng.randrange(-(2 ** (bits - 1)), 2 ** (bits - 1))
    if kafka_type == "string":
        return "".join(rng.choice("aé€x") for _ in range(rng.randrange(0, 40)))
    if kafka_type in ("bytes", "records"):
        return rng.randbytes(rng.choice([0, 3, 200]))
    if kafka_type == "bool":
        return rng.random() < 0.5
    if kafka_type == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if kafka_type == "timedelta_i32":
        return datetime.timedelta(milliseconds=rng.randrange(0, 2**31))
    if kafka_type == "timedelta_i64":
        return datetime.timedelta(milliseconds=rng.randrange(0, 2**40))
    if kafka_type == "error_code":
        return ErrorCode.none
    raise LookupError(kafka_type)


def _random(cls: type[Any], rng: random.Random, depth: int = 0) -> Any:
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.nullable and rng.random() < 0.2:
            values[f.name] = None
            continue
        if f.array:
            values[f.name] = tuple(_one(f, rng, depth)
                                   for _ in range(rng.randrange(0, 4 if depth < 2 else 1)))
        else:
            values[f.name] = _one(f, rng, depth)
    return cls(**values)


def _one(f: Field, rng: random.Random, depth: int) -> Any:
    return _random(f.entity, rng, depth + 1) if f.entity else _value(f.kafka_type, rng)


@pytest.mark.parametrize("key", sorted(SUPPORTED))
def test_valid_requests_of_every_served_version_pass_with_kios_extent(key: int) -> None:
    rng = random.Random(f"lengths-{key}")
    low, high = SUPPORTED[key]
    for version in range(low, high + 1):
        body_type = request_type(key, version)
        header_type = body_type.__header_schema__
        header_fields = {f.name for f in dataclasses.fields(header_type)}
        header = header_type(request_api_key=key, request_api_version=version,
                             correlation_id=1, **({"client_id": rng.choice([None, "c", "é" * 9])}
                                                  if "client_id" in header_fields else {}))
        for _ in range(20):
            buffer = io.BytesIO()
            entity_writer(header_type)(buffer, header)
            entity_writer(body_type)(buffer, _random(body_type, rng))
            frame = buffer.getvalue()
            _, at = entity_reader(header_type)(frame, 0)
            assert end_of(frame, header_type, header=True) == at
            _, size = entity_reader(body_type)(frame, at)
            assert end_of(frame, body_type, at) == at + size == len(frame), (key, version)


#: OffsetForLeaderEpoch v4 whose topics array declares 26,093,992,032 elements: kio 0.6.5
#: aborted the process allocating them ("memory allocation of 208751936256 bytes failed").
HUGE_COUNT_FRAME = bytes.fromhex(
    "00170004a0ad8465000466757a7a000000003ae1f0ca9a61bbcf130000000299ea063b00b795"
    "00000000000044000009636f6e73756d6572")


def test_the_frame_that_killed_the_broker_is_refused_before_kio_reads_it() -> None:
    parsed = parse_request(HUGE_COUNT_FRAME, SUPPORTED)
    assert isinstance(parsed, Reject)
    assert "topics: declares 26093992032 elements, but only 32 bytes are left" in parsed.reason


def test_an_unknown_tag_skipped_by_size_is_still_refused_by_kio() -> None:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.request_header.v2.header import RequestHeader

    buffer = io.BytesIO()
    entity_writer(RequestHeader)(buffer, RequestHeader(
        request_api_key=18, request_api_version=3, correlation_id=1,  # type: ignore[arg-type]
        client_id="c"))
    entity_writer(ApiVersionsRequest)(buffer, ApiVersionsRequest(
        client_software_name="x", client_software_version="1"))
    frame = buffer.getvalue()[:-1] + b"\x01\x09\x02zz"  # one tagged field, tag 9, 2 bytes
    parsed = parse_request(frame, SUPPORTED)
    assert isinstance(parsed, Reject) and "tag" in parsed.reason, parsed


def test_length_fields_names_every_length_in_frame_order() -> None:
    """The fuzz test inflates each one: the header's client id, then the body's lengths."""
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.request_header.v2.header import RequestHeader

    buffer = io.BytesIO()
    entity_writer(RequestHeader)(buffer, RequestHeader(
        request_api_key=18, request_api_version=3, correlation_id=1,  # type: ignore[arg-type]
        client_id="c"))
    entity_writer(ApiVersionsRequest)(buffer, ApiVersionsRequest(
        client_software_name="x", client_software_version="1"))
    frame = buffer.getvalue()
    # key, version, correlation id (8) | client id int16 "c" | header tags | name | version | tags
    assert length_fields(frame, RequestHeader, ApiVersionsRequest) == [
        (8, "int16"), (11, "uvarint"), (12, "uvarint"), (14, "uvarint"), (16, "uvarint")]
