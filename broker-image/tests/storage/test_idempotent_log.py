"""PartitionLog's idempotent-producer hooks: duplicates, restarts, truncation, snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import BatchBuilder
from strom.storage import LogConfig, PartitionLog
from strom.storage.producer_state import snapshot_offsets
from strom.storage.segment import LogSegment

from .conftest import OpenLog


def batch(pid: int, epoch: int, seq: int, count: int = 2, tag: str = "v") -> bytes:
    b = BatchBuilder(batch_size=1 << 20, producer_id=pid, producer_epoch=epoch,
                     base_sequence=seq)
    for i in range(count):
        b.append(None, f"{tag}{seq + i}".encode(), 1_700_000_000_000)
    return b.build()


def test_resent_batch_is_answered_with_its_original_offsets(open_log: OpenLog) -> None:
    log = open_log()
    first = log.append_as_leader(batch(1, 0, 0), 0)
    second = log.append_as_leader(batch(1, 0, 2), 0)
    end = log.log_end_offset
    again = log.append_as_leader(batch(1, 0, 0), 0)
    assert again.duplicate and not first.duplicate
    assert (again.base_offset, again.last_offset) == (first.base_offset, first.last_offset)
    assert log.append_as_leader(batch(1, 0, 2), 0).base_offset == second.base_offset
    assert log.log_end_offset == end


def test_gap_is_refused_and_writes_nothing(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(batch(1, 0, 0), 0)
    with pytest.raises(StromError) as info:
        log.append_as_leader(batch(1, 0, 5), 0)
    assert info.value.code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(StromError) as info:
        log.append_as_leader(batch(2, 0, 0) + batch(1, 0, 9), 0)
    assert log.log_end_offset == 2  # all or nothing: producer 2's batch was not written either


def test_state_survives_a_kill(tmp_path: Path, open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=300))
    offsets = [log.append_as_leader(batch(3, 0, seq), 0).base_offset for seq in range(0, 20, 2)]
    assert log.segment_count > 2
    # no close(): the broker was killed; a new instance opens the same directory
    reopened = open_log(LogConfig(segment_bytes=300))
    again = reopened.append_as_leader(batch(3, 0, 18), 0)
    assert again.duplicate and again.base_offset == offsets[-1]
    assert reopened.append_as_leader(batch(3, 0, 20), 0).base_offset == 20


def test_clean_restart_loads_the_snapshot_without_rescanning(
        open_log: OpenLog, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log()
    for seq in range(0, 10, 2):
        log.append_as_leader(batch(4, 0, seq), 0)
    log.close()
    assert snapshot_offsets(log.directory) == [10]
    scanned: list[int] = []
    original = LogSegment.iter_batches

    def counting(self: LogSegment, position: int = 0):  # type: ignore[no-untyped-def]
        scanned.append(self.base_offset)
        return original(self, position)

    monkeypatch.setattr(LogSegment, "iter_batches", counting)
    reopened = open_log()
    assert scanned == []
    assert reopened.append_as_leader(batch(4, 0, 8), 0).duplicate


def test_truncation_rebuilds_the_state(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=300))
    for seq in range(0, 12, 2):
        log.append_as_leader(batch(5, 0, seq), 0)
    log.truncate_to(6)
    assert all(o <= 6 for o in snapshot_offsets(log.directory))
    # the batch with sequences 6..7 is gone: its resend is new (in sequence), not a duplicate
    resent = log.append_as_leader(batch(5, 0, 6, tag="w"), 0)
    assert not resent.duplicate and resent.base_offset == 6
    log.truncate_fully_and_start_at(100)
    assert snapshot_offsets(log.directory) == []
    assert log.producer_state.producers == {}


def test_follower_builds_the_same_state(open_log: OpenLog) -> None:
    leader = open_log(name="leader-0")
    for seq in (0, 2, 4):
        leader.append_as_leader(batch(6, 0, seq), 0)
    data = leader.read(0, 1 << 20).records
    follower = open_log(name="follower-0")
    follower.append_as_follower(data)
    # after a failover the follower, now leader, recognises the retry the old leader accepted
    assert follower.append_as_leader(batch(6, 0, 4), 1).base_offset == 4
    assert follower.producer_state.producers == leader.producer_state.producers


def test_retention_deletes_old_snapshots(open_log: OpenLog, clock) -> None:  # type: ignore[no-untyped-def]
    log = open_log(LogConfig(segment_bytes=300, retention_bytes=700))
    for seq in range(0, 30, 2):
        log.append_as_leader(batch(7, 0, seq), 0)
    assert len(snapshot_offsets(log.directory)) > 2
    assert log.apply_retention() > 0
    assert min(snapshot_offsets(log.directory)) >= log.log_start_offset
    assert log.append_as_leader(batch(7, 0, 28), 0).duplicate


def test_log_without_snapshots_is_rebuilt_from_headers(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=300)
    log = PartitionLog.open(tmp_path / "t-0", config, topic="t", partition=0)
    for seq in range(0, 8, 2):
        log.append_as_leader(batch(8, 0, seq), 0)
    log.close()
    for path in (tmp_path / "t-0").glob("*.snapshot"):
        path.unlink()
    reopened = PartitionLog.open(tmp_path / "t-0", config, topic="t", partition=0)
    assert reopened.append_as_leader(batch(8, 0, 6), 0).duplicate


def test_housekeeping_expires_idle_producers(tmp_path: Path, clock) -> None:  # type: ignore[no-untyped-def]
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), topic="t", partition=0, clock=clock,
                            producer_id_expiration_ms=60_000)
    b = BatchBuilder(batch_size=1 << 20, producer_id=9, producer_epoch=0, base_sequence=0)
    b.append(None, b"x", clock.now)
    log.append_as_leader(b.build(), 0)
    log.maybe_roll()
    assert 9 in log.producer_state.producers
    clock.advance(11 * 60 * 1000)  # past the expiration and the 10-minute check interval
    log.maybe_roll()
    assert log.producer_state.producers == {}
