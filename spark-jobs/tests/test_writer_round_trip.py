"""The writer: DataFrames to topics (batch and streaming) and back, with clear schema errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from strom_spark.markers import DEFAULT_COMMIT_TOPIC, CommitMarker

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_batch_write_round_trip(spark: Any, broker: str, topic_name: str,
                                helpers: Any) -> None:
    helpers.create_topic(broker, topic_name, 3)
    df = spark.createDataFrame(
        [(f"k{i}", f"v{i}", i % 3) for i in range(3000)], "key string, value string, partition int"
    ).selectExpr("key", "value", "partition",
                 "array(named_struct('key', 'n', 'value', CAST(key AS BINARY))) AS headers")
    (df.write.format("strom").option("bootstrap.servers", broker).option("topic", topic_name)
     .mode("append").save())
    records = helpers.consume_all(broker, topic_name)
    assert len(records) == 3000
    for r in records:
        i = int(r.key[1:])
        assert (r.value, r.partition) == (f"v{i}".encode(), i % 3)
        assert list(r.headers) == [("n", r.key)]
    # and read back through the source
    back = (spark.read.format("strom").option("bootstrap.servers", broker)
            .option("subscribe", topic_name).option("includeHeaders", "true").load())
    assert back.count() == 3000


def test_topic_column_routes_rows(spark: Any, broker: str, topic_name: str,
                                  helpers: Any) -> None:
    a, b = f"{topic_name}-a", f"{topic_name}-b"
    helpers.create_topic(broker, a, 1)
    helpers.create_topic(broker, b, 1)
    df = spark.createDataFrame([(a, b"1"), (b, b"2"), (b, b"3")], "topic string, value binary")
    df.write.format("strom").option("bootstrap.servers", broker).mode("append").save()
    assert [r.value for r in helpers.consume_all(broker, a)] == [b"1"]
    assert [r.value for r in helpers.consume_all(broker, b)] == [b"2", b"3"]


def test_no_topic_is_a_clear_error(spark: Any, broker: str) -> None:
    df = spark.createDataFrame([(b"1",)], "value binary")
    with pytest.raises(Exception, match="no topic to write to"):
        df.write.format("strom").option("bootstrap.servers", broker).mode("append").save()
    df = spark.createDataFrame([(1,)], "value int")
    with pytest.raises(Exception, match="column 'value' must be binary or string"):
        (df.write.format("strom").option("bootstrap.servers", broker).option("topic", "t")
         .mode("append").save())


def test_streaming_copy_topic_to_topic(spark: Any, broker: str, topic_name: str,
                                       helpers: Any, tmp_path: Path) -> None:
    src, dst = f"{topic_name}-src", f"{topic_name}-dst"
    helpers.create_topic(broker, src, 2)
    helpers.create_topic(broker, dst, 2)
    helpers.produce(broker, src, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(500)])
    q = (spark.readStream.format("strom").option("bootstrap.servers", broker)
         .option("subscribe", src).option("startingOffsets", "earliest").load()
         .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
         .writeStream.format("strom").option("bootstrap.servers", broker)
         .option("topic", dst).option("checkpointLocation", str(tmp_path / "cp"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    got = helpers.consume_all(broker, dst)
    assert sorted(r.value for r in got) == sorted(f"V{i}".encode() for i in range(500))
    # keys keep their partitioning: same key, same partition as the default partitioner
    assert {r.key: r.partition for r in got} == {
        r.key: r.partition for r in helpers.consume_all(broker, src)}
    # the default marker topic (created on first use) holds this query's commit
    markers = [CommitMarker.decode(r.key, r.value)
               for r in helpers.consume_all(broker, DEFAULT_COMMIT_TOPIC)]
    mine = [m for m in markers if m is not None and m.query == str(q.id)]
    assert [m.records for m in mine] == [500]
