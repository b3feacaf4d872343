"""Protobuf wire bytes around record data: batches are not copied into or out of messages.

A message that carries record batches in a ``bytes`` field costs, per MiB of records, a copy
when the field is set, one or two when it is serialized (the encoder grows its buffer), one when
it is parsed and one more each time the field is read (upb returns a new ``bytes`` per access).
For replication that is every replicated byte, on both brokers: with 1 KiB records and RF=3 it
was the largest item of the brokers' CPU profile after the kernel's own copies (perf: ~25 % of
the brokers' cycles in ``memmove``; benchmarks/README.md).

Here the small fields still go through protobuf (``SerializeToString`` / ``FromString`` of the
message *without* its records), and only the framing of the repeated per-partition messages and
of their records field is written and read by hand: encoding is one ``b"".join`` (the copy gRPC
needs anyway), decoding hands out ``memoryview`` slices of the received bytes. The bytes are
ordinary protobuf: any parser reads what :func:`encode` writes, and :func:`decode` reads what
any encoder writes (fields in any order, repeated scalars last-wins, unknown fields kept in the
heads). Tests pin both directions against protobuf's own encoder and parser.

Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

Buffer = bytes | bytearray | memoryview

Head = TypeVar("Head", bound=Message)
Item = TypeVar("Item", bound=Message)
T = TypeVar("T")

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class WireError(DecodeError):
    """Malformed protobuf bytes (a truncated varint or field, a group, a bad wire type)."""


def varint(value: int) -> bytes:
    """Protobuf varint of an int32/int64 (negative values take ten bytes, as protobuf does)."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_prefix(field: int, length: int) -> bytes:
    """Tag and length of a length-delimited field whose ``length`` payload bytes follow."""
    return varint((field << 3) | _LEN) + varint(length)


def read_varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of the varint at ``pos``; at most 10 bytes, inside ``end``."""
    result = 0
    shift = 0
    while pos < end and shift < 70:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    raise WireError(f"truncated or over-long varint before byte {pos}")


def _fields(buf: memoryview, pos: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, field start, value start, value end) of each field."""
    while pos < end:
        start = pos
        key, pos = read_varint(buf, pos, end)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireError(f"field number 0 at byte {start}")
        if wire_type == _VARINT:
            _, value_end = read_varint(buf, pos, end)
        elif wire_type == _LEN:
            length, pos = read_varint(buf, pos, end)
            value_end = pos + length
        elif wire_type == _I64:
            value_end = pos + 8
        elif wire_type == _I32:
            value_end = pos + 4
        else:
            raise WireError(f"wire type {wire_type} (groups are not supported) at byte {start}")
        if value_end > end:
            raise WireError(f"field {number} at byte {start} runs past the end of its message")
        yield number, wire_type, start, pos, value_end
        pos = value_end


def _parse(message_type: type[Head], buf: memoryview, ranges: list[tuple[int, int]]) -> Head:
    if len(ranges) == 1:
        a, b = ranges[0]
        return message_type.FromString(bytes(buf[a:b]))  # the small fields only
    return message_type.FromString(b"".join(buf[a:b] for a, b in ranges))


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in ranges:
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out or [(0, 0)]


def encode(head: Message, items_field: int, items: Sequence[tuple[Message, Buffer]],
           records_field: int) -> bytes:
    """Bytes of ``head`` with ``items`` appended to its repeated message field ``items_field``,
    each item carrying its records in its bytes field ``records_field``.

    ``head`` and the items must not set those fields themselves (they are serialized as they
    are, and protobuf would concatenate)."""
    parts: list[Buffer] = [head.SerializeToString()]
    for item, records in items:
        body = item.SerializeToString()
        size = records.nbytes if isinstance(records, memoryview) else len(records)
        prefix = length_prefix(records_field, size) if size else b""
        parts.append(length_prefix(items_field, len(body) + len(prefix) + size))
        parts.append(body)
        if size:
            parts.append(prefix)
            parts.append(records)
    return b"".join(parts)


def decode(data: Buffer, head_type: type[Head], items_field: int, item_type: type[Item],
           records_field: int) -> tuple[Head, list[tuple[Item, memoryview]]]:
    """Inverse of :func:`encode` for any protobuf encoding of the same message: the head
    without its items, and each item without its records beside a view of those records."""
    return decode_with(data, head_type, items_field, lambda buf, start, end: _decode_item(
        buf, start, end, item_type, records_field))


def decode_with(data: Buffer, head_type: type[Head], items_field: int,
                read_item: Callable[[memoryview, int, int], T]) -> tuple[Head, list[T]]:
    """:func:`decode` with each item read by ``read_item(buffer, start, end)`` (its bytes are
    ``buffer[start:end]``): the head without its items, and what ``read_item`` made of each."""
    buf = memoryview(data).cast("B")
    rest: list[tuple[int, int]] = []
    items: list[T] = []
    for number, wire_type, start, value_start, value_end in _fields(buf, 0, len(buf)):
        if number == items_field and wire_type == _LEN:
            items.append(read_item(buf, value_start, value_end))
        else:
            rest.append((start, value_end))
    return _parse(head_type, buf, _merged(rest)), items


def decode_item(buf: memoryview, pos: int, end: int, item_type: type[Item],
                records_field: int) -> tuple[Item, memoryview]:
    """One item of :func:`decode`: the message at ``buf[pos:end]`` without its records field,
    and a view of those records."""
    return _decode_item(buf, pos, end, item_type, records_field)


def _decode_item(buf: memoryview, pos: int, end: int, item_type: type[Item],
                 records_field: int) -> tuple[Item, memoryview]:
    rest: list[tuple[int, int]] = []
    records = buf[0:0]
    for number, wire_type, start, value_start, value_end in _fields(buf, pos, end):
        if number == records_field and wire_type == _LEN:
            records = buf[value_start:value_end]  # a later occurrence wins, as in protobuf
        else:
            rest.append((start, value_end))
    return _parse(item_type, buf, _merged(rest)), records
