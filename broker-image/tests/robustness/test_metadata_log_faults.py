"""The metadata log's directory fails (the first ``log.dirs`` entry, which holds ``__raft``):
the broker stops with one clear line and exit status 1 - as Kafka's broker halts when its
metadata log directory fails - instead of a traceback, a hang or a zombie; in a cluster the
other brokers fence it and take over its leaderships, and nothing acknowledged is lost.

The disk is "filled" through the storage file-system seam (``STROM_FAULT_FS`` on the
``__raft`` files, active while the ``STROM_FAULT_FS_WHEN`` file exists)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from strom.client import Consumer, Producer
from strom.client.models import TopicPartition
from strom.controller.messages import LogEntry
from strom.controller.raftlog import DiskRaftLog, MetadataLogError
from strom.storage import fileops
from strom.testing import BrokerProcess
from strom.testing.cluster import Cluster
from strom.testing.process import ProcessStartError

FULL_RAFT = "ENOSPC:write,fsync,ftruncate:/__raft/"
MESSAGE = "the metadata log directory"


def test_a_failed_append_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    log = DiskRaftLog(tmp_path / "__raft")
    log.load()
    log.append((LogEntry(1, 1, b"a"),))
    fileops.install(fileops.Faults.parse("ENOSPC:fsync:/__raft/"))
    try:
        with pytest.raises(MetadataLogError) as raised:
            log.append((LogEntry(1, 2, b"b"),))
        with pytest.raises(MetadataLogError):
            log.save_hard_state(2, 0)
    finally:
        fileops.install(None)
    assert "No space left on device" in raised.value.message
    assert str(tmp_path / "__raft") in raised.value.message
    again = DiskRaftLog(tmp_path / "__raft").load()
    assert [e.command for e in again.entries] == [b"a"]  # nothing half-written survived


@pytest.mark.integration
def test_a_broker_whose_metadata_log_disk_is_full_exits_cleanly(tmp_path: Path) -> None:
    flag = tmp_path / "disk-full"
    flag.touch()
    broker = BrokerProcess(tmp_path, env={fileops.ENV: FULL_RAFT, fileops.WHEN_ENV: str(flag)},
                           startup_timeout=30)
    try:
        started = time.monotonic()
        with pytest.raises(ProcessStartError):
            broker.start()
        assert broker.wait_stopped(10)
        assert broker.returncode == 1
        assert time.monotonic() - started < 30
        stderr = broker.stderr_path.read_text()
        assert MESSAGE in stderr and "No space left on device" in stderr, stderr[-2000:]
        assert "Traceback" not in stderr, stderr[-3000:]
    finally:
        broker.stop()


@pytest.mark.integration
def test_a_running_broker_whose_metadata_log_fails_stops_and_the_others_take_over(
        tmp_path: Path) -> None:
    flag = tmp_path / "disk-full"
    cluster = Cluster(tmp_path, 3, env={2: {fileops.ENV: FULL_RAFT,
                                            fileops.WHEN_ENV: str(flag)}})
    try:
        cluster.start()
        with cluster.admin() as admin:
            admin.create_topic("t", partitions=3, replication_factor=3)
        for p in range(3):
            cluster.wait_for_isr("t", p, 3, timeout=30)
        sent: dict[int, list[bytes]] = {p: [] for p in range(3)}
        with Producer(cluster.bootstrap, acks="all", retries=50) as producer:
            for p in range(3):
                producer.send("t", f"before-{p}".encode(), partition=p).result(timeout=30)
                sent[p].append(f"before-{p}".encode())
            flag.touch()  # broker 2's metadata log disk is full from now on
            with cluster.admin() as admin:  # a metadata change broker 2 must persist
                admin.create_topic("u", partitions=1, replication_factor=3)
            victim = cluster.brokers[2]
            assert victim.wait_stopped(30), "broker 2 kept running on a failed metadata log"
            assert victim.returncode == 1
            stderr = victim.stderr_path.read_text()
            assert MESSAGE in stderr and "No space left on device" in stderr, stderr[-2000:]
            assert "exits with status 1" in stderr
            assert "Traceback" not in stderr, stderr[-3000:]
            for p in range(3):
                cluster.wait_until(lambda p=p: cluster.leader_of("t", p, via=0) in (0, 1)
                                   or None, timeout=30, what=f"a live leader of t-{p}")
            for p in range(3):
                producer.send("t", f"after-{p}".encode(), partition=p).result(timeout=30)
                sent[p].append(f"after-{p}".encode())
        with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
            for p in range(3):
                consumer.assign([TopicPartition("t", p)])
                got: list[bytes] = []
                for _ in range(60):
                    got += [r.value or b"" for r in consumer.poll(timeout_ms=500)]
                    if len(got) >= len(sent[p]):
                        break
                assert got == sent[p]
        assert all(cluster.brokers[b].is_ready() for b in (0, 1))
    finally:
        cluster.stop()
