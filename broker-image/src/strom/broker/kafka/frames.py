"""Kafka request and response frames: bytes in, typed messages out, and back (no I/O).

Why it exists: the socket code only moves size-prefixed frames; everything about their contents
is decided here, as Kafka's ``RequestContext`` / ``SocketServer`` decide it, and tested without a
socket. Message types come from ``kio`` (generated from Kafka's own JSON schemas): the request
header version, flexible (tagged-field) encodings and ApiVersions' special response header are
kio's, none are written by hand.

What a frame becomes (:func:`parse_request`):

- a :class:`Request` (header + body of a supported API and version);
- an :class:`ApiVersionsFallback` for an ApiVersions request of a version newer than this broker
  serves (KIP-511: the broker answers in version 0 with UNSUPPORTED_VERSION and its own ranges,
  so the client can pick a version);
- a :class:`Reject` for everything Kafka answers by closing the connection: a frame too short for
  a header, an unknown API key, an API this broker does not serve, an unsupported version, a body
  that does not parse, a null where the schema has a non-nullable array, string or struct
  (kio's readers accept a -1 length anywhere; Kafka's generated readers throw
  "non-nullable field ... was serialized as null");
- a :class:`Reject` for a declared length (string, bytes, records, array count, tagged field)
  that does not fit in the bytes left: checked by ``declared_lengths`` before kio reads the
  frame, because kio's native reader would allocate it and a failed allocation aborts the
  process (Kafka's readers refuse it the same way).

A Produce request's body is a ``produce_request.ProduceBody`` (the handler's form), not kio's
entity: read in one pass by ``produce_request.read_produce`` for the common shape (no
transactional id, no tagged fields, ...: the pipelined-Produce hot path), else made from the
entity the general path above read; a frame it declines takes that path, checks and all.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any, Generic, NamedTuple, TypeVar

from kio.index import load_payload_module
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.constants import EntityType

from strom.broker.kafka.declared_lengths import check_lengths, fields
from strom.broker.kafka.produce_request import from_kio, read_produce
from strom.protocol.wire import varint

API_VERSIONS_KEY = 18
PRODUCE_KEY = 0
_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id: the same in every version
_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")


class Request(NamedTuple):  # a tuple: one per request, built in a fraction of a dataclass's time
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    body: Any
    """The kio request entity of ``api_key`` at ``api_version``; for Produce a
    ``produce_request.ProduceBody``."""


@dataclass(frozen=True, slots=True)
class ApiVersionsFallback:
    correlation_id: int
    api_version: int


@dataclass(frozen=True, slots=True)
class Reject:
    reason: str
    """Why the connection is closed (for the log, as Kafka logs it)."""


Parsed = Request | ApiVersionsFallback | Reject


@cache
def request_type(api_key: int, api_version: int) -> type[Any]:
    """The kio request class (raises ``KioIndexError`` for an unknown key/version)."""
    module = load_payload_module(api_key, api_version, EntityType.request)
    return _payload_class(module, "Request")


@cache
def response_module(api_key: int, api_version: int) -> ModuleType:
    """The kio module with the response classes of one API version (nested ones too)."""
    return load_payload_module(api_key, api_version, EntityType.response)


def response_type(api_key: int, api_version: int) -> type[Any]:
    return _payload_class(response_module(api_key, api_version), "Response")


def _payload_class(module: ModuleType, suffix: str) -> type[Any]:
    for name in dir(module):
        value = getattr(module, name)
        if (isinstance(value, type) and name.endswith(suffix)
                and getattr(value, "__type__", None) in (EntityType.request, EntityType.response)):
            return value
    raise LookupError(f"no {suffix} class in {module.__name__}")


def parse_request(frame: bytes | memoryview,
                  supported: dict[int, tuple[int, int]]) -> Parsed:
    """Decode one request frame (without its size prefix). ``supported``: key -> (min, max)."""
    if len(frame) < _HEAD.size + 2:
        return Reject(f"a request of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _HEAD.unpack_from(frame)
    versions = supported.get(api_key)
    if versions is None:
        return Reject(f"API key {api_key} is not served by this broker")
    low, high = versions
    if not low <= api_version <= high:
        if api_key == API_VERSIONS_KEY and api_version > high:
            return ApiVersionsFallback(correlation_id, api_version)
        return Reject(f"API key {api_key} version {api_version} is not supported "
                      f"(this broker serves {low}..{high})")
    if api_key != PRODUCE_KEY:
        return parse_general(frame, api_key, api_version, correlation_id)
    common = read_produce(frame, request_type(api_key, api_version))
    if common is not None:
        return Request(api_key, api_version, correlation_id, common[0] or "", common[1])
    parsed = parse_general(frame, api_key, api_version, correlation_id)
    if isinstance(parsed, Request):
        return Request(api_key, api_version, correlation_id, parsed.client_id,
                       from_kio(parsed.body))
    return parsed


def parse_general(frame: bytes | memoryview, api_key: int, api_version: int,
                  correlation_id: int) -> Parsed:
    """The general path of :func:`parse_request` for a served API and version: lengths
    checked, then kio's reader, then the null check (the body: kio's entity, Produce's too)."""
    try:
        body_type = request_type(api_key, api_version)
        too_long = check_lengths(frame, body_type.__header_schema__, body_type)
        if too_long is not None:  # never handed to kio, whose reader would allocate it (#13)
            return Reject(f"malformed request (API key {api_key} version {api_version}): "
                          f"{too_long}")
        header, offset = entity_reader(body_type.__header_schema__)(frame, 0)
        body, _ = entity_reader(body_type)(frame, offset)
    except (SerialError, ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
        return Reject(f"malformed request (API key {api_key} version {api_version}): "
                      f"{type(exc).__name__}: {exc}")
    null = null_field(body)
    if null is not None:
        return Reject(f"malformed request (API key {api_key} version {api_version}): "
                      f"non-nullable field {null} was serialized as null")
    return Request(api_key, api_version, correlation_id, header.client_id or "", body)


def null_field(entity: Any, path: str = "") -> str | None:
    """The dotted name of the first non-nullable field that holds None, else None."""
    for f in fields(type(entity)):
        value = getattr(entity, f.name)
        name = f"{path}{f.name}"
        if value is None:
            if not f.nullable:
                return name
            continue
        if f.entity is None:
            continue
        for item in value if f.array else (value,):
            found = null_field(item, f"{name}.")
            if found is not None:
                return found
    return None


#: Writes at least this long (record sets) stay separate chunks of an encoded response instead of
#: being copied into it.
BIG_WRITE = 16_384

Chunk = bytes | bytearray | memoryview


class _Chunks:
    """A kio ``Writable`` that keeps the response as a list of chunks: small writes (sizes,
    ids, strings) are gathered into bytearrays, writes of ``BIG_WRITE`` bytes or more (the
    record sets of Fetch) are kept as the very objects kio was given, so no record byte is
    copied between the log read and the socket."""

    __slots__ = ("_small", "chunks", "size")

    def __init__(self) -> None:
        self._small = bytearray(4)  # the frame's size prefix, filled in by finish()
        self.chunks: list[Chunk] = [self._small]
        self.size = 0

    def write(self, data: Chunk) -> int:
        n = len(data)
        if n >= BIG_WRITE:
            self.chunks.append(data)
            self._small = bytearray()
            self.chunks.append(self._small)
        else:
            self._small += data
        self.size += n
        return n

    def finish(self) -> list[Chunk]:
        head = self.chunks[0]
        assert isinstance(head, bytearray)
        _SIZE.pack_into(head, 0, self.size)
        return [c for c in self.chunks if len(c)]


def encode_response_chunks(correlation_id: int, response: Any) -> list[Chunk]:
    """A size-prefixed response frame with the header version the response's schema names, as
    chunks to write in order (record sets not copied: see :class:`_Chunks`)."""
    out = _Chunks()
    buffer: Any = out  # kio's writers only call ``write`` (its Writable type names IO[bytes])
    header_type = type(response).__header_schema__
    entity_writer(header_type)(buffer, header_type(correlation_id=correlation_id))
    entity_writer(type(response))(buffer, response)
    return out.finish()


def encode_response(correlation_id: int, response: Any) -> bytes:
    """:func:`encode_response_chunks` joined into one ``bytes``."""
    return b"".join(encode_response_chunks(correlation_id, response))


_T = TypeVar("_T")


class TemplateCache(Generic[_T]):
    """Answer templates by everything that decides their bytes, shared by every connection.

    ``None`` is kept for a key whose answer cannot be templated (the ``ValueError`` of the
    template's constructor), so it is not tried again. Emptied when ``limit`` keys are held:
    keys with append times or offsets in them cannot grow it without bound, and a new key costs
    one kio encoding."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._by_key: dict[Hashable, _T | None] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def clear(self) -> None:
        self._by_key.clear()

    def __getitem__(self, key: Hashable) -> _T | None:
        """The kept template (KeyError if none was made: then :meth:`make` it)."""
        return self._by_key[key]

    def make(self, key: Hashable, make: Callable[[], _T]) -> _T | None:
        """Make, keep and return the template of ``key`` (None if it cannot be templated)."""
        if len(self._by_key) >= self.limit:
            self.clear()
        try:
            template: _T | None = make()
        except ValueError:
            template = None
        self._by_key[key] = template
        return template


class ResponseTemplate:
    """Responses of one shape that differ only in their correlation id and some fixed-width
    integer fields, encoded by kio once: each further response is a copy with those integers
    written in place.

    Why: the answers to one-partition Produce requests differ only in the partition index,
    ``base_offset``, ``log_append_time`` and ``log_start_offset`` (librdkafka sends one
    partition per Produce request, however many partitions it writes), and kio's generic
    writer costs ~0.1 ms a response on this machine, a good part of the broker's time per
    request. The bytes stay kio's: the template is kio's encoding of ``make`` with every
    integer 0, and each integer is where kio's encoding with that one set to -1 differs (all
    its ``width`` bytes, nothing else, no two fields on the same bytes). A field the version
    does not carry (no difference at all) is skipped; anything else raises ValueError, and the
    caller encodes each response with kio instead."""

    __slots__ = ("_fields", "_frame")

    def __init__(self, make: Callable[[list[int]], Any], widths: Sequence[int] = (8,)) -> None:
        zeros = [0] * len(widths)
        zero = encode_response(0, make(zeros))
        self._fields = _integer_fields(lambda values: encode_response(0, make(values)), zero,
                                       widths, len(zero))
        self._frame = zero

    def encode(self, correlation_id: int, *values: int) -> bytes:
        """The size-prefixed frame of ``make(list(values))`` answering ``correlation_id``."""
        frame = bytearray(self._frame)
        _CORRELATION.pack_into(frame, _SIZE.size, correlation_id)
        for i, at, codec in self._fields:
            codec.pack_into(frame, at, values[i])
        return bytes(frame)


class RecordsTemplate:
    """Responses of one shape that differ only in their correlation id, some fixed-width
    integer fields and one record set, encoded by kio once: each further response is a copy of
    the bytes before the record set with those integers written in place and the record set's
    length, then the record set itself (not copied) and the bytes after it.

    Why: a Fetch answer built by ``Context.build`` and written by kio's generic writer costs
    ~25-35 us here (kio's flexible-version writer encodes each struct's tagged fields through
    a BytesIO of its own); a long-polling consumer's fetches have the same shape each time.
    The bytes stay kio's: the template is kio's encoding of ``make`` with every integer 0 and
    a marker record set; the record set must be the last regular field before the response
    ends (only tagged-field sections after it), and each integer is where kio's encoding with
    that one set to -1 differs (all its bytes, nothing else). A field that ``make`` cannot set
    in this version (no difference at all) is skipped; anything else raises ValueError, and
    the caller builds each response with kio instead."""

    __slots__ = ("_compact", "_fields", "_head", "_tail")
    _MARK = bytes(range(0x41, 0x61))  # 32 bytes, found once in the encoding

    def __init__(self, make: Callable[[list[int], bytes], Any], widths: list[int]) -> None:
        mark = self._MARK
        zeros = [0] * len(widths)
        base = encode_response(0, make(zeros, mark))
        at = base.find(mark)
        if at < 0 or base.find(mark, at + 1) >= 0:
            raise ValueError("the record set is not found once in the response")
        if base[at - 1] == len(mark) + 1:  # a compact length: uvarint(len + 1), one byte here
            self._compact, prefix = True, 1
        elif base[at - 4:at] == _SIZE.pack(len(mark)):
            self._compact, prefix = False, 4
        else:
            raise ValueError("the record set has no length prefix kio writes")
        self._fields = _integer_fields(lambda values: encode_response(0, make(values, mark)),
                                       base, widths, at - prefix)
        self._head = base[:at - prefix]
        self._tail = base[at + len(mark):]

    def encode(self, correlation_id: int, values: list[int], records: bytes) -> list[Chunk]:
        """The size-prefixed frame of ``make(values, records)`` answering ``correlation_id``,
        as chunks (a record set of ``BIG_WRITE`` bytes or more is its own chunk, not copied)."""
        head = bytearray(self._head)
        n = len(records)
        if self._compact:
            head += varint(n + 1)
        else:
            head += _SIZE.pack(n)
        _CORRELATION.pack_into(head, _SIZE.size, correlation_id)
        for i, at, field in self._fields:
            field.pack_into(head, at, values[i])
        _SIZE.pack_into(head, 0, len(head) - _SIZE.size + n + len(self._tail))
        if n >= BIG_WRITE:
            return [head, records, self._tail]
        head += records
        head += self._tail
        return [head]


class PartTemplate:
    """One struct of a response (a Fetch answer's ``PartitionData``) that differs only in some
    fixed-width integer fields and its record set, the last regular field, encoded by kio's
    writer of that struct once: each further struct is a copy of the bytes before the record
    set with those integers written in place and the record set's length, the record set,
    then the bytes after it (the struct's tagged fields).

    Why: a Fetch answer over 1,000 partitions (a consumer catching up) cost ~4 ms to build and
    ~9 ms to encode by kio here, per answer; the structs are the same but for these values.
    Found as :class:`RecordsTemplate` finds them (the integers where kio's encoding with that
    one set to -1 differs); ValueError if the struct is not of that shape."""

    __slots__ = ("_compact", "_fields", "_head", "_tail")

    def __init__(self, make: Callable[[list[int], bytes], Any], widths: list[int]) -> None:
        mark = RecordsTemplate._MARK
        zeros = [0] * len(widths)
        base = encode_entity(make(zeros, mark))
        at = base.find(mark)
        if at < 0 or base.find(mark, at + 1) >= 0:
            raise ValueError("the record set is not found once in the struct")
        if base[at - 1] == len(mark) + 1:
            self._compact, prefix = True, 1
        elif base[at - 4:at] == _SIZE.pack(len(mark)):
            self._compact, prefix = False, 4
        else:
            raise ValueError("the record set has no length prefix kio writes")
        self._fields = _integer_fields(lambda values: encode_entity(make(values, mark)),
                                       base, widths, at - prefix)
        self._head = base[:at - prefix]
        self._tail = base[at + len(mark):]

    def write(self, out: list[Chunk], small: bytearray, values: Sequence[int],
              records: bytes) -> bytearray:
        """Append the struct of ``values`` and ``records`` to ``small`` (the bytearray being
        filled, the last of ``out``); a record set of ``BIG_WRITE`` bytes or more becomes its
        own chunk of ``out`` (not copied). Returns the bytearray to go on filling."""
        at = len(small)
        small += self._head
        for i, offset, field in self._fields:
            field.pack_into(small, at + offset, values[i])
        n = len(records)
        small += varint(n + 1) if self._compact else _SIZE.pack(n)
        if n >= BIG_WRITE:
            out.append(records)
            small = bytearray()
            out.append(small)
        else:
            small += records
        small += self._tail
        return small


class StructTemplate:
    """One struct of a response that differs only in some fixed-width integer fields (a
    Metadata answer's partitions), encoded by kio's writer of that struct once: each further
    struct is a copy with those integers written in place.

    Why: kio's writing of a Metadata answer's 1,000 partitions cost ~6-7 ms of the broker's
    CPU (the first answer after a topic's creation, which librdkafka waits for before it sends
    a record). Found as :class:`ResponseTemplate` finds them (the integers where kio's
    encoding with that one set to -1 differs); ValueError if the struct is not of that
    shape."""

    __slots__ = ("_fields", "_zero")

    def __init__(self, make: Callable[[list[int]], Any], widths: Sequence[int]) -> None:
        zero = encode_entity(make([0] * len(widths)))
        self._fields = _integer_fields(lambda values: encode_entity(make(values)), zero,
                                       widths, len(zero))
        self._zero = zero

    def write(self, out: bytearray, values: Sequence[int]) -> None:
        """Append the struct of ``values`` to ``out``."""
        at = len(out)
        out += self._zero
        for i, offset, field in self._fields:
            field.pack_into(out, at + offset, values[i])


def encode_entity(entity: Any) -> bytes:
    """kio's encoding of one struct (no frame, no header)."""
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


_SIGNED = {2: struct.Struct(">h"), 4: struct.Struct(">i"), 8: struct.Struct(">q")}


def api_versions_fallback(fallback: ApiVersionsFallback,
                          supported: dict[int, tuple[int, int]]) -> bytes:
    """KIP-511: an ApiVersions v0 answer with UNSUPPORTED_VERSION and every supported range."""
    from kio.schema.api_versions.v0.response import ApiVersion
    from kio.schema.errors import ErrorCode

    keys = tuple(ApiVersion(api_key=k, min_version=low, max_version=high)  # type: ignore[arg-type]
                 for k, (low, high) in sorted(supported.items()))
    response = ApiVersionsResponseV0(error_code=ErrorCode.unsupported_version, api_keys=keys)
    return encode_response(fallback.correlation_id, response)


def read_size(prefix: bytes) -> int:
    """The signed 32-bit length of a frame's size prefix."""
    return int(_SIZE.unpack(prefix)[0])


def _integer_fields(encode: Callable[[list[int]], bytes], zero: bytes, widths: Sequence[int],
                    limit: int) -> list[tuple[int, int, struct.Struct]]:
    """Where each integer of a response lies in ``zero`` (the encoding with every integer 0),
    as (value index, offset, codec): the bytes in which ``encode`` with that one integer set
    to -1 differs — all its ``width`` bytes, nothing else, before ``limit``, no two fields on
    the same bytes. A field the version does not carry (no difference) is left out; anything
    else raises ValueError (the caller then encodes with kio)."""
    fields: list[tuple[int, int, struct.Struct]] = []
    taken: set[int] = set()
    for i, width in enumerate(widths):
        values = [0] * len(widths)
        values[i] = -1
        other = encode(values)
        if len(other) != len(zero):
            raise ValueError(f"field {i} is not a fixed-width integer of the response")
        differ = [k for k, (a, b) in enumerate(zip(zero, other, strict=False)) if a != b]
        if not differ:
            continue  # not in this version
        if len(differ) != width or differ[-1] - differ[0] != width - 1 \
                or differ[-1] >= limit or width not in _SIGNED or taken.intersection(differ):
            raise ValueError(f"field {i} is not one fixed-width integer of the response")
        taken.update(differ)
        fields.append((i, differ[0], _SIGNED[width]))
    return fields
