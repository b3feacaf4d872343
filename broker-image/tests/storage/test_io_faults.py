"""An I/O error never lies (issue 21 item 6, issue 13 item 4): disk full, no file handle or EIO
during an append leaves nothing of that append in the log, answers KAFKA_STORAGE_ERROR, takes
the log (and its log directory) offline for writes while reads go on, and a restart finds
exactly the acknowledged records. Faults come from the storage file-system seam."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import decode_batches
from strom.storage import LogConfig, PartitionLog, fileops
from strom.storage.fileops import Faults
from strom.storage.manager import LogManager

from .conftest import OpenLog, batch


@pytest.fixture(autouse=True)
def no_faults_after() -> Iterator[None]:
    yield
    fileops.install(None)


def values(plog: PartitionLog) -> list[bytes]:
    out: list[bytes] = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20).records
        recs = list(decode_batches(data, start_offset=offset))
        out += [r.value or b"" for r in recs]
        offset = recs[-1].offset + 1
    return out


def _fault(code: int, *ops: str, after: int = 0, path: str = "") -> Faults:
    faults = Faults(code, frozenset(ops), path, after)
    fileops.install(faults)
    return faults


@pytest.mark.parametrize(("code", "ops", "config"), [
    (errno.ENOSPC, ("pwrite", "pwritev"), LogConfig()),
    (errno.EIO, ("fsync",), replace(LogConfig(), flush_messages=1)),
    (errno.EMFILE, ("open",), replace(LogConfig(), segment_bytes=200)),  # the roll's new segment
])
def test_failed_append_keeps_nothing_and_goes_offline(
        open_log: OpenLog, code: int, ops: tuple[str, ...], config: LogConfig) -> None:
    plog = open_log(config)
    acked = []
    for i in range(2):
        plog.append_as_leader(batch(2, start=10 * i), 0)
        acked += [b"v" * 20 + str(10 * i + j).encode() for j in range(2)]
    end = plog.log_end_offset
    _fault(code, *ops)
    with pytest.raises(StromError) as info:
        plog.append_as_leader(batch(3, start=99), 0)
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert errno.errorcode[code] in info.value.message
    fileops.install(None)
    assert plog.log_end_offset == end
    assert plog.offline is not None
    assert values(plog) == acked  # reads go on
    with pytest.raises(StromError, match="offline"):
        plog.append_as_leader(batch(1), 0)
    plog.close()
    reopened = open_log(config)
    assert reopened.offline is None and reopened.log_end_offset == end
    assert values(reopened) == acked
    reopened.append_as_leader(batch(1, start=50), 0)  # writable again once the disk is fixed
    assert reopened.log_end_offset == end + 1


def test_append_spanning_segments_is_all_or_nothing(open_log: OpenLog) -> None:
    plog = open_log(replace(LogConfig(), segment_bytes=300))
    plog.append_as_leader(batch(1), 0)
    big = b"".join(batch(1, start=i) for i in range(8))  # several segments' worth
    _fault(errno.ENOSPC, "pwrite", "pwritev", after=2)  # the first chunks land, then full
    with pytest.raises(StromError):
        plog.append_as_leader(big, 0)
    fileops.install(None)
    assert plog.log_end_offset == 1 and plog.segment_count == 1
    plog.close()
    assert open_log(replace(LogConfig(), segment_bytes=300)).log_end_offset == 1


@pytest.mark.parametrize("clean", [False, True])
def test_full_disk_at_open_serves_reads(open_log: OpenLog, clean: bool) -> None:
    plog = open_log()
    plog.append_as_leader(batch(3), 0)
    if clean:
        plog.close()
    else:  # a crash: recovery writes checkpoints at open
        for seg in plog._segments:
            seg.drop_fd()
    _fault(errno.ENOSPC, "write", "pwrite", "pwritev")  # checkpoints cannot be written
    reopened = open_log()
    if clean:  # a clean open writes nothing (issue 21 item 5): the first write finds out
        assert reopened.offline is None
    else:
        assert reopened.offline is not None and "ENOSPC" in reopened.offline
    assert len(values(reopened)) == 3
    with pytest.raises(StromError) as info:
        reopened.append_as_leader(batch(1), 0)
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert reopened.offline is not None and len(values(reopened)) == 3


def test_a_failed_directory_goes_offline_as_a_whole(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, LogConfig())
    told: list[Path] = []
    manager.on_dir_offline = lambda d, reason: told.append(d)
    logs = [manager.create("t", p, LogConfig()) for p in range(4)]
    in_a = [p for p in logs if p.directory.parent == dirs[0]]
    in_b = [p for p in logs if p.directory.parent == dirs[1]]
    assert len(in_a) == len(in_b) == 2
    _fault(errno.EIO, "pwrite", "pwritev", path=str(in_a[0].directory))
    with pytest.raises(StromError):
        in_a[0].append_as_leader(batch(1), 0)
    fileops.install(None)
    assert told == [dirs[0]] and set(manager.offline_dirs) == {dirs[0]}
    with pytest.raises(StromError, match="offline"):
        in_a[1].append_as_leader(batch(1), 0)
    for plog in in_b:
        plog.append_as_leader(batch(1), 0)
    again = manager.create("u", 0, LogConfig())  # new partitions go to healthy directories
    assert again.directory.parent == dirs[1]
    manager.close()




def test_a_full_directory_is_found_at_load_though_clean_opens_write_nothing(
        tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, LogConfig())
    for p in range(4):
        manager.create("t", p, LogConfig()).append_as_leader(batch(1, ts=None), 0)
    manager.close()
    _fault(errno.ENOSPC, "write", "pwrite", "pwritev", path="/b/")
    again = LogManager(dirs, LogConfig())
    logs = again.load_all()
    assert list(again.offline_dirs) == [tmp_path / "b"]
    assert "ENOSPC" in again.offline_dirs[tmp_path / "b"]
    for plog in logs.values():
        assert (plog.offline is not None) == (plog.directory.parent == tmp_path / "b")
        assert len(values(plog)) == 1
    again.close()


def test_a_slow_plan_delays_the_chosen_calls_and_fails_none(tmp_path: Path) -> None:
    """``SLOW<ms>`` in place of the errno (the hook that makes a broker's data flushes slow in
    process tests): a matching call takes that much longer and succeeds; a call on another
    path is not slowed."""
    faults = Faults.parse("SLOW150:fsync:/slow-")
    assert faults.delay_ms == 150
    fileops.install(faults)
    slowed: list[float] = []
    for name in ("slow-0", "fast-0"):
        directory = tmp_path / name
        directory.mkdir()
        fd = fileops.open(directory / "f", os.O_WRONLY | os.O_CREAT)
        try:
            fileops.write(fd, b"x")
            started = time.monotonic()
            fileops.fsync(fd)
            slowed.append(time.monotonic() - started)
        finally:
            os.close(fd)
        assert faults.failed == 1, name  # the slow-0 call only
    assert slowed[0] >= 0.15, slowed
    with pytest.raises(ValueError, match="SLOW<ms>"):
        Faults.parse("SLOWLY:fsync")
