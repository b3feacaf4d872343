"""LogManager: placement over log dirs, load after restart, delete, maintenance."""

from __future__ import annotations

from strom.protocol.records import encode_batch
from strom.storage import LogConfig, LogManager


def test_create_load_delete(tmp_path, clock):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    mgr = LogManager(dirs, LogConfig(), clock=clock)
    for p in range(4):
        mgr.create("my-topic", p, LogConfig()).append_as_leader(
            encode_batch([(b"k", b"v%d" % p)], timestamp_ms=clock.now), 0)
    assert {len(list(d.iterdir())) for d in dirs} == {2}
    assert mgr.get("my-topic", 9) is None
    mgr.close()
    again = LogManager(dirs, LogConfig(), clock=clock)
    logs = again.load_all()
    assert set(logs) == {("my-topic", p) for p in range(4)}
    assert all(plog.log_end_offset == 1 and plog.topic == "my-topic" for plog in logs.values())
    again.delete_partition("my-topic", 1)
    assert again.get("my-topic", 1) is None
    assert not any((d / "my-topic-1").exists() for d in dirs)
    (dirs[0] / "x-3.7.deleting").mkdir()
    (dirs[0] / "not a partition").mkdir()
    again.close()
    third = LogManager(dirs, LogConfig(), clock=clock)
    assert set(third.load_all()) == {("my-topic", p) for p in (0, 2, 3)}
    assert not (dirs[0] / "x-3.7.deleting").exists()
    third.close()


def test_maintenance_applies_retention_and_rolls(tmp_path, clock):
    mgr = LogManager([tmp_path], LogConfig(), clock=clock)
    plog = mgr.create("t", 0, LogConfig(segment_ms=1000, retention_ms=5000))
    plog.append_as_leader(encode_batch([(b"k", b"v")], timestamp_ms=clock.now), 0)
    clock.advance(2000)
    mgr.run_maintenance()
    assert plog.segment_count == 2
    clock.advance(10_000)
    mgr.run_maintenance()
    assert plog.log_start_offset == 1 and plog.segment_count == 1
    mgr.close()


def test_maintenance_compacts(tmp_path, clock):
    mgr = LogManager([tmp_path], LogConfig(), clock=clock)
    plog = mgr.create("c", 0, LogConfig(cleanup_policy="compact", segment_bytes=200))
    for i in range(10):
        plog.append_as_leader(encode_batch([(b"same", b"v%d" % i)], timestamp_ms=clock.now), 0)
    size = plog.size_bytes
    mgr.run_maintenance()
    assert plog.size_bytes < size
    mgr.close()


def _write(plog, clock) -> None:  # type: ignore[no-untyped-def]
    plog.append_as_leader(encode_batch([(b"k", b"v")], timestamp_ms=clock.now), 0)


def test_the_per_second_check_visits_only_logs_that_are_due(tmp_path, clock):
    """Issue 21 item 2: an idle log costs nothing per tick; a written one is visited when its
    segment.ms comes, and rolled then."""
    mgr = LogManager([tmp_path], LogConfig(), clock=clock)
    idle = [mgr.create("idle", p, LogConfig(segment_ms=1000)) for p in range(50)]
    busy = mgr.create("busy", 0, LogConfig(segment_ms=1000))
    for _ in range(5):
        clock.advance(1000)
        assert mgr.run_due_checks() == 0  # nothing written: nobody visited
    _write(busy, clock)
    clock.advance(1000)
    assert mgr.run_due_checks() == 0  # not older than segment.ms yet
    clock.advance(1)
    assert mgr.run_due_checks() == 1
    assert busy.segment_count == 2 and all(p.segment_count == 1 for p in idle)
    clock.advance(5000)
    assert mgr.run_due_checks() == 0  # the new active segment is empty: nothing due
    # the producer-id expiry check every 10 minutes visits each log once
    clock.advance(10 * 60 * 1000)
    assert mgr.run_due_checks() == 51
    assert mgr.run_due_checks() == 0
    mgr.close()


def test_a_shorter_segment_ms_or_a_flush_ms_makes_the_check_due_sooner(tmp_path, clock):
    mgr = LogManager([tmp_path], LogConfig(), clock=clock)
    plog = mgr.create("t", 0, LogConfig())  # segment.ms 7 days, flush.ms never
    _write(plog, clock)
    clock.advance(2000)
    assert mgr.run_due_checks() == 0
    mgr.create("t", 0, LogConfig(segment_ms=1000))  # an existing log takes the new config
    assert mgr.run_due_checks() == 1 and plog.segment_count == 2
    flushing = mgr.create("f", 0, LogConfig(flush_ms=500))
    _write(flushing, clock)
    assert flushing.recovery_point == 0
    clock.advance(500)
    assert mgr.run_due_checks() == 1 and flushing.recovery_point == 1
    mgr.close()


def test_deleted_logs_are_not_visited_and_loaded_logs_are(tmp_path, clock):
    mgr = LogManager([tmp_path], LogConfig(), clock=clock)
    gone = mgr.create("t", 0, LogConfig(segment_ms=1000))
    kept = mgr.create("t", 1, LogConfig(segment_ms=1000))
    _write(gone, clock)
    _write(kept, clock)
    mgr.delete_partition("t", 0)
    clock.advance(1001)
    assert mgr.run_due_checks() == 1 and kept.segment_count == 2
    _write(kept, clock)
    mgr.close()
    again = LogManager([tmp_path], LogConfig(), clock=clock)
    again.load_all({"t": LogConfig(segment_ms=1000)}, defer=True)
    deferred = again.get("t", 1)
    assert deferred is not None and not deferred.loaded
    assert again.scheduled_checks == 0  # not read yet: nothing to check
    deferred.load()
    clock.advance(1001)
    assert again.run_due_checks() == 1 and deferred.segment_count == 3
    again.close()
