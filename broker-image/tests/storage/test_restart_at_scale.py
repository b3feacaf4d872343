"""Restart at scale (issue 21 item 5): a clean restart writes nothing per partition (it used to
fsync every segment and rewrite two checkpoints per partition: 25 s for 1,000 partitions here),
a restart after a crash fsyncs only what lay past the recovery point, and the log manager opens
and closes logs on several threads (Kafka's ``num.recovery.threads.per.data.dir``) with every
record intact."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.protocol.records import decode_batches, encode_batch
from strom.storage import LogConfig, PartitionLog, fileops
from strom.storage.dir_checkpoint import MARKER_SOURCE, RECOVERY_POINTS, read_offsets
from strom.storage.fileops import Faults
from strom.storage.manager import LogManager

from .conftest import Clock, OpenLog, batch


@pytest.fixture(autouse=True)
def no_faults_after() -> Iterator[None]:
    yield
    fileops.install(None)


def fsyncs_fail() -> Faults:
    faults = Faults(errno.EIO, frozenset({"fsync"}))
    fileops.install(faults)
    return faults


def test_a_clean_reopen_fsyncs_nothing(open_log: OpenLog) -> None:
    plog = open_log()
    for i in range(5):
        plog.append_as_leader(batch(3, start=10 * i), 0)
    plog.close()
    faults = fsyncs_fail()
    again = open_log()
    assert faults.failed == 0
    assert again.offline is None and again.log_end_offset == 15
    fileops.install(None)
    again.append_as_leader(batch(1, start=99), 0)
    again.close()
    assert open_log().log_end_offset == 16


def test_a_crash_reopen_fsyncs_what_lay_past_the_recovery_point(open_log: OpenLog) -> None:
    plog = open_log()
    plog.append_as_leader(batch(3), 0)
    plog.flush()
    plog.append_as_leader(batch(3, start=3), 0)  # past the recovery point; then "kill -9"
    for seg in plog._segments:
        seg.drop_fd()
    faults = fsyncs_fail()
    again = open_log()
    assert faults.failed > 0  # recovery read the tail: it makes it durable before trusting it
    assert again.offline is not None  # and a disk that cannot fsync takes no writes
    fileops.install(None)
    assert open_log().log_end_offset == 6


def test_the_manager_opens_and_closes_logs_on_several_threads(tmp_path: Path,
                                                              clock: Clock) -> None:
    config = LogConfig()
    manager = LogManager([tmp_path / "a", tmp_path / "b"], config, clock=clock,
                         recovery_threads=3)
    for p in range(40):
        plog = manager.create("t", p, config)
        plog.append_as_leader(encode_batch([(b"k", b"v%d" % p)], timestamp_ms=clock.now), 0)
    seen: set[str] = set()
    close = PartitionLog.close

    def recording_close(self: PartitionLog, *, sync: bool = True) -> bool:
        seen.add(threading.current_thread().name)
        return close(self, sync=sync)

    PartitionLog.close = recording_close  # type: ignore[method-assign]
    try:
        manager.close()
    finally:
        PartitionLog.close = close  # type: ignore[method-assign]
    assert len(seen) > 1 and all(n.startswith("log-recovery") for n in seen)
    again = LogManager([tmp_path / "a", tmp_path / "b"], config, clock=clock,
                       recovery_threads=3)
    logs = again.load_all()
    assert len(logs) == 40
    for (topic, p), plog in logs.items():
        assert topic == "t"
        records = list(decode_batches(plog.read(0, 1 << 20).records))
        assert [r.value for r in records] == [b"v%d" % p]
    again.close()


def _written_manager(root: Path, clock: Clock, partitions: int) -> LogManager:
    config = LogConfig()
    manager = LogManager([root / "a", root / "b"], config, clock=clock, recovery_threads=4)
    for p in range(partitions):
        plog = manager.create("t", p, config)
        plog.append_as_leader(encode_batch([(b"k", b"v%d" % p)], timestamp_ms=clock.now), 0)
        plog.high_watermark = plog.log_end_offset
    return manager


def test_stopping_a_broker_fsyncs_per_directory_not_per_log(
        tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Closing every log of a broker that wrote to all of them: ``syncfs`` per log directory
    after the data files, after the checkpoints and after the clean-shutdown markers, no
    fsync per file (a broker that had written to each of 10,000 partitions took 22.5 s to
    stop, ~7 fsyncs per log); no checkpoint moves before the data is durable and no marker
    before the checkpoints are; every log then reopens clean (no recovery) with its record."""
    if not fileops.syncfs_available():
        pytest.skip("syncfs(2) with error reporting needs Linux 5.8+")
    manager = _written_manager(tmp_path, clock, 60)
    calls: list[str] = []
    real_fsync, real_syncfs, real_os_fsync = fileops.fsync, fileops.syncfs, os.fsync
    seen_at_sync: list[tuple[int, int]] = []  # (logs checkpointed at their end, markers)
    dirs = [p for d in ("a", "b") for p in (tmp_path / d).iterdir()]

    def state() -> tuple[int, int]:
        points = {**(read_offsets(tmp_path / "a" / RECOVERY_POINTS) or {}),
                  **(read_offsets(tmp_path / "b" / RECOVERY_POINTS) or {})}
        ends = sum(1 for offset in points.values() if offset == 1)
        return ends, sum(1 for p in dirs if (p / ".clean-shutdown").exists())

    def syncfs(fd: int) -> None:
        calls.append("syncfs")
        seen_at_sync.append(state())
        real_syncfs(fd)

    monkeypatch.setattr(fileops, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd)))
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real_os_fsync(fd)))
    monkeypatch.setattr(fileops, "syncfs", syncfs)
    manager.close()
    monkeypatch.undo()
    assert calls == ["syncfs"] * 6, calls  # two directories, three steps
    assert seen_at_sync == [(0, 0), (0, 0), (60, 0), (60, 0), (60, 60), (60, 60)]
    again = LogManager([tmp_path / "a", tmp_path / "b"], LogConfig(), clock=clock)
    logs = again.load_all(defer=True)
    assert len(logs) == 60 and all(not plog.loaded for plog in logs.values())  # no recovery
    for (_, p), plog in logs.items():
        assert [r.value for r in decode_batches(plog.read(0, 1 << 20).records)] == [b"v%d" % p]
        assert plog.high_watermark == 1
    again.close()


def test_a_failed_syncfs_leaves_no_marker_so_the_next_start_recovers(
        tmp_path: Path, clock: Clock) -> None:
    if not fileops.syncfs_available():
        pytest.skip("syncfs(2) with error reporting needs Linux 5.8+")
    manager = _written_manager(tmp_path, clock, 6)
    fileops.install(Faults(errno.EIO, frozenset({"syncfs"}), str(tmp_path / "a")))
    manager.close()
    fileops.install(None)
    assert not list((tmp_path / "a").glob("*/.clean-shutdown"))
    assert list((tmp_path / "b").glob("*/.clean-shutdown"))
    again = LogManager([tmp_path / "a", tmp_path / "b"], LogConfig(), clock=clock)
    logs = again.load_all(defer=True)
    for (_, p), plog in logs.items():
        assert plog.loaded == (plog.directory.parent.name == "a")  # recovered at once
        assert [r.value for r in decode_batches(plog.read(0, 1 << 20).records)] == [b"v%d" % p]
    again.close()


def test_the_markers_are_links_to_one_file_per_directory(tmp_path: Path, clock: Clock) -> None:
    """A broker's stop marks its logs clean by hard-linking one empty file per log directory
    (no new inode per log: creating a file costs ~0.46 ms of CPU on this machine's ext4, a
    link 9 us); a log whose link cannot be made gets a file of its own."""
    if not fileops.syncfs_available():
        pytest.skip("syncfs(2) with error reporting needs Linux 5.8+")
    manager = _written_manager(tmp_path, clock, 6)
    manager.close()
    for d in ("a", "b"):
        source = os.stat(tmp_path / d / MARKER_SOURCE)
        markers = list((tmp_path / d).glob("*/.clean-shutdown"))
        assert len(markers) == 3 and source.st_nlink == 4
        assert all(os.stat(m).st_ino == source.st_ino for m in markers)
    again = LogManager([tmp_path / "a", tmp_path / "b"], LogConfig(), clock=clock)
    logs = again.load_all(defer=True)
    assert len(logs) == 6 and all(not plog.loaded for plog in logs.values())
    plog = logs[("t", 0)]
    plog.append_as_leader(encode_batch([(b"k", b"again")], timestamp_ms=clock.now), 0)
    assert not (plog.directory / ".clean-shutdown").exists()  # the link goes at the change
    assert os.stat(plog.directory.parent / MARKER_SOURCE).st_nlink == 3
    plog.close()  # one log closed alone: a marker file of its own
    assert os.stat(plog.directory / ".clean-shutdown").st_nlink == 1
    again.close()
