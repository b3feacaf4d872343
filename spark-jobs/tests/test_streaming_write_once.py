"""The stream writer's commit markers: a replayed, already committed micro-batch is written once.

The replay is the real one: the query stops after the sink committed batch N, its
``commits/N`` entry is deleted from the checkpoint (what a driver that died between the sink's
commit and Spark's commit-log write leaves behind), and the restarted query re-runs batch N.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from strom_spark.markers import HEADER_BATCH, HEADER_QUERY, HEADER_WRITER, CommitMarker

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _copy(spark: Any, broker: str, src: str, dst: str, checkpoint: Path,
          commit_topic: str, markers: bool = True) -> Any:
    """src -> dst, 100 records per micro-batch, until the data present at start is copied."""
    q = (spark.readStream.format("strom").option("bootstrap.servers", broker)
         .option("subscribe", src).option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", "100").option("includeHeaders", "true").load()
         .selectExpr("key", "value", "headers")
         .writeStream.format("strom").option("bootstrap.servers", broker)
         .option("topic", dst).option("commitTopic", commit_topic)
         .option("commitMarkers", str(markers).lower())
         .option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert not q.isActive, "the query did not finish in 180 s"
    assert q.exception() is None, q.exception()
    return q


def _forget_commit(checkpoint: Path, batch: int) -> None:
    """Make Spark believe batch ``batch`` never finished: its commit-log entry is gone."""
    commits = checkpoint / "commits"
    assert (commits / str(batch)).exists(), sorted(p.name for p in commits.iterdir())
    assert not (commits / str(batch + 1)).exists()
    (commits / str(batch)).unlink()
    (commits / f".{batch}.crc").unlink(missing_ok=True)


def _headers(record: Any) -> dict[str, bytes]:
    return dict(record.headers)


def _replayed(q: Any, batch: int) -> list[int]:
    """numInputRows of every progress report of ``batch`` in this run."""
    return [p["numInputRows"] for p in q.recentProgress if p["batchId"] == batch]


def test_replayed_committed_batch_is_written_once(
    spark: Any, broker: str, topic_name: str, helpers: Any, tmp_path: Path
) -> None:
    src, dst, commits = f"{topic_name}-src", f"{topic_name}-dst", f"{topic_name}-commits"
    helpers.create_topic(broker, src, 2)
    helpers.create_topic(broker, dst, 2)
    helpers.produce(broker, src, [(b"k%d" % i, b"a%d" % i) for i in range(300)],
                    headers=[("h", b"1")])
    checkpoint = tmp_path / "cp"

    q1 = _copy(spark, broker, src, dst, checkpoint, commits)
    query_id = str(q1.id)
    first = helpers.consume_all(broker, dst)
    assert sorted(r.value for r in first) == sorted(b"a%d" % i for i in range(300))

    # every record names its query, batch and writer, after its own headers
    by_batch: dict[int, set[str]] = {}
    for r in first:
        assert [k for k, _ in r.headers] == ["h", HEADER_QUERY, HEADER_BATCH, HEADER_WRITER]
        h = _headers(r)
        assert h["h"] == b"1"
        assert h[HEADER_QUERY].decode() == query_id
        by_batch.setdefault(int(h[HEADER_BATCH]), set()).add(h[HEADER_WRITER].decode())
    assert sorted(by_batch) == [0, 1, 2]

    # one marker per committed batch, keyed on the query id, listing the batch's writers
    raw = helpers.consume_all(broker, commits)
    markers = [CommitMarker.decode(r.key, r.value) for r in raw]
    assert all(m is not None for m in markers)
    assert [(m.query, m.batch, m.records) for m in markers if m] == [
        (query_id, 0, 100), (query_id, 1, 100), (query_id, 2, 100)]
    for m in markers:
        assert m is not None and set(m.writers) == by_batch[m.batch]
    assert json.loads(raw[-1].value)["batch"] == 2

    # the driver "died" after the sink committed batch 2 but before Spark recorded it
    _forget_commit(checkpoint, 2)
    helpers.produce(broker, src, [(b"k%d" % i, b"b%d" % i) for i in range(300, 350)])
    q2 = _copy(spark, broker, src, dst, checkpoint, commits)
    assert str(q2.id) == query_id  # the checkpoint keeps the query's identity
    assert _replayed(q2, 2) == [100]  # Spark did re-run batch 2 ...

    got = helpers.consume_all(broker, dst)
    values = Counter(r.value for r in got)
    assert [v for v, n in values.items() if n > 1] == []  # ... and it was not written again
    assert set(values) == {b"a%d" % i for i in range(300)} | {b"b%d" % i for i in range(300, 350)}
    new = [r for r in got if r.value.startswith(b"b")]
    assert {int(_headers(r)[HEADER_BATCH]) for r in new} == {3}

    # the replay recorded nothing; batch 3 got its marker
    after = [CommitMarker.decode(r.key, r.value) for r in helpers.consume_all(broker, commits)]
    assert [(m.batch, m.records) for m in after if m] == [(0, 100), (1, 100), (2, 100), (3, 50)]


def test_without_markers_the_replay_writes_the_batch_again(
    spark: Any, broker: str, topic_name: str, helpers: Any, tmp_path: Path
) -> None:
    """The control: the same replay with commitMarkers=false duplicates the batch."""
    src, dst, commits = f"{topic_name}-src", f"{topic_name}-dst", f"{topic_name}-commits"
    helpers.create_topic(broker, src, 1)
    helpers.create_topic(broker, dst, 1)
    helpers.produce(broker, src, [(None, b"a%d" % i) for i in range(200)])
    checkpoint = tmp_path / "cp"
    _copy(spark, broker, src, dst, checkpoint, commits, markers=False)
    _forget_commit(checkpoint, 1)
    q2 = _copy(spark, broker, src, dst, checkpoint, commits, markers=False)
    assert _replayed(q2, 1) == [100]
    values = Counter(r.value for r in helpers.consume_all(broker, dst))
    assert sum(values.values()) == 300
    assert sorted(v for v, n in values.items() if n == 2) == sorted(
        b"a%d" % i for i in range(100, 200))
    # headers are there all the same, and no marker topic was created
    from strom.client import Admin

    with Admin(broker) as admin:
        assert commits not in admin.list_topics(include_internal=True)
