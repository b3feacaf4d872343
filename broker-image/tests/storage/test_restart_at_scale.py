"""Restart at scale (issue 21 item 5): a clean restart writes nothing per partition (it used to
fsync every segment and rewrite two checkpoints per partition: 25 s for 1,000 partitions here),
a restart after a crash fsyncs only what lay past the recovery point, and the log manager opens
and closes logs on several threads (Kafka's ``num.recovery.threads.per.data.dir``) with every
record intact."""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.protocol.records import decode_batches, encode_batch
from strom.storage import LogConfig, PartitionLog, fileops
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

    def recording_close(self: PartitionLog) -> None:
        seen.add(threading.current_thread().name)
        close(self)

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
