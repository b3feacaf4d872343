"""Every length a request frame declares, checked against the bytes left, before kio reads it.

Why it exists: kio's native (Rust) reader allocates what a length prefix declares before reading
(``Vec::with_capacity``), and a failed allocation aborts the process: an OffsetForLeaderEpoch
frame whose topic array declared billions of elements printed "memory allocation of
208751936256 bytes failed" and killed the broker - one client frame. Kafka's generated readers
refuse such a frame ("Tried to allocate a collection of size N, but there are only M bytes
remaining") and the connection is closed; :func:`check_lengths` does the same before the frame
reaches kio, so a declared length that does not fit never does.

How: the walk follows kio's own schema for the API key and version (the entity dataclasses and
their ``kafka_type`` / ``tag`` metadata, read by :func:`fields`, which ``frames`` also uses for
its null checks) and reads the frame exactly as kio's reader does (same encodings, same extent
of every field), so each length it checks is the one kio would read at that offset:

- legacy (non-flexible) versions: int16-length strings, int32-length bytes / records / arrays,
  -1 = null;
- flexible versions: unsigned-varint lengths holding length + 1 (0 = null) and, after each
  struct's fields, the tagged fields (uvarint count, then uvarint tag, uvarint size, the value;
  a value must be exactly its declared size);
- a nullable struct is an int8 marker (-1 = null) then its fields; a request header's
  ``client_id`` is a nullable int16 string even in flexible headers (as in Kafka and kio).

A string or byte length must fit in what is left; an array's count may not exceed what is left
and count x (the smallest encoding of one element) must fit (Kafka's bound, tightened). Runs of
fixed-size fields are skipped as one step and bytes / records are skipped by their declared size
(record batches are validated on append, not here), so the cost on Produce stays flat however
large the batches (measured figures in docs/decisions.md, "Declared lengths").

Pure logic: bytes in, None or an error message out.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from dataclasses import dataclass
from typing import Any, Final

_FIXED_SIZES: Final = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}
_VARINT_MAX_BYTES = 5  # Kafka's unsigned varints hold 32 bits (ByteUtils.readUnsignedVarint)
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I8 = struct.Struct(">b")


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a kio entity, as the wire sees it."""

    name: str
    nullable: bool
    entity: type[Any] | None
    """The struct type of the field (or of its array's elements), None for a primitive."""
    array: bool
    kafka_type: str | None
    """kio's ``kafka_type`` metadata (None for a struct or an array of structs)."""
    tag: int | None
    """The tag of a tagged field (flexible versions), None for a regular one."""


_FIELDS: dict[type[Any], tuple[Field, ...]] = {}


def fields(cls: type[Any]) -> tuple[Field, ...]:
    """The fields of a kio entity class, in declaration (= wire) order, cached."""
    known = _FIELDS.get(cls)
    if known is not None:
        return known
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        args = typing.get_args(hint)
        nullable = type(None) in args
        inner = next((a for a in args if a is not type(None)), hint) if nullable else hint
        array = typing.get_origin(inner) is tuple
        element = typing.get_args(inner)[0] if array else inner
        entity = element if dataclasses.is_dataclass(element) else None
        tag = f.metadata.get("tag")
        out.append(Field(f.name, nullable, entity, array,  # type: ignore[arg-type]
                         f.metadata.get("kafka_type"), None if tag is None else int(tag)))
    _FIELDS[cls] = result = tuple(out)
    return result


class Malformed(Exception):
    """A length or count that does not fit the frame (``path``: the field it was read for)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path = path
        self.reason = reason

    def within(self, prefix: str) -> Malformed:
        return Malformed(f"{prefix}.{self.path}" if self.path else prefix, self.reason)

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}" if self.path else self.reason


# ---- the compiled walk -------------------------------------------------------------------------
# A struct compiles to a tuple of steps; each step is a tuple whose first item is its kind.

_SKIP = 0  # (kind, size, name): a run of fixed-size fields
_LEGACY_STRING = 1  # (kind, 0, name): int16 length, -1 = null
_LEGACY_BYTES = 2  # (kind, 0, name): int32 length, -1 = null
_COMPACT = 3  # (kind, 0, name): uvarint length + 1, 0 = null (strings, bytes, records)
_LEGACY_ARRAY = 4  # (kind, element step, name, element minimum size)
_COMPACT_ARRAY = 5  # (kind, element step, name, element minimum size)
_STRUCT = 6  # (kind, Struct, name)
_NULLABLE_STRUCT = 7  # (kind, Struct, name): int8 marker, -1 = null

Step = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Struct:
    steps: tuple[Step, ...]
    flexible: bool
    tagged: dict[int, Step]
    minimum: int
    """The fewest bytes one instance takes (all nullable parts null, no tagged fields)."""


_STRUCTS: dict[tuple[type[Any], bool], Struct] = {}


def compile_struct(cls: type[Any], header: bool = False) -> Struct:
    """The walk of one kio entity class (cached); ``header``: a request header."""
    known = _STRUCTS.get((cls, header))
    if known is not None:
        return known
    flexible = bool(cls.__flexible__)
    steps: list[Step] = []
    tagged: dict[int, Step] = {}
    for f in fields(cls):
        step = _field_step(f, flexible, header)
        if f.tag is not None:
            tagged[f.tag] = step
        elif step[0] == _SKIP and steps and steps[-1][0] == _SKIP:
            last = steps.pop()
            steps.append((_SKIP, last[1] + step[1], f"{last[2]}..{f.name}"))
        else:
            steps.append(step)
    minimum = sum(_minimum(s) for s in steps) + (1 if flexible else 0)
    _STRUCTS[(cls, header)] = struct_ = Struct(tuple(steps), flexible, tagged, minimum)
    return struct_


def _field_step(f: Field, flexible: bool, header: bool) -> Step:
    if header and f.name == "client_id":  # a nullable int16 string in every header version
        return (_LEGACY_STRING, 0, f.name)
    if f.entity is not None:
        inner: Step = (_STRUCT, compile_struct(f.entity), f.name)
        if not f.array and f.nullable:  # kio reads a null marker, tagged or not
            inner = (_NULLABLE_STRUCT, inner[1], f.name)
    else:
        inner = _primitive_step(f, flexible)
        if f.array:  # an element is named by its index alone
            inner = (inner[0], inner[1], "")
    if not f.array:
        return inner
    return (_COMPACT_ARRAY if flexible else _LEGACY_ARRAY, inner, f.name, _minimum(inner))


def _primitive_step(f: Field, flexible: bool) -> Step:
    kind = f.kafka_type
    if kind in _FIXED_SIZES:
        return (_SKIP, _FIXED_SIZES[kind], f.name)
    if kind in ("string", "bytes", "records"):
        if flexible:
            return (_COMPACT, 0, f.name)
        return (_LEGACY_STRING if kind == "string" else _LEGACY_BYTES, 0, f.name)
    raise LookupError(f"field {f.name}: kio type {kind!r} has no known wire size")


def _minimum(step: Step) -> int:
    kind = step[0]
    if kind == _SKIP:
        return int(step[1])
    if kind in (_LEGACY_STRING,):
        return 2
    if kind in (_LEGACY_BYTES, _LEGACY_ARRAY):
        return 4
    if kind in (_COMPACT, _COMPACT_ARRAY, _NULLABLE_STRUCT):
        return 1
    return int(step[1].minimum)  # _STRUCT


# ---- reading -----------------------------------------------------------------------------------


def _uvarint(data: bytes | memoryview, at: int, end: int, name: str) -> tuple[int, int]:
    """(value, position after it) of an unsigned varint at ``at``."""
    value = shift = 0
    for i in range(_VARINT_MAX_BYTES):
        if at + i >= end:
            raise Malformed(name, "the frame ends inside a varint")
        byte = data[at + i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at + i + 1
        shift += 7
    raise Malformed(name, f"a varint longer than {_VARINT_MAX_BYTES} bytes")


def _too_long(declared: int, left: int, what: str) -> str:
    return f"declares {declared} {what}, but only {left} bytes are left in the request"


Found = list[tuple[int, str]] | None
"""Where the walk records each length it reads (position, "int16" / "int32" / "uvarint"), for
:func:`length_fields`; None on the request path."""

_ENCODING = {_COMPACT: "uvarint", _COMPACT_ARRAY: "uvarint", _LEGACY_STRING: "int16",
             _LEGACY_BYTES: "int32", _LEGACY_ARRAY: "int32"}


def _walk_step(data: bytes | memoryview, at: int, end: int, step: Step,
               found: Found = None) -> int:
    kind = step[0]
    if found is not None and kind in _ENCODING:
        found.append((at, _ENCODING[kind]))
    if kind == _SKIP:
        at += step[1]
        if at > end:
            raise Malformed(step[2], "the frame ends inside the field")
        return at
    if kind == _COMPACT:
        n, at = _uvarint(data, at, end, step[2])
        if n > end - at + 1:
            raise Malformed(step[2], _too_long(n - 1, end - at, "bytes"))
        return at + n - 1 if n else at
    if kind in (_LEGACY_STRING, _LEGACY_BYTES):
        length = _I16 if kind == _LEGACY_STRING else _I32
        if at + length.size > end:
            raise Malformed(step[2], "the frame ends inside the length")
        n = length.unpack_from(data, at)[0]
        at += length.size
        if n < -1:
            raise Malformed(step[2], f"a negative length {n}")
        if n > end - at:
            raise Malformed(step[2], _too_long(n, end - at, "bytes"))
        return at + n if n > 0 else at
    if kind in (_COMPACT_ARRAY, _LEGACY_ARRAY):
        if kind == _COMPACT_ARRAY:
            n, at = _uvarint(data, at, end, step[2])
            count = n - 1
        else:
            if at + 4 > end:
                raise Malformed(step[2], "the frame ends inside the count")
            count = _I32.unpack_from(data, at)[0]
            at += 4
            if count < -1:
                raise Malformed(step[2], f"a negative count {count}")
        if count <= 0:
            return at
        left = end - at
        if count > left or count * step[3] > left:
            raise Malformed(step[2], _too_long(count, left, "elements") +
                            f" (each takes at least {max(step[3], 1)})")
        element = step[1]
        i = 0
        try:
            if element[0] == _STRUCT:
                struct_ = element[1]
                for i in range(count):  # noqa: B007 - ``i`` names the element in an error
                    at = _walk_struct(data, at, end, struct_, found)
            else:
                for i in range(count):  # noqa: B007
                    at = _walk_step(data, at, end, element, found)
        except Malformed as exc:
            raise exc.within(f"{step[2]}[{i}]") from None
        return at
    if kind == _NULLABLE_STRUCT:
        if at + 1 > end:
            raise Malformed(step[2], "the frame ends inside the null marker")
        if _I8.unpack_from(data, at)[0] == -1:
            return at + 1
        at += 1
    try:
        return _walk_struct(data, at, end, step[1], found)
    except Malformed as exc:
        raise exc.within(step[2]) from None


def _walk_struct(data: bytes | memoryview, at: int, end: int, struct_: Struct,
                 found: Found = None) -> int:
    if found is not None:
        for step in struct_.steps:
            at = _walk_step(data, at, end, step, found)
        return _walk_tags(data, at, end, struct_, found) if struct_.flexible else at
    for step in struct_.steps:  # the common steps inline: this is on every request's path
        kind = step[0]
        if kind == _SKIP:
            at += step[1]
            if at > end:
                raise Malformed(step[2], "the frame ends inside the field")
        elif kind == _COMPACT:
            if at < end and data[at] < 0x80:
                n = data[at]
                at += 1
            else:
                n, at = _uvarint(data, at, end, step[2])
            if n > 1:
                if n - 1 > end - at:
                    raise Malformed(step[2], _too_long(n - 1, end - at, "bytes"))
                at += n - 1
        else:
            at = _walk_step(data, at, end, step)
    if not struct_.flexible:
        return at
    if at < end and data[at] == 0:  # no tagged fields: nearly always
        return at + 1
    return _walk_tags(data, at, end, struct_)


def _walk_tags(data: bytes | memoryview, at: int, end: int, struct_: Struct,
               found: Found = None) -> int:
    if found is not None:
        found.append((at, "uvarint"))
    count, at = _uvarint(data, at, end, "tagged fields")
    if count > end - at:
        raise Malformed("tagged fields", _too_long(count, end - at, "tagged fields"))
    for _ in range(count):
        tag, at = _uvarint(data, at, end, "tagged fields")
        if found is not None:
            found.append((at, "uvarint"))
        size, at = _uvarint(data, at, end, f"tagged field {tag}")
        if size > end - at:
            raise Malformed(f"tagged field {tag}", _too_long(size, end - at, "bytes"))
        step = struct_.tagged.get(tag)
        if step is None:
            at += size  # kio refuses an unknown tag itself; Kafka skips it
            continue
        stop = at + size
        after = _walk_step(data, at, stop, step, found)
        if after != stop:
            raise Malformed(step[2], f"the tagged field declares {size} bytes but its value "
                            f"takes {after - at}")
        at = after
    return at


def end_of(data: bytes | memoryview, cls: type[Any], at: int = 0, header: bool = False) -> int:
    """Where the ``cls`` entity that starts at ``at`` ends (kio's extent of it); raises
    :class:`Malformed` for a length that does not fit in ``data``."""
    return _walk_struct(data, at, len(data), compile_struct(cls, header))


def check_lengths(frame: bytes | memoryview, header: type[Any], body: type[Any]) -> str | None:
    """None if every length ``frame`` (a request without its size prefix) declares fits in it,
    read as ``header`` then ``body`` (kio entity classes); else what does not fit, and where."""
    try:
        at = end_of(frame, header, header=True)
    except Malformed as exc:
        return f"request header {exc}"
    try:
        end_of(frame, body, at)
    except Malformed as exc:
        return str(exc)
    return None


def length_fields(frame: bytes | memoryview, header: type[Any], body: type[Any]) -> Found:
    """Every length and count a valid request ``frame`` declares: (position, encoding), in frame
    order - for the fuzz test that inflates each one. Raises :class:`Malformed` as the check."""
    found: list[tuple[int, str]] = []
    at = _walk_struct(frame, 0, len(frame), compile_struct(header, True), found)
    _walk_struct(frame, at, len(frame), compile_struct(body), found)
    return found
