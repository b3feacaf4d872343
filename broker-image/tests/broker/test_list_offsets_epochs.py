"""ListOffsets answers carry the leader epoch of the offset found, as Kafka's do (issue 14).

Kafka's UnifiedLog.fetchOffsetByTimestamp answers the epoch a consumer stores with a reset
position and validates with OffsetForLeaderEpoch (KIP-320); -1 makes Java's consumer skip that
check. These run the core lookup the gRPC and Kafka fronts share (``strom.broker.offsets.find``)
against a real log whose epochs change at known offsets: epoch 0 at 0-9, 2 at 10-19, 5 at 20-29.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.broker import offsets
from strom.protocol.records import BatchBuilder, Compression
from strom.storage import LogConfig, PartitionLog
from strom.storage.epoch import LeaderEpochCache

#: The leader epoch the partition's leader is in now (what "latest" answers).
CURRENT = 7


def _log(tmp_path: Path, *, max_ts_epoch: int = 2) -> PartitionLog:
    """30 records in batches of 5, epochs 0 / 2 / 5 from offsets 0 / 10 / 20, record ``i``'s
    timestamp 1000 + 10 i, except that the batch at 10-14 (epoch 2) holds the largest timestamp
    when ``max_ts_epoch`` is 2. Small segments, so lookups cross segments."""
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=400, index_interval_bytes=0),
                             topic="t", partition=0, clock=lambda: 1_700_000_000_000)
    for base in range(0, 30, 5):
        epoch = 0 if base < 10 else 2 if base < 20 else 5
        stamps = [1000 + 10 * i for i in range(base, base + 5)]
        if base == 10 and max_ts_epoch == 2:
            stamps[2] = 9_999
        builder = BatchBuilder(Compression.NONE, batch_size=1 << 20)
        for i, ts in enumerate(stamps):
            builder.append(b"k", b"v%d" % i, ts)
        plog.append_as_leader(builder.build(), epoch)
    plog.high_watermark = plog.log_end_offset
    return plog


def _find(plog: PartitionLog, timestamp: int) -> tuple[int, int, int]:
    return tuple(offsets.find(plog, timestamp, CURRENT))  # type: ignore[return-value]


def test_the_epoch_cache_names_the_epoch_covering_an_offset(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / "c")
    assert cache.epoch_for_offset(0) == -1  # nothing written: unknown, as Kafka's empty Optional
    for epoch, start in ((0, 0), (2, 10), (5, 20)):
        cache.assign(epoch, start)
    got = [cache.epoch_for_offset(o) for o in (0, 9, 10, 19, 20, 10_000)]
    assert got == [0, 0, 2, 2, 5, 5]
    cache.truncate_from_start(15)
    assert (cache.epoch_for_offset(3), cache.epoch_for_offset(15)) == (-1, 2)


def test_latest_answers_the_current_leader_epoch(tmp_path: Path) -> None:
    assert _find(_log(tmp_path), offsets.LATEST) == (30, -1, CURRENT)


@pytest.mark.parametrize("query", [offsets.EARLIEST, offsets.EARLIEST_LOCAL])
def test_earliest_answers_the_epoch_of_the_log_start_offset(tmp_path: Path, query: int) -> None:
    plog = _log(tmp_path)
    assert _find(plog, query) == (0, -1, 0)
    plog.advance_log_start_offset(15)  # DeleteRecords moved the start into epoch 2
    assert _find(plog, query) == (15, -1, 2)
    plog.advance_log_start_offset(20)  # exactly where epoch 5 starts
    assert _find(plog, query) == (20, -1, 5)


def test_a_time_answers_the_epoch_of_the_batch_holding_the_record(tmp_path: Path) -> None:
    plog = _log(tmp_path, max_ts_epoch=-1)
    assert _find(plog, 0) == (0, 1000, 0)
    assert _find(plog, 1_055) == (6, 1_060, 0)  # inside the oldest epoch
    assert _find(plog, 1_100) == (10, 1_100, 2)
    assert _find(plog, 1_205) == (21, 1_210, 5)
    assert _find(plog, 1_291) == (-1, -1, -1)  # nothing at or after it
    plog.high_watermark = 20
    assert _find(plog, 1_205) == (-1, -1, -1)  # beyond the high watermark: not found yet


def test_max_timestamp_answers_the_epoch_of_its_batch(tmp_path: Path) -> None:
    assert _find(_log(tmp_path), offsets.MAX_TIMESTAMP) == (12, 9_999, 2)
    assert _find(_log(tmp_path / "b", max_ts_epoch=-1), offsets.MAX_TIMESTAMP) == (29, 1_290, 5)


def test_max_timestamp_beyond_the_high_watermark_is_not_found(tmp_path: Path) -> None:
    plog = _log(tmp_path)  # the largest timestamp is record 12's
    plog.high_watermark = 13
    assert _find(plog, offsets.MAX_TIMESTAMP) == (12, 9_999, 2)
    plog.high_watermark = 12  # not replicated yet: Kafka filters it as a time lookup
    assert _find(plog, offsets.MAX_TIMESTAMP) == (-1, -1, -1)


@pytest.mark.parametrize("query", [offsets.LATEST_TIERED, offsets.EARLIEST_PENDING_UPLOAD])
def test_tiered_queries_find_nothing_and_no_epoch(tmp_path: Path, query: int) -> None:
    assert _find(_log(tmp_path), query) == (-1, -1, -1)


def test_an_empty_log_answers_no_epoch_but_the_leaders_for_latest(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "e-0", LogConfig(), topic="e", partition=0)
    got = [_find(plog, q) for q in (offsets.EARLIEST, offsets.LATEST, offsets.MAX_TIMESTAMP, 0)]
    assert got == [(0, -1, -1), (0, -1, CURRENT), (-1, -1, -1), (-1, -1, -1)]
