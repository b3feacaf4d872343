"""A Produce request as the handler reads it, and a one-pass reader for the common shape.

Why it exists: librdkafka with its default million requests in flight and linger.ms=0 sends a
Produce request for every record or two, so the broker's CPU per request decides whether the
Kafka listener keeps up. The general path of ``frames.parse_request`` (the declared-length walk,
kio's reader, the null check) and the kio entities it builds cost ~10-20 us a small Produce
request here; the handler then walked those entities again. :func:`read_produce` reads the
frame once, straight into :class:`ProduceBody` (figures in docs/decisions.md, "Kafka listener:
CPU per Produce and Fetch request").

:class:`ProduceBody` is what a Produce request's ``Request.body`` always is: made by
:func:`read_produce` for a frame of the common shape, else from the kio entity the general path
read (:func:`from_kio`): one form for the handler, two ways to it, equal for every frame both
read (a differential test checks valid, mutated and issue 13's hostile frames of every Produce
version). Record sets are views of the frame (no copy) when read here, bytes when read by kio.

What :func:`read_produce` declines (None; the general path then reads the frame and refuses it
if it must, exactly as before):

- a transactional id (transactional produce is refused in the handler; rare), any tagged field
  (header, body, topic, partition), a null or empty topic or partition array, a null topic
  name, a non-ASCII topic name or client id;
- a length or count that does not fit in the bytes left, a varint that is not in its shortest
  form or longer than 5 bytes, and bytes after the body.

So it accepts only frames the general path accepts (every length fits, no non-nullable field
is null). Issue 13's guard holds: no length read from the frame is allocated; arrays are read
one element at a time, each element's bytes checked before they are sliced, so a count larger
than the frame ends at the first element that does not fit. The wire layout is taken from kio's
own schema of each version (field names, order and types): a version whose schema is not the
one expected here is never read by it.

Pure logic: bytes in, values out.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from typing import Any, NamedTuple

from strom.broker.kafka.declared_lengths import fields

_CLIENT_ID_AT = 8  # after api key, api version, correlation id
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_NO_UUID = bytes(16)
_TIMEOUT_UNIT = datetime.timedelta(milliseconds=1)  # kio reads the timeout as a timedelta


class PartitionData(NamedTuple):
    partition: int
    """The partition index (kio's ``index``)."""
    records: bytes | memoryview | None


class TopicData(NamedTuple):
    name: str | None
    """None from v13 on (topics are named by id)."""
    topic_id: uuid.UUID | None
    """v13 on; None before (and for the zero UUID, as kio reads it)."""
    partitions: tuple[PartitionData, ...]


class ProduceBody(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: tuple[TopicData, ...]


def from_kio(body: Any) -> ProduceBody:
    """The :class:`ProduceBody` of a kio ``ProduceRequest`` entity (any version)."""
    return ProduceBody(
        body.transactional_id, int(body.acks), int(body.timeout / _TIMEOUT_UNIT),
        tuple(TopicData(getattr(t, "name", None), getattr(t, "topic_id", None),
                        tuple(PartitionData(int(p.index), p.records) for p in t.partition_data))
              for t in body.topic_data))


_SHAPES: dict[type[Any], tuple[bool, bool] | None] = {}


def _shape(body_type: type[Any]) -> tuple[bool, bool] | None:
    """(flexible, topics named by UUID) for ``body_type`` (a kio ProduceRequest class), None if
    its schema is not the one this reader knows (then the general path reads every frame of
    that version)."""
    if body_type not in _SHAPES:
        _SHAPES[body_type] = _read_shape(body_type)
    return _SHAPES[body_type]


def _read_shape(body_type: type[Any]) -> tuple[bool, bool] | None:
    body = fields(body_type)
    if [(f.name, f.kafka_type, f.tag, f.array) for f in body] != [
            ("transactional_id", "string", None, False), ("acks", "int16", None, False),
            ("timeout", "timedelta_i32", None, False), ("topic_data", None, None, True)]:
        return None
    topic_type = body[3].entity
    if topic_type is None:
        return None
    topic = [(f.name, f.kafka_type, f.tag, f.nullable, f.array) for f in fields(topic_type)]
    if topic[0] == ("name", "string", None, False, False):
        by_id = False
    elif topic[0] == ("topic_id", "uuid", None, True, False):
        by_id = True
    else:
        return None
    partition_type = fields(topic_type)[1].entity if len(topic) == 2 else None
    if topic[1:] != [("partition_data", None, None, False, True)] or partition_type is None:
        return None
    if [(f.name, f.kafka_type, f.tag, f.nullable, f.array) for f in fields(partition_type)] != [
            ("index", "int32", None, False, False), ("records", "records", None, True, False)]:
        return None
    return bool(body_type.__flexible__), by_id


def _uvarint(frame: bytes, at: int, end: int) -> tuple[int, int]:
    """(value, position after it) of a shortest-form unsigned varint of at most 5 bytes;
    (-1, at) for anything else (the frame ends inside it, too long, not shortest)."""
    value = shift = 0
    for i in range(5):
        if at + i >= end:
            return -1, at
        byte = frame[at + i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if byte == 0 and i:  # a zero last byte: not the shortest form
                return -1, at
            return value, at + i + 1
        shift += 7
    return -1, at


def read_produce(data: bytes | memoryview, body_type: type[Any]
                 ) -> tuple[str | None, ProduceBody] | None:
    """(client id, body) of a Produce request ``data`` (without its size prefix) of the common
    shape, read as kio reads ``body_type`` (a kio ProduceRequest class); None otherwise (and
    for a memoryview: the listener reads frames as bytes)."""
    shape = _shape(body_type)
    if shape is None or not isinstance(data, bytes):
        return None
    flexible, by_id = shape
    frame: bytes = data
    end = len(frame)
    # -- request header: client id (a nullable int16 string in every header version)
    at = _CLIENT_ID_AT + 2
    if at > end:
        return None
    n = _I16.unpack_from(frame, _CLIENT_ID_AT)[0]
    client_id: str | None = None
    if n >= 0:
        if at + n > end:
            return None
        raw = frame[at:at + n]
        if not raw.isascii():
            return None
        client_id = raw.decode("ascii")
        at += n
    elif n != -1:
        return None
    if flexible:  # the header's tagged fields: none
        if at >= end or frame[at]:
            return None
        at += 1
    # -- body: a null transactional id, acks, timeout
    if flexible:
        if at >= end or frame[at]:  # compact: 0 is null
            return None
        at += 1
    else:
        if at + 2 > end or _I16.unpack_from(frame, at)[0] != -1:
            return None
        at += 2
    if at + 6 > end:
        return None
    acks, timeout = _ACKS_TIMEOUT.unpack_from(frame, at)
    at += 6
    # -- topics
    if flexible:
        if at < end and frame[at] < 0x80:  # one-byte varints inline: nearly every one
            count = frame[at] - 1
            at += 1
        else:
            count, at = _uvarint(frame, at, end)
            count -= 1
    else:
        if at + 4 > end:
            return None
        count = _I32.unpack_from(frame, at)[0]
        at += 4
    if count < 1:
        return None
    view = memoryview(frame)
    topics = []
    for _ in range(count):
        name: str | None = None
        topic_id: uuid.UUID | None = None
        if by_id:
            if at + 16 > end:
                return None
            raw = frame[at:at + 16]
            topic_id = None if raw == _NO_UUID else uuid.UUID(bytes=raw)  # as kio reads it
            at += 16
        else:
            if flexible:
                if at < end and frame[at] < 0x80:
                    n = frame[at] - 1
                    at += 1
                else:
                    n, at = _uvarint(frame, at, end)
                    n -= 1
            else:
                if at + 2 > end:
                    return None
                n = _I16.unpack_from(frame, at)[0]
                at += 2
            if n < 0 or at + n > end:  # a null name is refused by the general path
                return None
            raw = frame[at:at + n]
            if not raw.isascii():
                return None
            name = raw.decode("ascii")
            at += n
        if flexible:
            if at < end and frame[at] < 0x80:
                parts = frame[at] - 1
                at += 1
            else:
                parts, at = _uvarint(frame, at, end)
                parts -= 1
        else:
            if at + 4 > end:
                return None
            parts = _I32.unpack_from(frame, at)[0]
            at += 4
        if parts < 1:
            return None
        partitions = []
        for _ in range(parts):
            if at + 4 > end:
                return None
            index = _I32.unpack_from(frame, at)[0]
            at += 4
            if flexible:
                n, at = _uvarint(frame, at, end)
                if n < 0:
                    return None
                n -= 1  # -1: null
            else:
                if at + 4 > end:
                    return None
                n = _I32.unpack_from(frame, at)[0]
                at += 4
                if n < -1:
                    return None
            records: memoryview | None = None
            if n >= 0:
                if at + n > end:
                    return None
                records = view[at:at + n]
                at += n
            if flexible:
                if at >= end or frame[at]:
                    return None
                at += 1
            partitions.append(PartitionData(index, records))
        if flexible:
            if at >= end or frame[at]:
                return None
            at += 1
        topics.append(TopicData(name, topic_id, tuple(partitions)))
    if flexible:
        if at >= end or frame[at]:
            return None
        at += 1
    if at != end:
        return None
    return client_id, ProduceBody(None, acks, timeout, tuple(topics))
