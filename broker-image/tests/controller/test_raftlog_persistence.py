"""The on-disk Raft log: fsync'd state survives, a torn tail is dropped, snapshots cut prefixes."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.controller.messages import LogEntry
from strom.controller.raft import Persist, Snapshot
from strom.controller.raftlog import DiskRaftLog, MemoryRaftLog, RaftLog, persist


def _entries(first: int, last: int, term: int = 1) -> tuple[LogEntry, ...]:
    return tuple(LogEntry(term, i, b"c%d" % i * (i % 3 + 1)) for i in range(first, last + 1))


@pytest.fixture(params=["disk", "memory"])
def log_factory(request: pytest.FixtureRequest, tmp_path: Path) -> object:
    if request.param == "disk":
        return lambda: DiskRaftLog(tmp_path / "raft")
    mem = MemoryRaftLog()
    return lambda: mem


def test_hard_state_and_entries_survive_a_restart(log_factory: object) -> None:
    log: RaftLog = log_factory()  # type: ignore[operator]
    assert log.load().entries == ()
    persist(log, Persist(3, 2, entries=_entries(1, 5)))
    reopened: RaftLog = log_factory()  # type: ignore[operator]
    state = reopened.load()
    assert (state.term, state.voted_for) == (3, 2)
    assert state.entries == _entries(1, 5)


def test_truncating_a_conflicting_suffix_then_appending(log_factory: object) -> None:
    log: RaftLog = log_factory()  # type: ignore[operator]
    log.load()
    persist(log, Persist(1, None, entries=_entries(1, 6)))
    persist(log, Persist(2, None, truncate_from=4, entries=_entries(4, 5, term=2)))
    state = log_factory().load()  # type: ignore[operator]
    assert state.entries == _entries(1, 3) + _entries(4, 5, term=2)
    with pytest.raises(ValueError, match="expects 6"):
        log.append(_entries(7, 7))


def test_snapshot_replaces_the_prefix_and_keeps_the_suffix(log_factory: object) -> None:
    log: RaftLog = log_factory()  # type: ignore[operator]
    log.load()
    persist(log, Persist(1, None, entries=_entries(1, 10)))
    persist(log, Persist(1, None, snapshot=Snapshot(7, 1, b"image@7")))
    persist(log, Persist(1, None, entries=_entries(11, 12)))
    state = log_factory().load()  # type: ignore[operator]
    assert state.snapshot == Snapshot(7, 1, b"image@7")
    assert state.entries == _entries(8, 12)


def test_installing_a_snapshot_past_the_log_discards_it(log_factory: object) -> None:
    log: RaftLog = log_factory()  # type: ignore[operator]
    log.load()
    persist(log, Persist(1, None, entries=_entries(1, 4)))
    persist(log, Persist(2, None, snapshot=Snapshot(20, 2, b"image@20"), truncate_from=21))
    persist(log, Persist(2, None, entries=_entries(21, 22, term=2)))
    state = log_factory().load()  # type: ignore[operator]
    assert state.snapshot.index == 20 and state.entries == _entries(21, 22, term=2)


def test_torn_tail_recovery_at_every_byte(tmp_path: Path) -> None:
    src = DiskRaftLog(tmp_path / "full")
    src.load()
    entries = _entries(1, 4)
    for e in entries:
        src.append((e,))
    data = (tmp_path / "full" / "log").read_bytes()
    ends, pos = [], 0
    from strom.controller.raftlog import encode_record

    for e in entries:
        pos += len(encode_record(e))
        ends.append(pos)
    for cut in range(len(data) + 1):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        (d / "log").write_bytes(data[:cut])
        log = DiskRaftLog(d)
        whole = sum(1 for end in ends if end <= cut)
        assert log.load().entries == entries[:whole], cut
        assert (d / "log").stat().st_size == (ends[whole - 1] if whole else 0)
        log.append(_entries(whole + 1, whole + 1))  # and the log is writable again
        assert DiskRaftLog(d).load().entries == entries[:whole] + _entries(whole + 1, whole + 1)


def test_a_corrupt_record_ends_the_log(tmp_path: Path) -> None:
    log = DiskRaftLog(tmp_path)
    log.load()
    log.append(_entries(1, 3))
    raw = bytearray((tmp_path / "log").read_bytes())
    raw[-3] ^= 0xFF  # flip a byte inside the last command
    (tmp_path / "log").write_bytes(bytes(raw))
    assert DiskRaftLog(tmp_path).load().entries == _entries(1, 2)


def test_snapshot_saved_but_log_not_yet_compacted(tmp_path: Path) -> None:
    """A crash between the snapshot's rename and the log rewrite: load drops the covered prefix."""
    log = DiskRaftLog(tmp_path)
    log.load()
    log.append(_entries(1, 5))
    old_log = (tmp_path / "log").read_bytes()
    log.save_snapshot(Snapshot(3, 1, b"s"))
    (tmp_path / "log").write_bytes(old_log)
    again = DiskRaftLog(tmp_path)
    state = again.load()
    assert state.snapshot == Snapshot(3, 1, b"s") and state.entries == _entries(4, 5)
    again.append(_entries(6, 6))
    assert DiskRaftLog(tmp_path).load().entries == _entries(4, 6)


def test_corrupt_hard_state_is_an_error_not_a_silent_reset(tmp_path: Path) -> None:
    log = DiskRaftLog(tmp_path)
    log.load()
    log.save_hard_state(7, 1)
    raw = bytearray((tmp_path / "state").read_bytes())
    raw[-1] ^= 0x01
    (tmp_path / "state").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="CRC"):
        DiskRaftLog(tmp_path).load()
    assert not list(tmp_path.glob("*.tmp"))
