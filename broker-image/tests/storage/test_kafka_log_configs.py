"""The Kafka topic configs Strom used to refuse: ``compression.type`` (the leader recompresses),
``file.delete.delay.ms`` (retention renames segments ``*.deleted`` and removes them later) and
``min.cleanable.dirty.ratio`` (compaction runs only when enough of the log is dirty)."""

from __future__ import annotations

import dataclasses

import pytest

from strom.protocol.batch import iter_headers
from strom.protocol.records import BatchBuilder, Compression, decode_batches, encode_batch
from strom.storage import LogConfig, PartitionLog
from strom.storage.compaction import CleanableSegment, compaction_due

DAY = 86_400_000


def _stored(log: PartitionLog) -> tuple[list[int], list[tuple[int, bytes | None, bytes | None]]]:
    data = log.read(0, 1 << 22).records
    codecs = [h.compression for h in iter_headers(memoryview(data))]
    return codecs, [(r.offset, r.key, r.value) for r in decode_batches(data)]


@pytest.mark.parametrize("topic_codec,sent,stored", [
    ("gzip", Compression.NONE, Compression.GZIP),
    ("zstd", Compression.LZ4, Compression.ZSTD),
    ("uncompressed", Compression.SNAPPY, Compression.NONE),
    ("producer", Compression.LZ4, Compression.LZ4),
])
def test_the_leader_stores_batches_in_the_topic_codec(open_log, clock, topic_codec, sent,
                                                      stored):
    log = open_log(LogConfig(compression_type=topic_codec))
    records = [(b"k%d" % i, b"value-%d" % i * 10) for i in range(50)]
    first = log.append_as_leader(encode_batch(records[:20], sent, timestamp_ms=clock.now), 3)
    log.append_as_leader(encode_batch(records[20:], sent, timestamp_ms=clock.now + 7), 3)
    codecs, got = _stored(log)
    assert codecs == [stored, stored]
    assert got == [(i, k, v) for i, (k, v) in enumerate(records)]
    assert first.base_offset == 0 and first.last_offset == 19
    assert log.offset_of_max_timestamp() == (20, clock.now + 7, 3)


def test_recompressed_idempotent_batches_keep_their_sequence_and_dedupe(open_log, clock):
    log = open_log(LogConfig(compression_type="zstd"))
    builder = BatchBuilder(Compression.NONE, batch_size=1 << 20, producer_id=7,
                           producer_epoch=0, base_sequence=0)
    for i in range(5):
        builder.append(b"k", b"v%d" % i, clock.now)
    sent = builder.build()
    first = log.append_as_leader(sent, 0)
    again = log.append_as_leader(sent, 0)  # a retry after a lost response
    assert again.duplicate and (again.base_offset, again.last_offset) == (0, 4)
    assert not first.duplicate and log.log_end_offset == 5
    h = next(iter_headers(memoryview(log.read(0, 1 << 20).records)))
    assert (h.compression, h.producer_id, h.base_sequence) == (Compression.ZSTD, 7, 0)


def _three_segments(open_log, clock, delay_ms: int) -> tuple[PartitionLog, LogConfig]:
    """Six one-record batches in segments of two, retention keeping two batches' bytes."""
    size = len(encode_batch([(b"k", b"v" * 40)], timestamp_ms=clock.now))
    config = LogConfig(segment_bytes=size * 2, retention_bytes=size * 2, retention_ms=-1,
                       file_delete_delay_ms=delay_ms)
    log = open_log(config)
    for _ in range(6):
        log.append_as_leader(encode_batch([(b"k", b"v" * 40)], timestamp_ms=clock.now), 0)
    return log, config


def test_retention_renames_segments_and_removes_them_after_the_delay(open_log, clock):
    log, _ = _three_segments(open_log, clock, 60_000)
    assert log.apply_retention(clock.now) == 2
    deleted = sorted(p.name for p in log.directory.glob("*.deleted"))
    assert deleted and all(n.startswith(("00000000000000000000.", "00000000000000000002."))
                           for n in deleted)
    assert log.read(log.log_start_offset, 1 << 20).records  # reads go on from the start
    log.apply_retention(clock.now + 59_999)
    assert list(log.directory.glob("*.deleted"))
    log.apply_retention(clock.now + 60_000)
    assert not list(log.directory.glob("*.deleted"))


def test_zero_delay_deletes_at_once_and_a_restart_removes_leftovers(open_log, clock):
    log, config = _three_segments(open_log, clock, 0)
    assert log.apply_retention(clock.now) == 2
    assert not list(log.directory.glob("*.deleted"))
    log.update_config(dataclasses.replace(config, file_delete_delay_ms=DAY))
    for _ in range(2):
        log.append_as_leader(encode_batch([(b"k", b"v" * 40)], timestamp_ms=clock.now), 0)
    assert log.apply_retention(clock.now) == 1
    assert list(log.directory.glob("*.deleted"))
    end = log.log_end_offset
    (log.directory / "leftover.log.deleted").write_bytes(b"x")  # as after a crash
    again = open_log(config)  # reopened without close: a kill -9
    assert not list(again.directory.glob("*.deleted"))
    assert again.log_end_offset == end


def _compacted_log(open_log, clock, ratio: float) -> PartitionLog:
    log = open_log(LogConfig(cleanup_policy="compact", segment_bytes=400, segment_ms=1000,
                             min_cleanable_dirty_ratio=ratio))
    for round_ in range(6):
        for key in (b"a", b"b", b"c"):
            log.append_as_leader(encode_batch([(key, b"%s%d" % (key, round_))],
                                              timestamp_ms=clock.now), 0)
    log.maybe_roll(clock.now + 2_000)
    return log


def test_compaction_waits_until_the_dirty_share_passes_the_ratio(open_log, clock):
    log = _compacted_log(open_log, clock, 0.5)
    assert log.needs_compaction(clock.now)  # never cleaned: all of it is dirty
    assert log.compact(clock.now) > 0
    assert not log.needs_compaction(clock.now)
    # one new small closed segment: well under half of the cleanable bytes
    log.append_as_leader(encode_batch([(b"a", b"new")], timestamp_ms=clock.now), 0)
    log.maybe_roll(clock.now + 4_000)
    assert not log.needs_compaction(clock.now + 4_000)
    strict = dataclasses.replace(log.config, min_cleanable_dirty_ratio=0.0)
    log.update_config(strict)
    assert log.needs_compaction(clock.now + 4_000)  # ratio 0: any dirty byte is enough


def test_max_compaction_lag_forces_a_pass_below_the_ratio(open_log, clock):
    log = _compacted_log(open_log, clock, 0.9)
    log.compact(clock.now)
    log.append_as_leader(encode_batch([(b"a", b"new")], timestamp_ms=clock.now), 0)
    log.maybe_roll(clock.now + 4_000)
    assert not log.needs_compaction(clock.now + 4_000)
    log.update_config(dataclasses.replace(log.config, max_compaction_lag_ms=10_000))
    assert log.needs_compaction(clock.now + 10_001)


def test_a_kept_tombstone_makes_the_log_due_when_it_expires(open_log, clock):
    log = open_log(LogConfig(cleanup_policy="compact", segment_ms=1000, delete_retention_ms=DAY))
    log.append_as_leader(encode_batch([(b"a", b"1"), (b"b", b"1")], timestamp_ms=clock.now), 0)
    log.append_as_leader(encode_batch([(b"a", None)], timestamp_ms=clock.now), 0)
    log.maybe_roll(clock.now + 2_000)
    log.compact(clock.now + 2_000)
    assert not log.needs_compaction(clock.now + DAY)
    assert log.needs_compaction(clock.now + DAY + 1)
    log.compact(clock.now + DAY + 1)
    assert [k for _, k, _ in _stored(log)[1]] == [b"b"]


def test_truncation_makes_rewritten_offsets_dirty_again(open_log, clock):
    log = _compacted_log(open_log, clock, 0.5)
    log.compact(clock.now)
    log.truncate_to(3)
    assert log.needs_compaction(clock.now) is False  # nothing closed is left to clean
    for i in range(20):
        log.append_as_leader(encode_batch([(b"z%d" % i, b"v")], timestamp_ms=clock.now), 0)
    log.maybe_roll(clock.now + 9_000)
    assert log.needs_compaction(clock.now + 9_000)


def _seg(base: int, end: int, size: int, first: int = 0, newest: int = 0) -> CleanableSegment:
    return CleanableSegment(base, end, size, first, newest)


def test_compaction_due_rules():
    config = LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.5)
    closed = [_seg(0, 10, 600), _seg(10, 20, 400)]
    assert compaction_due(closed, config, 1000, 0, None)  # all dirty
    assert not compaction_due(closed, config, 1000, 10, None)  # 400/1000 dirty
    assert compaction_due(closed, dataclasses.replace(config, min_cleanable_dirty_ratio=0.3),
                          1000, 10, None)
    assert not compaction_due(closed, config, 1000, 20, None)  # nothing dirty
    assert compaction_due(closed, config, 1000, 20, 1000)  # a tombstone's time came
    lagged = dataclasses.replace(config, max_compaction_lag_ms=500)
    assert compaction_due([_seg(0, 10, 600), _seg(10, 20, 1, first=100)], lagged, 1000, 10, None)
    # min.compaction.lag.ms: a segment too young is neither cleanable nor counted
    young = dataclasses.replace(config, min_compaction_lag_ms=100)
    assert not compaction_due([_seg(0, 10, 600), _seg(10, 20, 900, newest=950)], young, 1000, 10,
                              None)
