"""Crash recovery: torn writes at every length, flipped bytes, damaged indexes, leftovers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strom.protocol.records import decode_batches, encode_batch
from strom.storage import LogConfig, PartitionLog

from .conftest import Clock, batch

CONFIG = LogConfig(index_interval_bytes=100)


def _write_log(path: Path, clock, batches: int = 5) -> tuple[list[int], Path]:
    """A log of ``batches`` batches, closed uncleanly; returns batch end offsets and the .log."""
    log = PartitionLog.open(path, CONFIG, topic="t", partition=0, clock=clock)
    ends = []
    for i in range(batches):
        log.append_as_leader(encode_batch([(b"k%d" % i, b"v" * 30)] * 4,
                                          timestamp_ms=1000 + i), 3)
        ends.append(log.log_end_offset)
    log.flush()
    # simulate a crash: no close(), so no clean-shutdown marker; forget the recovery point
    (path / "recovery-point-checkpoint").unlink()
    return ends, path / "00000000000000000000.log"


def _reopen(path: Path, clock) -> PartitionLog:
    return PartitionLog.open(path, CONFIG, topic="t", partition=0, clock=clock)


def _check(log: PartitionLog, end: int) -> None:
    assert log.log_end_offset == end
    assert [r.offset for r in decode_batches(log.read(0, 1 << 20).records)] == list(range(end))
    # stamped at the clock fixture's time (a producer's clock far ahead would be refused)
    log.append_as_leader(encode_batch([(b"new", b"x")], timestamp_ms=1_700_000_000_000), 3)
    assert log.log_end_offset == end + 1
    assert [r.value for r in decode_batches(log.read(end, 1 << 20).records)] == [b"x"]


def test_every_torn_length_of_last_batch(tmp_path, clock):
    ends, seg = _write_log(tmp_path / "src", clock)
    data = seg.read_bytes()
    last_start = len(data) - (len(data) // 5)  # all batches have the same size
    for cut in range(last_start, len(data)):
        d = tmp_path / f"c{cut}"
        d.mkdir()
        for f in (tmp_path / "src").iterdir():
            (d / f.name).write_bytes(f.read_bytes())
        (d / seg.name).write_bytes(data[:cut])
        _check(_reopen(d, clock), ends[-2])


def test_flipped_byte_of_last_batch_drops_it(tmp_path, clock, caplog):
    ends, seg = _write_log(tmp_path / "src", clock)
    data = seg.read_bytes()
    size = len(data) // 5
    last_start = len(data) - size
    undetectable = set(range(last_start + 12, last_start + 16))  # leader epoch: outside the CRC
    for i in range(last_start, len(data)):
        if i in undetectable:
            continue
        d = tmp_path / f"f{i}"
        d.mkdir()
        for f in (tmp_path / "src").iterdir():
            (d / f.name).write_bytes(f.read_bytes())
        broken = bytearray(data)
        broken[i] ^= 0x01 if i - last_start in (8, 9, 10, 11) else 0xFF
        (d / seg.name).write_bytes(bytes(broken))
        log = _reopen(d, clock)
        assert log.log_end_offset == ends[-2], f"byte {i - last_start} of the batch"
    assert "truncating segment" in caplog.text


def test_torn_write_in_middle_segment_deletes_later_segments(tmp_path, clock):
    config = LogConfig(segment_bytes=300)
    log = PartitionLog.open(tmp_path / "t-0", config, topic="t", partition=0, clock=clock)
    for i in range(10):
        log.append_as_leader(encode_batch([(b"k", b"v" * 40)] * 2, timestamp_ms=i), 0)
    log.flush()
    (tmp_path / "t-0" / "recovery-point-checkpoint").unlink()
    logs = sorted((tmp_path / "t-0").glob("*.log"))
    assert len(logs) > 3
    victim = logs[1]
    victim.write_bytes(victim.read_bytes()[:-5])
    again = PartitionLog.open(tmp_path / "t-0", config, topic="t", partition=0, clock=clock)
    assert again.segment_count == 2
    assert again.log_end_offset == int(logs[2].stem) - 2
    assert sorted((tmp_path / "t-0").glob("*.log")) == logs[:2]


def test_clean_shutdown_still_checks_the_tail(tmp_path, clock):
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, topic="t", partition=0, clock=clock)
    for _ in range(5):
        log.append_as_leader(encode_batch([(b"k", b"v" * 30)] * 4, timestamp_ms=clock.now), 0)
    log.close()
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    seg.write_bytes(seg.read_bytes()[:-1])
    assert _reopen(tmp_path / "t-0", clock).log_end_offset == 16


@pytest.mark.parametrize("damage", ["delete", "garble", "odd_size", "past_end", "empty"])
def test_damaged_indexes_are_rebuilt(tmp_path, clock, damage):
    config = LogConfig(segment_bytes=2000, index_interval_bytes=50)
    log = PartitionLog.open(tmp_path / "t-0", config, topic="t", partition=0, clock=clock)
    for i in range(60):
        log.append_as_leader(encode_batch([(b"k%d" % i, b"v" * 30)], timestamp_ms=1000 + i), 0)
    bases = sorted({int(p.stem) for p in (tmp_path / "t-0").glob("*.log")})
    assert len(bases) > 1
    expected = b"".join(log.read(o, 1 << 20).records for o in bases)
    log.close()
    for f in (tmp_path / "t-0").iterdir():
        if f.suffix not in (".index", ".timeindex"):
            continue
        if damage == "delete":
            f.unlink()
        elif damage == "garble":
            f.write_bytes(os.urandom(f.stat().st_size))
        elif damage == "odd_size":
            f.write_bytes(f.read_bytes() + b"\x01")
        elif damage == "past_end":
            f.write_bytes(f.read_bytes() + b"\x7f" * (8 if f.suffix == ".index" else 12))
        else:
            f.write_bytes(b"")
    again = PartitionLog.open(tmp_path / "t-0", config, topic="t", partition=0, clock=clock)
    assert again.log_end_offset == 60
    got = b"".join(again.read(o, 1 << 20).records for o in bases)
    assert got == expected
    for i in (0, 17, 59):
        assert [r.offset for r in decode_batches(again.read(i, 1).records)] == [i]
        assert again.offset_for_timestamp(1000 + i)[:2] == (i, 1000 + i)
    idx = sorted((tmp_path / "t-0").glob("*.index"))
    assert idx and all(p.stat().st_size % 8 == 0 for p in idx)
    assert any(p.stat().st_size > 0 for p in idx)


def test_leftovers_removed_and_epochs_rebuilt(tmp_path, clock):
    ends, _seg = _write_log(tmp_path / "t-0", clock)
    (tmp_path / "t-0" / "00000000000000000000.log.cleaned").write_bytes(b"junk")
    (tmp_path / "t-0" / "recovery-point-checkpoint.tmp").write_bytes(b"junk")
    (tmp_path / "t-0" / "00000000000000099999.index").write_bytes(b"")
    (tmp_path / "t-0" / "leader-epoch-checkpoint").write_text("garbage")
    log = _reopen(tmp_path / "t-0", clock)
    names = {p.name for p in (tmp_path / "t-0").iterdir()}
    assert not any(n.endswith((".cleaned", ".tmp")) for n in names)
    assert "00000000000000099999.index" not in names
    assert log.epochs == [(3, 0)]
    assert log.log_end_offset == ends[-1]


def test_a_new_epoch_is_checkpointed_by_the_next_flush_and_rebuilt_after_a_crash(
        tmp_path: Path, clock: Clock) -> None:
    """An append that starts an epoch writes no file on the request path (issue 21: two fsyncs
    per partition stalled a broker with 1,000 partitions); the next flush writes it, and a
    crash before that loses nothing: recovery rebuilds the entry from the batches."""
    directory = tmp_path / "t-0"
    checkpoint = directory / "leader-epoch-checkpoint"
    log = PartitionLog.open(directory, LogConfig(), topic="t", partition=0, clock=clock)
    log.append_as_leader(batch(2), leader_epoch=1)
    assert not checkpoint.exists()
    log.flush()
    assert checkpoint.read_text().split("\n")[2] == "1 0"
    log.append_as_leader(batch(2), leader_epoch=2)
    assert "2 2" not in checkpoint.read_text()  # not yet: no flush since
    crashed = PartitionLog.open(directory, LogConfig(), topic="t", partition=0, clock=clock)
    assert crashed.epochs == [(1, 0), (2, 2)]
    assert crashed.log_end_offset == 4


def test_epochs_started_before_a_roll_survive_a_crash(tmp_path: Path, clock: Clock) -> None:
    """A roll moves the recovery point past the rolled segment, so recovery no longer reads
    its batches: an epoch that started there must be in the checkpoint by then. Before, the
    roll wrote the recovery point but not the unsaved epochs: after kill -9 [(0, 0), (1, 3)]
    came back as [(1, 7)], and a follower asking for epoch 0's end got a wrong answer."""
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=300)
    log = PartitionLog.open(directory, config, topic="t", partition=0, clock=clock)
    for i in range(3):
        log.append_as_leader(batch(1, value=b"v" * 100, start=i), leader_epoch=0)
    for i in range(3, 8):
        log.append_as_leader(batch(1, value=b"v" * 100, start=i), leader_epoch=1)
    assert log.epochs == [(0, 0), (1, 3)] and log.recovery_point == 7
    for seg in log._segments:  # kill -9
        seg.drop_fd()
    crashed = PartitionLog.open(directory, config, topic="t", partition=0, clock=clock)
    assert crashed.epochs == [(0, 0), (1, 3)]
    assert crashed.end_offset_for_epoch(0) == (0, 3)
    assert crashed.log_end_offset == 8
