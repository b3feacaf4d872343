"""Bounded open files (issue 21 item 4): indexes hold no descriptor, segment files sit in an LRU
with a cap, and logs whose files were closed by it read and write correctly, survive a restart,
and survive a crash (files left unflushed and closed by eviction)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from strom.protocol.records import decode_batches, encode_batch
from strom.storage import LogConfig, PartitionLog, fileops
from strom.storage.fileops import Faults
from strom.storage.handles import HANDLES, MIN_CAP, FileHandles

from .conftest import Clock

CAP = MIN_CAP
LOGS = 2 * CAP


@pytest.fixture
def small_cap() -> Iterator[None]:
    before = HANDLES.cap
    HANDLES.cap = CAP
    yield
    HANDLES.cap = before


def open_files_under(root: Path) -> list[str]:
    """Paths under ``root`` this process holds open."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root)):
            out.append(target)
    return out


def values(plog: PartitionLog) -> list[bytes]:
    out: list[bytes] = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        recs = list(decode_batches(plog.read(offset, 1 << 20).records, start_offset=offset))
        out += [r.value or b"" for r in recs]
        offset = recs[-1].offset + 1
    return out


def record(p: int, i: int) -> bytes:
    return b"p%d-r%d-" % (p, i) + b"x" * 200


def append(plog: PartitionLog, p: int, i: int) -> None:
    plog.append_as_leader(encode_batch([(b"k", record(p, i))], timestamp_ms=1_000 + i), 0)


def open_all(root: Path, config: LogConfig, clock: Clock) -> list[PartitionLog]:
    return [PartitionLog.open(root / f"t-{p}", config, topic="t", partition=p, clock=clock)
            for p in range(LOGS)]


# index_interval_bytes small and segments small: every log has several segments with
# index entries, so indexes would hold descriptors if they kept any
CONFIG = replace(LogConfig(), index_interval_bytes=300, segment_bytes=2_500)


def test_many_logs_stay_under_the_cap_and_read_back(tmp_path: Path, clock: Clock,
                                                    small_cap: None) -> None:
    logs = open_all(tmp_path, CONFIG, clock)
    for i in range(14):
        for p, plog in enumerate(logs):
            append(plog, p, i)
        held = open_files_under(tmp_path)
        assert len(held) <= CAP, held
        assert not [h for h in held if h.endswith((".index", ".timeindex"))], held
    assert all(plog.segment_count > 1 for plog in logs)
    for p, plog in enumerate(logs):  # every read after eviction reopens the right file
        assert values(plog) == [record(p, i) for i in range(14)]
        assert plog.offset_for_timestamp(1_009)[:2] == (9, 1_009)
        assert len(open_files_under(tmp_path)) <= CAP
    for plog in logs:
        plog.close()
    assert open_files_under(tmp_path) == []
    again = open_all(tmp_path, CONFIG, clock)
    for p, plog in enumerate(again):
        assert values(plog) == [record(p, i) for i in range(14)]
        append(plog, p, 14)  # writable after a restart
        assert len(open_files_under(tmp_path)) <= CAP
    for plog in again:
        plog.close()


def test_a_crash_after_evictions_keeps_every_record(tmp_path: Path, clock: Clock,
                                                    small_cap: None) -> None:
    """Nothing flushed, files closed by the LRU, then the logs are dropped without a close
    (the process dies): recovery finds every record and rebuilds the unwritten indexes."""
    logs = open_all(tmp_path, CONFIG, clock)
    for i in range(11):
        for p, plog in enumerate(logs):
            append(plog, p, i)
    assert HANDLES.evictions > 0
    for plog in logs:  # what kill -9 leaves: no checkpoint, no marker; drop the descriptors
        for seg in plog._segments:
            seg.drop_fd()
    again = open_all(tmp_path, CONFIG, clock)
    for p, plog in enumerate(again):
        assert values(plog) == [record(p, i) for i in range(11)]
        assert plog.offset_for_timestamp(1_007)[:2] == (7, 1_007)
    for plog in again:
        plog.close()


class _Owner:
    def __init__(self, log: list[int], n: int) -> None:
        self.log, self.n = log, n

    def drop_fd(self) -> None:
        self.log.append(self.n)


def test_the_lru_evicts_the_least_recently_used() -> None:
    closed: list[int] = []
    handles = FileHandles(CAP)
    owners = [_Owner(closed, n) for n in range(CAP + 3)]
    for owner in owners[:CAP]:
        handles.opened(owner)
    handles.touch(owners[0])
    for owner in owners[CAP:]:
        handles.opened(owner)
    assert closed == [1, 2, 3]
    assert len(handles) == CAP and handles.evictions == 3
    handles.closed(owners[0])
    assert len(handles) == CAP - 1
    handles.cap = CAP  # unchanged: nothing more evicted
    assert closed == [1, 2, 3]


def test_a_new_segments_index_flush_only_appends(tmp_path: Path, clock: Clock) -> None:
    """A new segment's index files are known not to exist: flushing them writes the entries and
    never cuts a file (an empty index passed to the segment used to be replaced, being falsy,
    by one that assumed stale bytes on disk)."""
    plog = PartitionLog.open(tmp_path / "t-0", CONFIG, topic="t", partition=0, clock=clock)
    for i in range(5):
        append(plog, 0, i)
    fileops.install(Faults(errno.EIO, frozenset({"ftruncate"})))
    try:
        plog.flush()
    finally:
        fileops.install(None)
    assert (tmp_path / "t-0" / "00000000000000000000.index").stat().st_size > 0
    plog.close()


def test_a_new_partition_creates_its_segment_file_at_the_first_write(tmp_path: Path,
                                                                      clock: Clock) -> None:
    """Creating 10,000 partitions spent a third of its file-system time on empty segment
    files: a new log is a directory until something is written."""
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(directory, CONFIG, topic="t", partition=0, clock=clock)
    assert list(directory.glob("*.log")) == []
    assert plog.read(0, 1000).records == b""
    plog.close()
    plog = PartitionLog.open(directory, CONFIG, topic="t", partition=0, clock=clock)
    assert list(directory.glob("*.log")) == []  # a restart of a never-written log creates none
    append(plog, 0, 0)
    assert [p.name for p in directory.glob("*.log")] == ["00000000000000000000.log"]
    plog.close()
    again = PartitionLog.open(directory, CONFIG, topic="t", partition=0, clock=clock)
    assert values(again) == [record(0, 0)]
    again.close()
