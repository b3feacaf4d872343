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
