"""Hand-made poison batches (issue 13 item 1): each has a good header and a good CRC-32C over
bytes that are not valid records, or flags a client may not set. Shared by the validation unit
tests and the real-broker tests."""

from __future__ import annotations

import random
import struct

from strom.protocol.batch import compute_crc
from strom.protocol.records import BatchBuilder, Compression, encode_batch

NOW = 1_700_000_000_000


def recrc(buf: bytes | bytearray) -> bytes:
    """``buf`` (one batch) with its batchLength and CRC-32C made consistent again."""
    out = bytearray(buf)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, compute_crc(out, 0, len(out)))
    return bytes(out)


def good(n: int = 3, compression: Compression = Compression.NONE, ts: int = NOW,
         key: bytes | None = b"k") -> bytes:
    return encode_batch([(key, b"v%d" % i) for i in range(n)], compression, timestamp_ms=ts)


def patched(batch: bytes, fmt: str, offset: int, value: int) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(fmt, buf, offset, value)
    return recrc(buf)


def count_one_over_three() -> bytes:
    """The header claims 1 record (count 1, last offset delta 0) over the bytes of 3."""
    return patched(patched(good(3), ">i", 57, 1), ">i", 23, 0)


def random_after_header(seed: int = 13) -> bytes:
    body = random.Random(seed).randbytes(64)
    return recrc(good(1)[:61] + body)


def gzip_attribute_on_plain_body() -> bytes:
    return patched(good(3), ">h", 21, int(Compression.GZIP))


def control_flag() -> bytes:
    return patched(good(1), ">h", 21, 0x20)


def transactional_flag() -> bytes:
    builder = BatchBuilder(batch_size=1 << 20, producer_id=7, producer_epoch=0,
                           base_sequence=0)
    builder.append(b"k", b"v", NOW)
    return patched(builder.build(), ">h", 21, 0x10)


def trailing_bytes() -> bytes:
    return recrc(good(2) + b"\x00\x01\x02")


POISON = {
    "header claims 1 record over 3": count_one_over_three,
    "random bytes after a valid header": random_after_header,
    "gzip attribute on an uncompressed body": gzip_attribute_on_plain_body,
    "client-set control flag": control_flag,
    "transactional flag": transactional_flag,
    "trailing bytes after the records": trailing_bytes,
}
