"""The rows a read produces: Spark's Kafka-source schema, and records turned into Arrow or tuples.

Spark accepts either Python tuples or ``pyarrow.RecordBatch`` from ``read()``. Arrow skips Spark's
per-value Python conversion, so it is the default (``benchmarks/bench_read.py`` measures both);
Spark checks that a batch's Arrow schema *equals* the one it derives from ``schema()`` (timestamps
as ``timestamp[us, tz=UTC]``, lists with an ``element`` field), so :data:`ARROW_SCHEMA` is built
to match exactly and a unit test compares it with pyspark's own conversion.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

Header = tuple[str, bytes | None]


class RecordLike(Protocol):
    """What we need of a consumed record (``strom.protocol.records.Record`` fits)."""

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def timestamp_type(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[Header]: ...


HEADERS_SPARK_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def spark_schema(include_headers: bool) -> StructType:
    """``key, value, topic, partition, offset, timestamp, timestampType[, headers]``."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_SPARK_TYPE))
    return StructType(fields)


HEADERS_ARROW_TYPE = pa.list_(
    pa.field(
        "element",
        pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]),
    )
)
_TS_TYPE = pa.timestamp("us", tz="UTC")


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TS_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_ARROW_TYPE))
    return pa.schema(fields)


_SCHEMAS = {False: arrow_schema(False), True: arrow_schema(True)}


def _headers_value(headers: Sequence[Header]) -> list[dict[str, Any]] | None:
    if not headers:
        return None
    return [{"key": k, "value": v} for k, v in headers]


def to_record_batch(
    topic: str, partition: int, records: Sequence[RecordLike], include_headers: bool
) -> pa.RecordBatch:
    """One Arrow batch for consecutive records of one partition, typed exactly as Spark wants."""
    n = len(records)
    columns: list[pa.Array] = [
        pa.array([r.key for r in records], type=pa.binary()),
        pa.array([r.value for r in records], type=pa.binary()),
        pa.array([topic] * n, type=pa.string()),
        pa.array([partition] * n, type=pa.int32()),
        pa.array([r.offset for r in records], type=pa.int64()),
        pa.array([r.timestamp * 1000 for r in records], type=_TS_TYPE),
        pa.array([int(r.timestamp_type) for r in records], type=pa.int32()),
    ]
    if include_headers:
        columns.append(
            pa.array([_headers_value(r.headers) for r in records], type=HEADERS_ARROW_TYPE)
        )
    return pa.RecordBatch.from_arrays(columns, schema=_SCHEMAS[include_headers])


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_tuples(
    topic: str, partition: int, records: Sequence[RecordLike], include_headers: bool
) -> list[tuple[Any, ...]]:
    """The same rows as plain tuples (Spark converts them value by value)."""
    if include_headers:
        return [
            (
                r.key,
                r.value,
                topic,
                partition,
                r.offset,
                _EPOCH + timedelta(milliseconds=r.timestamp),
                int(r.timestamp_type),
                [(k, v) for k, v in r.headers] if r.headers else None,
            )
            for r in records
        ]
    return [
        (
            r.key,
            r.value,
            topic,
            partition,
            r.offset,
            _EPOCH + timedelta(milliseconds=r.timestamp),
            int(r.timestamp_type),
        )
        for r in records
    ]
