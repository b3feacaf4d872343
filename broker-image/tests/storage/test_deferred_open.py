"""Deferred (lazy) opens at restart (issue 21 item 5): a cleanly shut down log is opened from its
checkpoint alone and read on first use; it serves reads and appends as an eager open would,
after a clean and after an unclean restart; it keeps its clean-shutdown marker until its first
change (so a crash before that needs no recovery of it, and closing it writes nothing); a
corrupt tail is still cut when it is read; a log that was not shut down cleanly is recovered
at once."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.protocol.records import decode_batches
from strom.storage import LogConfig, PartitionLog, fileops
from strom.storage.checkpoint import CLEAN_SHUTDOWN
from strom.storage.fileops import Faults
from strom.storage.manager import LogManager

from .conftest import Clock, batch

CONFIG = LogConfig(index_interval_bytes=100, segment_bytes=1024)


@pytest.fixture(autouse=True)
def no_faults_after() -> Iterator[None]:
    yield
    fileops.install(None)


def _open(path: Path, clock: Clock, *, defer: bool = True) -> PartitionLog:
    return PartitionLog.open(path, CONFIG, topic="t", partition=0, clock=clock, defer=defer)


def _values(plog: PartitionLog, start: int = 0) -> list[bytes | None]:
    out: list[bytes | None] = []
    offset = start
    while offset < plog.log_end_offset:
        records = list(decode_batches(plog.read(offset, 1 << 20).records))
        out += [r.value for r in records]
        offset = records[-1].offset + 1
    return out


def _written(path: Path, clock: Clock, batches: int = 12) -> list[bytes | None]:
    """A log of several segments with a high watermark, closed cleanly; its values."""
    plog = _open(path, clock)
    for i in range(batches):
        plog.append_as_leader(batch(4, start=10 * i), 3)
    plog.high_watermark = plog.log_end_offset - 2
    assert plog.segment_count > 2
    values = _values(plog)
    plog.close()
    return values


def _crash(plog: PartitionLog) -> None:
    """kill -9: no close; the descriptors just go."""
    for seg in plog._open_segments():
        seg.drop_fd()


def test_a_clean_log_opens_from_its_checkpoint_and_reads_on_first_use(
        tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "t-0"
    values = _written(path, clock)
    plog = _open(path, clock)
    assert not plog.loaded
    assert (plog.log_start_offset, plog.log_end_offset, plog.high_watermark) == (0, 48, 46)
    assert plog.size_bytes == sum(p.stat().st_size for p in path.glob("*.log"))
    assert not plog.loaded  # offsets and size needed no segment
    assert _values(plog) == values  # the first read loads it
    assert plog.loaded and plog.segment_count > 2
    assert plog.epochs == [(3, 0)]
    plog.append_as_leader(batch(2, start=500), 3)
    assert plog.log_end_offset == 50
    plog.close()
    again = _open(path, clock)
    assert _values(again) == [*values, b"v" * 20 + b"500", b"v" * 20 + b"501"]
    again.close()


@pytest.mark.parametrize("part", ["_segments", "_bases", "_epochs", "_producers"])
def test_whichever_part_is_used_first_loads_the_whole_log(tmp_path: Path, clock: Clock,
                                                          part: str) -> None:
    path = tmp_path / "t-0"
    _written(path, clock)
    plog = _open(path, clock)
    assert not plog.loaded and part not in vars(plog)
    getattr(plog, part)
    assert plog.loaded
    # from now on each part is a plain instance attribute (the append path reads them)
    assert {"_segments", "_bases", "_epochs", "_producers"} <= set(vars(plog))
    assert plog._bases == [s.base_offset for s in plog._segments] and len(plog._bases) > 2
    assert plog.epochs == [(3, 0)]
    assert plog._producers.end_offset == 48  # rebuilt from the segments to the log end
    plog.close()


def test_an_append_to_a_deferred_log_loads_it_first(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "t-0"
    values = _written(path, clock)
    plog = _open(path, clock)
    with pytest.raises(Exception, match="FENCED_LEADER_EPOCH"):  # the epochs were read
        plog.append_as_leader(batch(1), 2)
    result = plog.append_as_leader(batch(1, start=900), 4)
    assert result.base_offset == 48
    assert plog.epochs == [(3, 0), (4, 48)]
    assert _values(plog) == [*values, b"v" * 20 + b"900"]


def test_an_unchanged_log_keeps_its_marker_and_its_close_writes_nothing(
        tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "t-0"
    values = _written(path, clock)
    for defer in (True, False):
        plog = _open(path, clock, defer=defer)
        assert _values(plog) == values
        plog.high_watermark = 46  # unchanged
        assert (path / CLEAN_SHUTDOWN).exists()
        before = {p.name: p.stat().st_mtime_ns for p in path.iterdir()}
        faults = Faults(errno.EIO, frozenset({"fsync", "open"}))
        fileops.install(faults)
        plog.close()
        fileops.install(None)
        assert faults.failed == 0  # nothing opened, nothing fsynced
        assert {p.name: p.stat().st_mtime_ns for p in path.iterdir()} == before


def test_a_crash_before_the_first_change_needs_no_recovery(tmp_path: Path,
                                                           clock: Clock) -> None:
    path = tmp_path / "t-0"
    values = _written(path, clock)
    plog = _open(path, clock)
    assert _values(plog) == values
    _crash(plog)  # kill -9 while it was read, never changed
    again = _open(path, clock)
    assert not again.loaded  # still clean: deferred again
    assert _values(again) == values


def test_a_crash_after_a_change_recovers_every_acknowledged_record(
        tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "t-0"
    values = _written(path, clock)
    plog = _open(path, clock)
    plog.append_as_leader(batch(3, start=700), 3)  # acknowledged, not flushed
    assert not (path / CLEAN_SHUTDOWN).exists()  # the first change removed the marker
    _crash(plog)
    again = _open(path, clock)
    assert again.loaded  # not shut down cleanly: recovered at once
    assert _values(again) == [*values, *(b"v" * 20 + b"%d" % i for i in range(700, 703))]
    again.append_as_leader(batch(1, start=800), 3)
    again.close()
    assert _values(_open(path, clock))[-1] == b"v" * 20 + b"800"


def test_a_corrupt_tail_past_the_recovery_point_is_cut_after_a_crash(
        tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "t-0"
    values = _written(path, clock)
    plog = _open(path, clock)
    plog.append_as_leader(batch(3, start=700), 3)
    _crash(plog)
    active = sorted(path.glob("*.log"))[-1]
    active.write_bytes(active.read_bytes()[:-5])  # a torn last batch
    again = _open(path, clock)
    assert again.loaded and again.log_end_offset == 48
    assert _values(again) == values
    again.append_as_leader(batch(1, start=800), 3)
    assert again.log_end_offset == 49


def test_a_corrupt_tail_of_a_deferred_log_is_cut_when_it_is_read(
        tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "t-0"
    values = _written(path, clock)
    active = sorted(path.glob("*.log"))[-1]
    active.write_bytes(active.read_bytes()[:-1])  # damaged while the broker was down
    plog = _open(path, clock)
    assert not plog.loaded and plog.log_end_offset == 48  # what the checkpoint said
    plog.load()
    assert plog.log_end_offset == 44  # the files win: the torn batch is cut
    assert plog.high_watermark <= 44
    assert _values(plog) == values[:44]
    plog.append_as_leader(batch(1, start=800), 3)
    plog.close()
    assert _open(path, clock).log_end_offset == 45


def test_the_manager_defers_clean_logs_and_reads_the_rest_in_slices(
        tmp_path: Path, clock: Clock) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, CONFIG, clock=clock, recovery_threads=3)
    for p in range(20):
        manager.create("t", p, CONFIG).append_as_leader(batch(2, start=p), 0)
    manager.close()
    crashed = LogManager(dirs, CONFIG, clock=clock)
    crashed.load_all(defer=True)
    assert len(crashed.deferred()) == 20
    written = crashed.get("t", 3)
    assert written is not None
    written.append_as_leader(batch(1, start=99), 0)  # one log changed, then kill -9
    for plog in crashed.partitions().values():
        _crash(plog)
    manager = LogManager(dirs, CONFIG, clock=clock, recovery_threads=3)
    logs = manager.load_all(defer=True)
    pending = manager.deferred()
    assert len(logs) == 20 and len(pending) == 19  # only the changed one was recovered
    again = manager.get("t", 3)
    assert again is not None and again.loaded and again.log_end_offset == 3
    while pending:
        manager.load_deferred(0.0, pending)
    assert manager.deferred() == []
    for (_, p), plog in logs.items():
        assert _values(plog)[:2] == [b"v" * 20 + b"%d" % i for i in range(p, p + 2)]
    manager.close()


def test_a_deferred_log_is_deleted_without_being_read(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "t-0"
    _written(path, clock)
    plog = _open(path, clock)
    plog.close()  # unchanged: nothing written, nothing read
    assert not plog.loaded and (path / CLEAN_SHUTDOWN).exists()
    plog.delete()
    assert not plog.loaded and not path.exists()
