"""Batch reads through real Spark from a real broker: exactly what was produced."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_batch_read_100k_matches_produced(spark: Any, broker: str, topic_name: str,
                                          helpers: Any) -> None:
    helpers.create_topic(broker, topic_name, 4)
    records = [(f"k{i % 977}".encode(), f"value-{i}".encode()) for i in range(100_000)]
    metas = helpers.produce(broker, topic_name, records)
    expected = {(m.partition, m.offset): kv for m, kv in zip(metas, records, strict=True)}

    df = (spark.read.format("strom").option("bootstrap.servers", broker)
          .option("subscribe", topic_name).load())
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                          "timestampType"]
    assert df.rdd.getNumPartitions() == 4
    rows = df.select("partition", "offset", "key", "value", "topic").collect()
    assert len(rows) == 100_000
    got = {(r.partition, r.offset): (bytes(r.key), bytes(r.value)) for r in rows}
    assert got == expected
    assert {r.topic for r in rows} == {topic_name}


def test_ending_offsets_min_partitions_and_headers(spark: Any, broker: str, topic_name: str,
                                                   helpers: Any) -> None:
    helpers.create_topic(broker, topic_name, 2)
    for p in (0, 1):
        helpers.produce(broker, topic_name, [(None, f"{p}-{i}".encode()) for i in range(50)],
                        partition=p, headers=[("source", b"test")], timestamp_ms=1_000_000)
    df = (spark.read.format("strom").option("kafka.bootstrap.servers", broker)
          .option("assign", json.dumps({topic_name: [0, 1]}))
          .option("startingOffsets", json.dumps({topic_name: {"0": 10, "1": -2}}))
          .option("endingOffsets", json.dumps({topic_name: {"0": 30, "1": -1}}))
          .option("minPartitions", "6")
          .option("includeHeaders", "true")
          .load())
    assert df.rdd.getNumPartitions() >= 6
    rows = df.collect()
    by_part: dict[int, list[int]] = {0: [], 1: []}
    for r in rows:
        by_part[r.partition].append(r.offset)
    assert sorted(by_part[0]) == list(range(10, 30))
    assert sorted(by_part[1]) == list(range(50))
    r0 = rows[0]
    assert r0.key is None
    assert [(h.key, bytes(h.value)) for h in r0.headers] == [("source", b"test")]
    assert r0.timestamp.timestamp() == 1000.0
    assert r0.timestampType == 0


def test_errors_name_option_and_topic(spark: Any, broker: str) -> None:
    reader = spark.read.format("strom").option("bootstrap.servers", broker)
    with pytest.raises(Exception, match="unknown option 'startingoffset'"):
        reader.option("subscribe", "x").option("startingOffset", "earliest").load().collect()
    with pytest.raises(Exception, match="'no-such-topic' of option subscribe do not exist"):
        spark.read.format("strom").option("bootstrap.servers", broker).option(
            "subscribe", "no-such-topic").load().collect()


def test_tuples_read_format_gives_same_rows(spark: Any, broker: str, topic_name: str,
                                            helpers: Any) -> None:
    helpers.create_topic(broker, topic_name, 1)
    helpers.produce(broker, topic_name, [(b"k", b"v%d" % i) for i in range(1000)])

    def load(fmt: str) -> list[Any]:
        return (spark.read.format("strom").option("bootstrap.servers", broker)
                .option("subscribe", topic_name).option("readFormat", fmt).load()
                .orderBy("offset").collect())

    assert load("arrow") == load("tuples")
