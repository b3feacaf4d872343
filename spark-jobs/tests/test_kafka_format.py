"""Spark's built-in Kafka source and sink (``format("kafka")``, spark-sql-kafka-0-10) against
Strom's Kafka listener, and the same batch job against Apache Kafka with the same output.

The connector is Spark's own (jars from ``kafka-ref/spark-kafka/pom.xml``, passed as
``spark.jars`` by the shared session in conftest): its driver lists offsets (earliest, latest,
by timestamp) through the Admin API, its executors assign, seek and fetch, its sink produces
idempotently. Records go in with confluent-kafka, so nothing of Strom's own client is involved.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from strom.testing import BrokerProcess, running_broker
from strom.testing.kafka import KafkaCluster, kafka_fixture
from strom.testing.process import starts_processes
from strom.testing.tools import missing

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

BASE_TS = 1_700_000_000_000
kafka = kafka_fixture(nodes=1, scope="module", auto_create_topics_enable=False)


@pytest.fixture(scope="module")
@starts_processes
def strom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("strom-kafka-format")) as broker:
        yield broker


@pytest.fixture(scope="module")
def kspark(spark: Any) -> Any:
    """The shared session, if it has Spark's Kafka connector (skip without; fail in CI)."""
    jars = spark.sparkContext.getConf().get("spark.jars", "")
    if "spark-sql-kafka" not in jars:
        missing("Spark's Kafka connector is not fetched (kafka-ref/fetch needs Maven)")
    return spark


def create(bootstrap: str, topic: str, partitions: int) -> None:
    """A topic without time-based retention: the records carry create times of 2023, which
    Kafka's (and Strom's) 7-day retention would delete at its next check (Kafka: 5 min)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})]
                        )[topic].result(30)
    deadline = time.monotonic() + 30
    while True:
        meta = admin.list_topics(topic, timeout=5).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions \
                and all(p.leader >= 0 for p in meta.partitions.values()):
            return
        assert time.monotonic() < deadline, f"{topic}: no leaders after 30 s"
        time.sleep(0.1)


def produce(bootstrap: str, topic: str, n: int, start: int = 0, partitions: int = 2) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(start, start + n):
        producer.produce(topic, value=f"v{i}".encode(), key=f"k{i}".encode(),
                         partition=i % partitions, timestamp=BASE_TS + 1000 * i,
                         headers=[("n", str(i).encode())])
    assert producer.flush(30) == 0


def read_back(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple[Any, ...]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.3)
            if msg is not None and msg.error() is None:
                got.append((msg.key(), msg.value(), msg.headers()))
    finally:
        consumer.close()
    return sorted(got)


def batch_job(spark: Any, bootstrap: str, suffix: str) -> dict[str, Any]:
    """Read by offsets and by timestamp (headers included), write what was read to another
    topic through the sink, read that back with confluent-kafka."""
    src, dst = f"src-{suffix}", f"dst-{suffix}"
    create(bootstrap, src, 2)
    create(bootstrap, dst, 1)
    produce(bootstrap, src, 20)
    reader = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    by_offset = (reader.option("subscribe", src).option("includeHeaders", "true")
                 .option("startingOffsets", json.dumps({src: {"0": 2, "1": -2}}))
                 .option("endingOffsets", json.dumps({src: {"0": 8, "1": -1}})).load())
    rows = by_offset.selectExpr("partition", "offset", "CAST(key AS STRING) AS k",
                                "CAST(value AS STRING) AS v", "headers",
                                "CAST(timestamp AS LONG) AS ts", "timestampType").collect()
    by_time = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", src).option("startingTimestamp", str(BASE_TS + 13_000))
               .load().selectExpr("partition", "offset").collect())
    (by_offset.selectExpr("key", "value", "headers").write.format("kafka")
     .option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
     .option("includeHeaders", "true").save())
    return {
        "rows": sorted((r.partition, r.offset, r.k, r.v, [(h.key, bytes(h.value))
                                                          for h in r.headers], r.ts,
                        r.timestampType) for r in rows),
        "by time": sorted((r.partition, r.offset) for r in by_time),
        "written": read_back(bootstrap, dst, 1, len(rows)),
    }


def test_batch_read_and_write_give_the_same_on_kafka_and_strom(
        kspark: Any, kafka: KafkaCluster, strom: BrokerProcess) -> None:
    on_kafka = batch_job(kspark, kafka.bootstrap, "k")
    on_strom = batch_job(kspark, strom.kafka_bootstrap, "s")
    assert on_strom == on_kafka
    rows = on_kafka["rows"]
    # partition 0 from offset 2 up to 8 (exclusive): 6 rows; partition 1 from earliest to latest
    assert [r[1] for r in rows if r[0] == 0] == [2, 3, 4, 5, 6, 7]
    assert [r[1] for r in rows if r[0] == 1] == list(range(10))
    assert rows[0][2:] == ("k4", "v4", [("n", b"4")], BASE_TS // 1000 + 4, 0)
    # the first record at or after BASE_TS + 13 s: i = 13 (partition 1, offset 6), i = 14 (0, 7)
    assert on_kafka["by time"][0] == (0, 7) and (1, 6) in on_kafka["by time"]
    assert len(on_kafka["by time"]) == 3 + 4
    assert len(on_kafka["written"]) == 16


def test_streaming_query_restarted_from_its_checkpoint_writes_each_record_once(
        kspark: Any, strom: BrokerProcess, tmp_path: Path) -> None:
    """A query (maxOffsetsPerTrigger 7, failOnDataLoss) stopped mid-way and started again
    from its checkpoint: the file sink holds every record exactly once."""
    bootstrap = strom.kafka_bootstrap
    topic = "stream-src"
    create(bootstrap, topic, 2)
    produce(bootstrap, topic, 30)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start(trigger: dict[str, Any]) -> Any:
        stream = (kspark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "7").option("failOnDataLoss", "true").load())
        return (stream.selectExpr("CAST(value AS STRING) AS v", "partition", "offset")
                .writeStream.format("json").option("path", str(out))
                .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())

    query = start({"processingTime": "200 milliseconds"})
    try:
        deadline = time.monotonic() + 120
        while (query.lastProgress is None or query.lastProgress["numInputRows"] == 0) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert query.lastProgress is not None, "no micro-batch in 120 s"
    finally:
        query.stop()  # mid-way: 30 records at 7 per batch need 5 batches
    produce(bootstrap, topic, 10, start=30)
    query = start({"availableNow": True})
    try:
        assert query.awaitTermination(180), "the restarted query did not finish in 180 s"
    finally:
        query.stop()
    values = [r.v for r in kspark.read.json(str(out)).collect()]
    assert sorted(values) == sorted(f"v{i}" for i in range(40))
