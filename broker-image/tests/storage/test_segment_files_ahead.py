"""A new partition's segment file is created ahead of its first write, in the background
(``LogManager.create_segment_files``), so a first Produce to a fresh 1,000-partition topic does
not create 1,000 files (~0.6 ms of CPU each here, issue 21); whatever happens first - the
write, a deletion, a failure - leaves the log exactly as the first write alone would."""

from __future__ import annotations

import errno
from pathlib import Path

from strom.protocol.records import decode_batches, encode_batch
from strom.storage import LogConfig, fileops
from strom.storage.fileops import Faults
from strom.storage.handles import HANDLES, MIN_CAP
from strom.storage.manager import LogManager

from .conftest import Clock


def _log_files(mgr: LogManager, topic: str, partition: int) -> list[str]:
    plog = mgr.get(topic, partition)
    assert plog is not None
    return sorted(p.name for p in plog.directory.glob("*.log"))


def test_new_logs_get_their_files_before_their_first_write(tmp_path: Path,
                                                           clock: Clock) -> None:
    mgr = LogManager([tmp_path], LogConfig(), clock=clock)
    told: list[None] = []
    mgr.on_unborn = lambda: told.append(None)
    for p in range(5):
        mgr.create("t", p, LogConfig())
    assert len(told) == 5
    assert all(_log_files(mgr, "t", p) == [] for p in range(5))  # creation stays cheap
    written = mgr.get("t", 1)
    assert written is not None
    first = encode_batch([(b"k", b"first")], timestamp_ms=clock.now)
    written.append_as_leader(first, leader_epoch=0)  # written before its turn
    mgr.delete_partition("t", 3)  # deleted before its turn: skipped
    assert mgr.create_segment_files(0.0)  # one at a time with no budget; more remain
    while mgr.create_segment_files(0.0):
        pass
    for p in (0, 1, 2, 4):
        assert _log_files(mgr, "t", p) == ["00000000000000000000.log"]
    assert not (tmp_path / "t-3").exists()
    for p in (0, 2, 4):
        plog = mgr.get("t", p)
        assert plog is not None
        later = encode_batch([(b"k", b"v%d" % p)], timestamp_ms=clock.now)
        plog.append_as_leader(later, leader_epoch=0)
    mgr.close()
    again = LogManager([tmp_path], LogConfig(), clock=clock)
    again.load_all()
    for p, value in ((0, b"v0"), (1, b"first"), (2, b"v2"), (4, b"v4")):
        plog = again.get("t", p)
        assert plog is not None and plog.log_end_offset == 1
        assert [r.value for r in decode_batches(plog.read(0, 1 << 20).records)] == [value]
    again.close()


def test_a_failed_creation_is_left_to_the_first_write(tmp_path: Path, clock: Clock) -> None:
    mgr = LogManager([tmp_path], LogConfig(), clock=clock)
    mgr.create("t", 0, LogConfig())
    fileops.install(Faults(errno.EMFILE, frozenset({"open"}), "/t-0/"))
    try:
        assert not mgr.create_segment_files(1.0)  # tried, failed quietly, not retried
    finally:
        fileops.install(None)
    assert _log_files(mgr, "t", 0) == []
    plog = mgr.get("t", 0)
    assert plog is not None and plog.offline is None  # nothing was taken offline
    records = encode_batch([(b"k", b"v")], timestamp_ms=clock.now)
    assert plog.append_as_leader(records, leader_epoch=0).base_offset == 0
    assert _log_files(mgr, "t", 0) == ["00000000000000000000.log"]
    mgr.close()


def test_a_file_created_ahead_keeps_its_descriptor_while_the_lru_has_room(
        tmp_path: Path, clock: Clock) -> None:
    """The first write to a file created ahead opens nothing (an open cost ~18 us a partition
    inside the first Produce requests to a fresh 1,000-partition topic, issue 21 item 1),
    as Kafka keeps a segment's channel from its creation; with the descriptor LRU full the
    file is closed again instead of evicting a descriptor in use."""
    before = HANDLES.cap
    HANDLES.cap = max(MIN_CAP, len(HANDLES) + 3)  # the LRU is process-wide: room for 3 more
    mgr = LogManager([tmp_path], LogConfig(), clock=clock)
    try:
        for p in range(3):
            mgr.create("t", p, LogConfig())
        while mgr.create_segment_files(1.0):
            pass
        opens = HANDLES.opens
        for p in range(3):
            plog = mgr.get("t", p)
            assert plog is not None
            plog.append_as_leader(encode_batch([(b"k", b"v%d" % p)], timestamp_ms=clock.now), 0)
        assert HANDLES.opens == opens  # no first write opened its file
        for p in range(3, MIN_CAP + 3):  # fill the LRU with descriptors in use
            if not HANDLES.has_room():
                break
            mgr.create("t", p, LogConfig())
            plog = mgr.get("t", p)
            assert plog is not None
            plog.append_as_leader(encode_batch([(b"k", b"v")], timestamp_ms=clock.now), 0)
        assert not HANDLES.has_room()
        evictions, opens = HANDLES.evictions, HANDLES.opens
        mgr.create("u", 0, LogConfig())
        while mgr.create_segment_files(1.0):
            pass
        assert _log_files(mgr, "u", 0) == ["00000000000000000000.log"]
        assert (HANDLES.evictions, HANDLES.opens) == (evictions, opens)  # none closed for it
        plog = mgr.get("u", 0)
        assert plog is not None
        plog.append_as_leader(encode_batch([(b"k", b"u")], timestamp_ms=clock.now), 0)
        assert HANDLES.opens == opens + 1  # its first write opens it
    finally:
        mgr.close()
        HANDLES.cap = before
