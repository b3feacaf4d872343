"""Leader epochs in the log directory's checkpoint files at a broker's stop (issue 21 item 5):
a stop wrote a ``leader-epoch-checkpoint`` per log whose epochs changed (every partition's
first write, every leadership change), a new inode each and most of what a stop of freshly
written logs still cost. What must hold: no epoch is lost or invented, by a clean stop, by a
kill -9 at any point (in the stop, after a clean start, after a truncation), with the
directory's file missing, torn or lacking a log (then the log opens from its own pair:
recovery point and epoch file), and the previous version's stop layout (offsets in the
directory's files, epochs in each log's own file) still opens clean."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.protocol.records import decode_batches, encode_batch
from strom.storage import LogConfig, PartitionLog, dir_checkpoint, fileops
from strom.storage.checkpoint import CLEAN_SHUTDOWN, write_atomic
from strom.storage.dir_checkpoint import (
    LEADER_EPOCHS,
    MARKER_SOURCE,
    MARKER_TEXT,
    MARKER_TEXT_OFFSETS,
    NO_PRODUCERS,
    RECOVERY_POINTS,
    read_epochs,
    write_epochs,
)
from strom.storage.epoch import FILE_NAME as EPOCH_FILE
from strom.storage.epoch import LeaderEpochCache
from strom.storage.manager import LogManager

from .conftest import Clock

CONFIG = LogConfig()
LOGS = 3
EPOCHS = [(0, 0), (1, 2)]
"""Every log's epochs after :func:`stopped`: epoch 0 from offset 0, epoch 1 from 2."""
OWN = [(0, 0)]
"""What each log's own epoch file holds after :func:`stopped` (saved by its flush at 2)."""


@pytest.fixture(autouse=True)
def needs_syncfs() -> Iterator[None]:
    if not fileops.syncfs_available():
        pytest.skip("the per-directory stop needs syncfs(2) with error reporting (Linux 5.8+)")
    yield


def batch(tag: str) -> bytes:
    return encode_batch([(b"k", tag.encode())], timestamp_ms=1_700_000_000_000)


def manager(root: Path, clock: Clock) -> LogManager:
    return LogManager([root / "a"], CONFIG, clock=clock, recovery_threads=2)


def stopped(root: Path, clock: Clock) -> None:
    """LOGS logs stopped by the manager: records 0-1 in epoch 0 (flushed: their own recovery
    point 2 and own epoch file [(0, 0)]), records 2-3 in epoch 1 (not flushed)."""
    m = manager(root, clock)
    for p in range(LOGS):
        plog = m.create("t", p, CONFIG)
        plog.write_topic_id("id-1")
        for i in range(2):
            plog.append_as_leader(batch(f"a{i}"), 0)
        plog.flush()
        for i in range(2):
            plog.append_as_leader(batch(f"b{i}"), 1)
    m.close()


def crash(m: LogManager) -> None:
    """kill -9: no close; the descriptors just go."""
    for plog in m.partitions().values():
        for seg in plog._open_segments():
            seg.drop_fd()


def reopened(root: Path, clock: Clock) -> tuple[LogManager, dict[tuple[str, int], PartitionLog]]:
    m = manager(root, clock)
    return m, m.load_all(defer=True)


def own_epochs(plog: PartitionLog) -> list[tuple[int, int]]:
    return LeaderEpochCache.load(plog.directory / EPOCH_FILE).entries


def offsets(plog: PartitionLog) -> list[int]:
    return [r.offset for r in decode_batches(plog.read(0, 1 << 20).records)]


def test_a_stop_writes_every_logs_epochs_into_one_directory_file(tmp_path: Path,
                                                                 clock: Clock) -> None:
    stopped(tmp_path, clock)
    rows = read_epochs(tmp_path / "a" / LEADER_EPOCHS)
    assert rows == {("t", p): (4, EPOCHS) for p in range(LOGS)}
    m, logs = reopened(tmp_path, clock)
    assert not [plog for plog in logs.values() if plog.loaded]  # a clean start
    for plog in logs.values():
        assert own_epochs(plog) == OWN  # not written by the stop
        assert plog.epochs == EPOCHS and plog.end_offset_for_epoch(0) == (0, 2)
        assert (plog.directory / CLEAN_SHUTDOWN).read_bytes() == MARKER_TEXT
    m.close()


def test_a_stop_after_first_writes_creates_no_epoch_file(tmp_path: Path,
                                                         clock: Clock) -> None:
    """Each partition's first write starts its first epoch: the stop after it made a file per
    log before."""
    m = manager(tmp_path, clock)
    for p in range(LOGS):
        m.create("t", p, CONFIG).append_as_leader(batch("x"), 0)
    m.close()
    assert not list(tmp_path.glob(f"a/*/{EPOCH_FILE}"))
    m, logs = reopened(tmp_path, clock)
    assert all(plog.epochs == [(0, 0)] for plog in logs.values())
    m.close()


def test_a_crash_after_a_clean_start_keeps_the_epochs_of_the_directory_file(
        tmp_path: Path, clock: Clock) -> None:
    """Log 0 changes without a flush (its own files stay behind the directory's), log 1 is
    flushed (its own recovery point moves: its own epoch file must have caught up first)."""
    stopped(tmp_path, clock)
    m, logs = reopened(tmp_path, clock)
    logs[("t", 0)].append_as_leader(batch("c"), 1)
    logs[("t", 1)].append_as_leader(batch("c"), 1)
    logs[("t", 1)].flush()
    assert own_epochs(logs[("t", 1)]) == EPOCHS
    crash(m)
    m, logs = reopened(tmp_path, clock)
    assert [p for (_, p), plog in logs.items() if plog.loaded] == [0, 1]  # recovered
    for (_, p), plog in logs.items():
        assert plog.epochs == EPOCHS, p
        assert offsets(plog) == list(range(5 if p < 2 else 4))
    m.close()


def test_a_truncation_after_a_clean_start_saves_the_epochs_its_recovery_point_needs(
        tmp_path: Path, clock: Clock) -> None:
    """A truncation writes the log's own recovery point (3, newer than the directory's) while
    its own epoch file lacks epoch 1: the crash's recovery rescans the active segment, where
    every entry its own file lacks starts (resolve's docstring)."""
    stopped(tmp_path, clock)
    m, logs = reopened(tmp_path, clock)
    logs[("t", 0)].truncate_to(3)
    crash(m)
    m, logs = reopened(tmp_path, clock)
    plog = logs[("t", 0)]
    assert plog.epochs == EPOCHS and plog.end_offset_for_epoch(0) == (0, 2)
    assert offsets(plog) == [0, 1, 2]
    m.close()


@pytest.mark.parametrize("damage", ["missing", "torn", "garbage", "without log 1"])
def test_a_damaged_directory_epoch_file_opens_logs_from_their_own_pair(
        tmp_path: Path, clock: Clock, damage: str) -> None:
    """Recovery from the log's own recovery point (2) with its own epochs ([(0, 0)]): never
    the directory's recovery point (4) with the stale own epochs, which would lose epoch 1."""
    stopped(tmp_path, clock)
    path = tmp_path / "a" / LEADER_EPOCHS
    if damage == "missing":
        path.unlink()
    elif damage == "torn":
        path.write_bytes(path.read_bytes()[:-4])
    elif damage == "garbage":
        path.write_bytes(b"\x00garbage\n")
    else:
        write_epochs(path, {("t", p): (4, EPOCHS) for p in (0, 2)}, sync=False)
    hit = {0, 1, 2} if damage != "without log 1" else {1}
    m, logs = reopened(tmp_path, clock)
    assert {p for (_, p), plog in logs.items() if plog.loaded} == hit  # recovered at once
    for plog in logs.values():
        assert plog.epochs == EPOCHS and offsets(plog) == [0, 1, 2, 3]
    m.close()


@pytest.mark.parametrize("dies_at", [LEADER_EPOCHS, NO_PRODUCERS, RECOVERY_POINTS])
def test_a_stop_killed_while_writing_the_directory_files_loses_no_epoch(
        tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch, dies_at: str) -> None:
    """The second stop dies writing one of the directory's files (after the earlier ones were
    renamed into place): whatever mix of the two stops' files is left, the epochs come back."""
    stopped(tmp_path, clock)
    m, logs = reopened(tmp_path, clock)
    for plog in logs.values():
        plog.append_as_leader(batch("c"), 2)  # epoch 2 from offset 4

    class Killed(BaseException):
        pass

    def write_or_die(path: Path, text: str, *, sync: bool = True) -> None:
        if path.name == dies_at:
            raise Killed
        write_atomic(path, text, sync=sync)

    monkeypatch.setattr(dir_checkpoint, "write_atomic", write_or_die)
    with pytest.raises(Killed):
        m.close()
    monkeypatch.undo()
    crash(m)
    m, logs = reopened(tmp_path, clock)
    for plog in logs.values():
        assert plog.epochs == [*EPOCHS, (2, 4)] and offsets(plog) == [0, 1, 2, 3, 4]
    m.close()
    m, logs = reopened(tmp_path, clock)
    assert all(not plog.loaded and plog.epochs == [*EPOCHS, (2, 4)] for plog in logs.values())
    m.close()


def test_the_previous_versions_stop_layout_opens_clean(tmp_path: Path, clock: Clock) -> None:
    """The previous version's stop: offsets in the directory's files, markers holding
    :data:`MARKER_TEXT_OFFSETS`, each log's epochs in its own file, no epochs file."""
    stopped(tmp_path, clock)
    for p in range(LOGS):
        LeaderEpochCache.of(tmp_path / "a" / f"t-{p}" / EPOCH_FILE, EPOCHS).save()
    (tmp_path / "a" / LEADER_EPOCHS).unlink()
    (tmp_path / "a" / MARKER_SOURCE).write_bytes(MARKER_TEXT_OFFSETS)  # the markers' inode
    m, logs = reopened(tmp_path, clock)
    assert not [plog for plog in logs.values() if plog.loaded]
    assert all(plog.epochs == EPOCHS for plog in logs.values())
    logs[("t", 0)].append_as_leader(batch("c"), 1)
    crash(m)  # no marker for log 0: the directory's entry with its own epoch file
    m, logs = reopened(tmp_path, clock)
    assert [p for (_, p), plog in logs.items() if plog.loaded] == [0]
    assert all(plog.epochs == EPOCHS for plog in logs.values())
    m.close()
    m, logs = reopened(tmp_path, clock)  # now this version's layout
    assert not [plog for plog in logs.values() if plog.loaded]
    assert all(plog.epochs == EPOCHS for plog in logs.values())
    m.close()
