"""One checkpoint file per log directory at a broker's stop (issue 21 item 5), as Kafka's
``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
``replication-offset-checkpoint``, and no producer snapshot for a log without producer state:
a stop of 10,000 changed logs allocated three new files per log (its recovery checkpoint, its
producer snapshot, its epoch checkpoint; ~0.46 ms of CPU each here). What must still hold:
every acknowledged record survives a stop and a crash, a missing or torn directory file means
recovery (never a clean open from stale offsets), a crash inside the stop recovers, a
directory written by the previous version (a checkpoint per log) opens, and a topic deleted
and created again does not inherit the old log's offsets."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.protocol.records import BatchBuilder, decode_batches, encode_batch
from strom.storage import LogConfig, PartitionLog, dir_checkpoint, fileops, producer_state
from strom.storage.checkpoint import CLEAN_SHUTDOWN, RECOVERY_CHECKPOINT
from strom.storage.dir_checkpoint import (
    HIGH_WATERMARKS,
    LOG_START_OFFSETS,
    MARKER_TEXT,
    NO_PRODUCERS,
    RECOVERY_POINTS,
    read_offsets,
)
from strom.storage.manager import LogManager

from .conftest import Clock

CONFIG = LogConfig()
PRODUCER = 3  # the partition an idempotent producer writes to


@pytest.fixture(autouse=True)
def needs_syncfs() -> Iterator[None]:
    if not fileops.syncfs_available():
        pytest.skip("the per-directory stop needs syncfs(2) with error reporting (Linux 5.8+)")
    yield


def idempotent(seq: int, count: int = 2) -> bytes:
    b = BatchBuilder(batch_size=1 << 20, producer_id=7, producer_epoch=0, base_sequence=seq)
    for i in range(count):
        b.append(None, b"p%d" % (seq + i), 1_700_000_000_000)
    return b.build()


def plain(p: int, tag: str = "v") -> bytes:
    return encode_batch([(b"k", f"{tag}{p}-{i}".encode()) for i in range(2)],
                        timestamp_ms=1_700_000_000_000)


def manager(root: Path, clock: Clock) -> LogManager:
    return LogManager([root / "a", root / "b"], CONFIG, clock=clock, recovery_threads=2)


def values(plog: PartitionLog) -> list[bytes | None]:
    """Every record from offset 0 (those below the log start read as None)."""
    start = plog.log_start_offset
    records = decode_batches(plog.read(start, 1 << 20).records)
    return [None] * start + [r.value for r in records if r.offset >= start]


def written(root: Path, clock: Clock, partitions: int = 8) -> dict[int, list[bytes | None]]:
    """Logs with records, a high watermark and topic ids; partition PRODUCER has an idempotent
    producer; closed by the manager (the broker's stop). Their values."""
    m = manager(root, clock)
    out = {}
    for p in range(partitions):
        plog = m.create("t", p, CONFIG)
        plog.write_topic_id("id-1")
        plog.append_as_leader(idempotent(0) if p == PRODUCER else plain(p), 0)
        plog.append_as_leader(plain(p, "w"), 0)
        plog.high_watermark = 2
        out[p] = values(plog)
    m.close()
    return out


def restarted(root: Path, clock: Clock, partition: int) -> tuple[LogManager, PartitionLog]:
    """A manager that loaded the logs (deferred) and one of its logs."""
    m = manager(root, clock)
    m.load_all(defer=True)
    plog = m.get("t", partition)
    assert plog is not None
    return m, plog


def all_deferred(root: Path, clock: Clock, before: dict[int, list[bytes | None]],
                 offsets: tuple[int, int, int]
                 ) -> tuple[LogManager, dict[tuple[str, int], PartitionLog]]:
    """A manager that opened every log from its checkpoints alone (no recovery), each with
    ``offsets`` (log start, end, high watermark) and ``before``'s records."""
    m = manager(root, clock)
    logs = m.load_all(defer=True)
    assert len(logs) == len(before) and not [plog for plog in logs.values() if plog.loaded]
    for (_, p), plog in logs.items():
        assert (plog.log_start_offset, plog.log_end_offset, plog.high_watermark) == offsets
        assert values(plog) == before[p]
    return m, logs


def crash(m: LogManager) -> None:
    """kill -9: no close; the descriptors just go."""
    for plog in m.partitions().values():
        for seg in plog._open_segments():
            seg.drop_fd()


def partition_dirs(root: Path) -> list[Path]:
    return [p for d in ("a", "b") for p in (root / d).iterdir() if p.is_dir()]


def test_a_stop_writes_one_checkpoint_per_directory_and_no_file_per_log(
        tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    before = written(tmp_path, clock)
    for d in ("a", "b"):  # Kafka's CheckpointFile format: version, count, topic partition offset
        lines = (tmp_path / d / RECOVERY_POINTS).read_text().splitlines()
        assert lines[:2] == ["0", "4"] and sorted(lines[2:]) == sorted(
            f"t {p} 4" for p in range(8) if (tmp_path / d / f"t-{p}").exists())
        assert set((read_offsets(tmp_path / d / LOG_START_OFFSETS) or {}).values()) == {0}
        assert set((read_offsets(tmp_path / d / HIGH_WATERMARKS) or {}).values()) == {2}
        assert PRODUCER not in {p for _, p in read_offsets(tmp_path / d / NO_PRODUCERS) or {}}
    for path in partition_dirs(tmp_path):
        assert not (path / RECOVERY_CHECKPOINT).exists()  # no file of its own
        snapshots = list(path.glob("*.snapshot"))
        assert len(snapshots) == (1 if path.name == f"t-{PRODUCER}" else 0), path
        assert (path / CLEAN_SHUTDOWN).read_bytes() == MARKER_TEXT
    replays: list[Path] = []
    load_latest = producer_state.load_latest
    monkeypatch.setattr(producer_state, "load_latest",
                        lambda d, *a: (replays.append(d), load_latest(d, *a))[1])
    m, logs = all_deferred(tmp_path, clock, before, (0, 4, 2))
    assert [d.name for d in replays] == [f"t-{PRODUCER}"]  # no state to read for the others
    producer_log = logs[("t", PRODUCER)]
    retry = producer_log.append_as_leader(idempotent(0), 0)
    assert retry.duplicate and retry.base_offset == 0  # the producer's state came back
    m.close()


def test_a_lost_producer_snapshot_is_rebuilt_from_the_log(tmp_path: Path,
                                                          clock: Clock) -> None:
    """Only a log listed as having no producer state skips its snapshot; a snapshot removed by
    hand is rebuilt from the batch headers."""
    written(tmp_path, clock)
    path = next(p for p in partition_dirs(tmp_path) if p.name == f"t-{PRODUCER}")
    for snapshot in path.glob("*.snapshot"):
        snapshot.unlink()
    m, plog = restarted(tmp_path, clock, PRODUCER)
    assert plog.append_as_leader(idempotent(0), 0).duplicate
    m.close()


def test_a_moved_log_start_and_high_watermark_come_back_from_the_directory_files(
        tmp_path: Path, clock: Clock) -> None:
    written(tmp_path, clock)
    m, plog = restarted(tmp_path, clock, 1)
    plog.high_watermark = 4
    plog.advance_log_start_offset(3)  # writes the log's own checkpoint, at once, as before
    m.close()
    assert (plog.directory / RECOVERY_CHECKPOINT).exists()  # older than the directory's
    again = manager(tmp_path, clock)
    again.load_all(defer=True)
    reopened = again.get("t", 1)
    assert reopened is not None and not reopened.loaded
    assert (reopened.log_start_offset, reopened.high_watermark) == (3, 4)
    again.close()


@pytest.mark.parametrize("damage", ["missing", "torn", "garbage", "one of three missing"])
def test_a_missing_or_torn_directory_checkpoint_means_recovery(
        tmp_path: Path, clock: Clock, damage: str) -> None:
    before = written(tmp_path, clock)
    m = manager(tmp_path, clock)
    m.load_all(defer=True)
    plog = m.get("t", 0)  # in directory a
    assert plog is not None and plog.directory.parent.name == "a"
    plog.advance_log_start_offset(1)  # its own checkpoint: offsets 1..4, stale after this
    plog.append_as_leader(plain(0, "x"), 0)
    before[0] = values(plog)
    m.close()
    target = tmp_path / "a" / (LOG_START_OFFSETS if damage == "one of three missing"
                               else RECOVERY_POINTS)
    if damage in ("missing", "one of three missing"):
        target.unlink()
    elif damage == "torn":
        target.write_bytes(target.read_bytes()[:-4])
    else:
        target.write_bytes(b"\x00garbage\n")
    m = manager(tmp_path, clock)
    logs = m.load_all(defer=True)
    for (_, p), plog in logs.items():
        assert plog.loaded == (plog.directory.parent.name == "a")  # recovered at once
        assert values(plog) == before[p]
        assert plog.log_end_offset == (6 if p == 0 else 4)  # not its own stale checkpoint's
    m.close()


def test_a_crash_between_the_data_sync_and_the_checkpoint_rename_recovers_every_record(
        tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    before = written(tmp_path, clock)
    m = manager(tmp_path, clock)
    m.load_all(defer=True)
    for (_, p), plog in m.partitions().items():
        plog.append_as_leader(plain(p, "x"), 0)  # acknowledged, then the stop begins
        before[p] = values(plog)

    class Killed(BaseException):
        pass

    def write_then_die(path: Path, text: str, *, sync: bool = True) -> None:
        (path.parent / (path.name + ".tmp")).write_text(text[: len(text) // 2])
        raise Killed  # the process dies with the temporary file half written

    monkeypatch.setattr(dir_checkpoint, "write_atomic", write_then_die)
    with pytest.raises(Killed):
        m.close()
    monkeypatch.undo()
    crash(m)
    assert not list(tmp_path.glob("*/*/" + CLEAN_SHUTDOWN))
    again = manager(tmp_path, clock)
    logs = again.load_all(defer=True)
    assert all(plog.loaded for plog in logs.values())  # recovered, none taken as clean
    for (_, p), plog in logs.items():
        assert values(plog) == before[p] and plog.log_end_offset == 6
    again.close()
    third = manager(tmp_path, clock)
    assert all(not plog.loaded for plog in third.load_all(defer=True).values())
    third.close()


def test_a_crash_after_a_clean_start_recovers_past_the_directory_checkpoint(
        tmp_path: Path, clock: Clock) -> None:
    before = written(tmp_path, clock)
    m, plog = restarted(tmp_path, clock, 5)
    plog.append_as_leader(plain(5, "x"), 0)
    crash(m)
    again = manager(tmp_path, clock)
    logs = again.load_all(defer=True)
    assert [p for (_, p), plog in logs.items() if plog.loaded] == [5]  # only the changed one
    reopened = logs[("t", 5)]
    assert values(reopened)[:4] == before[5] and reopened.log_end_offset == 6
    assert reopened.high_watermark == 2  # from the directory's file
    again.close()


def test_a_topic_created_again_does_not_inherit_the_old_logs_offsets(
        tmp_path: Path, clock: Clock) -> None:
    written(tmp_path, clock)
    m, old = restarted(tmp_path, clock, 2)
    old.advance_log_start_offset(2)
    m.close()  # the directory's files: t-2 starts at 2, ends at 4
    m = manager(tmp_path, clock)
    m.load_all(defer=True)
    m.delete_partition("t", 2)
    new = m.create("t", 2, CONFIG)
    new.write_topic_id("id-2")
    new.append_as_leader(plain(2, "new"), 0)
    crash(m)
    again = manager(tmp_path, clock)
    again.load_all(defer=True)
    reopened = again.get("t", 2)
    assert reopened is not None
    assert (reopened.log_start_offset, reopened.log_end_offset) == (0, 2)
    assert values(reopened) == [b"new2-0", b"new2-1"]
    again.close()


def test_a_directory_written_by_the_previous_version_opens(tmp_path: Path,
                                                           clock: Clock) -> None:
    """The previous layout: each log's own ``recovery-point-checkpoint`` and producer
    snapshot, and an empty marker (hard links to one empty file per directory)."""
    before: dict[int, list[bytes | None]] = {}
    for p in range(6):
        d = tmp_path / ("a" if p % 2 else "b")
        plog = PartitionLog.open(d / f"t-{p}", CONFIG, topic="t", partition=p, clock=clock)
        plog.write_topic_id("id-1")
        plog.append_as_leader(plain(p), 0)
        plog.high_watermark = 1
        plog.advance_log_start_offset(1)
        before[p] = values(plog)
        plog.close()  # a log's own close: the previous version's files exactly
        marker = plog.directory / CLEAN_SHUTDOWN
        source = d / ".clean-shutdown-source"
        source.touch()
        marker.unlink()
        os.link(source, marker)
    assert not list(tmp_path.glob("*/" + RECOVERY_POINTS))
    m, logs = all_deferred(tmp_path, clock, before, (1, 2, 1))
    changed = logs[("t", 0)]
    changed.append_as_leader(plain(0, "x"), 0)
    m.close()  # now the directories' files; the unchanged logs keep their own
    again = manager(tmp_path, clock)
    logs = again.load_all(defer=True)
    assert not [plog for plog in logs.values() if plog.loaded]
    assert logs[("t", 0)].log_end_offset == 4 and logs[("t", 1)].log_start_offset == 1
    again.close()


def test_a_log_closed_alone_leaves_the_shared_markers_alone(tmp_path: Path,
                                                            clock: Clock) -> None:
    """A log whose high watermark alone changed keeps its marker (a hard link shared with
    its directory's other logs' markers) until its close; closing it alone writes its own
    checkpoint and an empty marker of its own, without writing through the shared file."""
    written(tmp_path, clock)
    m, plog = restarted(tmp_path, clock, 0)
    plog.high_watermark = 4
    assert (plog.directory / CLEAN_SHUTDOWN).exists()
    m.forget("t", 0)
    assert (plog.directory / CLEAN_SHUTDOWN).read_bytes() == b""
    others = [p / CLEAN_SHUTDOWN for p in partition_dirs(tmp_path) if p.name != "t-0"]
    assert all(marker.read_bytes() == MARKER_TEXT for marker in others)
    m.close()
    again = manager(tmp_path, clock)
    logs = again.load_all(defer=True)
    assert not [log for log in logs.values() if log.loaded]
    assert logs[("t", 0)].high_watermark == 4 and logs[("t", 1)].high_watermark == 2
    again.close()
