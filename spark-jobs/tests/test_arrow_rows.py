"""Arrow batches and tuples typed exactly as Spark derives them from the schema."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from strom_spark.rows import arrow_schema, spark_schema, to_record_batch, to_tuples


@dataclass
class Rec:
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


RECS = [
    Rec(5, 1_700_000_000_123, 0, b"k", b"v1"),
    Rec(6, 1_700_000_000_456, 1, None, None, (("h", b"x"), ("n", None))),
]


@pytest.mark.parametrize("headers", [False, True])
def test_arrow_schema_equals_what_spark_derives(headers: bool) -> None:
    # The exact check pyspark's plan_data_source_read does on the first batch.
    assert to_arrow_schema(spark_schema(headers), timezone="UTC").equals(arrow_schema(headers))


def test_spark_schema_like_kafka_source() -> None:
    assert spark_schema(False).simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>")
    assert spark_schema(True).fieldNames()[-1] == "headers"


def test_record_batch_values() -> None:
    rb = to_record_batch("t", 3, RECS, include_headers=True)
    assert rb.schema.equals(arrow_schema(True))
    rows = rb.to_pylist()
    assert rows[0]["key"] == b"k" and rows[1]["key"] is None and rows[1]["value"] is None
    assert rows[0]["topic"] == "t" and rows[0]["partition"] == 3
    assert [r["offset"] for r in rows] == [5, 6]
    assert rows[0]["timestamp"] == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    assert [r["timestampType"] for r in rows] == [0, 1]
    assert rows[0]["headers"] is None
    assert rows[1]["headers"] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]


def test_empty_batch() -> None:
    assert to_record_batch("t", 0, [], include_headers=False).num_rows == 0


def test_tuples_match_arrow() -> None:
    rb = to_record_batch("t", 3, RECS, include_headers=True)
    names = rb.schema.names
    tuples = to_tuples("t", 3, RECS, include_headers=True)
    for row, tup in zip(rb.to_pylist(), tuples, strict=True):
        expected = dict(zip(names, tup, strict=True))
        if expected["headers"] is not None:
            expected["headers"] = [{"key": k, "value": v} for k, v in expected["headers"]]
        assert row == expected
