"""A streaming query stops, more data arrives, it restarts from the checkpoint: all once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _run(spark: Any, broker: str, topic: str, out: Path, checkpoint: Path,
         max_per_trigger: int) -> dict[str, Any]:
    df = (spark.readStream.format("strom").option("bootstrap.servers", broker)
          .option("subscribe", topic).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", str(max_per_trigger)).load())
    query = (df.selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="100 milliseconds").start())
    try:
        query.processAllAvailable()
        progress = [p["sources"][0] for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    return {"batches": progress}


def test_restart_from_checkpoint_reads_every_record_once(
    spark: Any, broker: str, topic_name: str, helpers: Any, tmp_path: Path
) -> None:
    helpers.create_topic(broker, topic_name, 3)
    first = helpers.produce(broker, topic_name, [(None, f"a{i}".encode()) for i in range(3000)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    run1 = _run(spark, broker, topic_name, out, checkpoint, max_per_trigger=1000)
    # maxOffsetsPerTrigger is respected: at most 1000 rows per micro-batch
    assert run1["batches"] and all(b["numInputRows"] <= 1000 for b in run1["batches"])
    assert sum(b["numInputRows"] for b in run1["batches"]) == 3000

    second = helpers.produce(broker, topic_name, [(None, f"b{i}".encode()) for i in range(2000)])
    run2 = _run(spark, broker, topic_name, out, checkpoint, max_per_trigger=10_000)
    assert sum(b["numInputRows"] for b in run2["batches"]) == 2000
    # the restarted query began where the first one ended (offsets from the checkpoint)
    first_start = json.loads(run2["batches"][0]["startOffset"])
    assert sum(int(o) for parts in first_start.values() for o in parts.values()) == 3000

    rows = spark.read.parquet(str(out)).collect()
    got = [(r.partition, r.offset) for r in rows]
    assert len(got) == len(set(got)) == 5000  # no duplicates
    expected = {(m.partition, m.offset) for m in first + second}
    assert set(got) == expected  # no gaps
    assert {r.value for r in rows} == {f"a{i}" for i in range(3000)} | {
        f"b{i}" for i in range(2000)}


def test_available_now_and_new_partitions(spark: Any, broker: str, topic_name: str,
                                          helpers: Any, tmp_path: Path) -> None:
    """Trigger.AvailableNow stops at the end; a topic that grows is read from its new partitions."""
    from strom.client import Admin

    helpers.create_topic(broker, topic_name, 1)
    helpers.produce(broker, topic_name, [(None, b"x%d" % i) for i in range(100)])

    def run() -> None:
        df = (spark.readStream.format("strom").option("bootstrap.servers", broker)
              .option("subscribePattern", topic_name.replace("-", "[-]"))
              .option("startingOffsets", "earliest").load())
        q = (df.select("partition", "offset").writeStream.format("parquet")
             .option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert not q.isActive

    run()
    with Admin(broker) as admin:
        admin.create_partitions(topic_name, 2)
    helpers.produce(broker, topic_name, [(None, b"y%d" % i) for i in range(40)], partition=1)
    helpers.produce(broker, topic_name, [(None, b"z%d" % i) for i in range(10)], partition=0)
    # one run: the new partition is introduced at its earliest offset, then read, and the run
    # stops at the offsets that were latest when it started
    run()
    got = [(r.partition, r.offset) for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert len(got) == len(set(got))
    assert sorted(got) == [(0, i) for i in range(110)] + [(1, i) for i in range(40)]
