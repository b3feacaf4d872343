"""A real broker's stop writes one checkpoint file per log directory and no file per log (issue
21 item 5: three new files per changed log made a stop of 10,000 partitions take ~25 s), and
every acknowledged record survives a clean restart, a kill -9 and a clean restart after it; an
idempotent producer's retry after the restart is still answered with its original offset
(its partition alone got a producer snapshot). The leader epochs go into the directory's
``leader-epochs-checkpoint`` (no ``leader-epoch-checkpoint`` per log at a stop) and come back:
ListOffsets earliest answers the same epoch after every restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from strom.protocol.records import BatchBuilder, encode_batch
from strom.protocol.v1 import admin_pb2, broker_pb2
from strom.storage.checkpoint import CLEAN_SHUTDOWN, RECOVERY_CHECKPOINT
from strom.storage.dir_checkpoint import (
    FILES,
    LEADER_EPOCHS,
    MARKER_TEXT,
    NO_PRODUCERS,
    read_epochs,
    read_offsets,
)
from strom.storage.epoch import FILE_NAME as EPOCH_FILE
from strom.testing import BrokerProcess
from strom.testing.grpc_reads import fetch_all
from strom.testing.waits import wait_until
from strom.transport.v1 import admin_pb2_grpc, broker_pb2_grpc

pytestmark = pytest.mark.integration

PARTITIONS = 24
PRODUCER = 0  # the partition an idempotent producer writes to


def idempotent_batch() -> bytes:
    b = BatchBuilder(batch_size=1 << 20, producer_id=11, producer_epoch=0, base_sequence=0)
    b.append(b"k", b"once", 1_700_000_000_000)
    return b.build()


class Broker:
    """The broker process and a gRPC channel to it, with what was acknowledged."""

    def __init__(self, process: BrokerProcess) -> None:
        self.process = process
        self.acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.channel: grpc.Channel | None = None

    def start(self) -> Any:
        self.process.start()
        self.channel = grpc.insecure_channel(self.process.bootstrap)
        return broker_pb2_grpc.BrokerStub(self.channel)  # type: ignore[no-untyped-call]

    def drop_channel(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None

    def produce(self, stub: Any, partition: int, records: bytes) -> int:
        """The base offset; retried while the restarted broker has not published the
        partition yet (bounded)."""
        answer: list[Any] = []

        def sent() -> bool:
            response = stub.Produce(broker_pb2.ProduceRequest(acks=1, partitions=[
                broker_pb2.PartitionProduceData(topic="t", partition=partition,
                                                records=records)]), timeout=30)
            answer[:] = list(response.partitions)
            return answer[0].error_code == 0

        wait_until(sent, 60, what=f"an acknowledged write to t-{partition} ({answer})",
                   interval_s=0.1)
        return int(answer[0].base_offset)

    def write_round(self, stub: Any, round_: int) -> None:
        for p in range(PARTITIONS):
            values = [f"{p}-{round_}-{i}".encode() for i in range(3)]
            self.produce(stub, p, encode_batch([(b"k", v) for v in values]))
            self.acked[p] += values

    def check_all(self, stub: Any) -> None:
        for p in range(PARTITIONS):
            assert [r.value for r in fetch_all(stub, "t", p, timeout=30)] == self.acked[p], p


def earliest_epochs(stub: Any) -> list[int]:
    """Each partition's ListOffsets earliest leader epoch (from its epoch cache; -1 unknown)."""
    answer = stub.ListOffsets(broker_pb2.ListOffsetsRequest(partitions=[
        broker_pb2.ListOffsetsPartition(topic="t", partition=p, timestamp=-2)
        for p in range(PARTITIONS)]), timeout=30)
    assert all(r.error_code == 0 for r in answer.partitions), answer
    return [r.leader_epoch for r in sorted(answer.partitions, key=lambda r: r.partition)]


def test_stop_writes_directory_checkpoints_and_every_record_survives(tmp_path: Path) -> None:
    broker = Broker(BrokerProcess(tmp_path, startup_timeout=120))
    try:
        stub = broker.start()
        admin: Any = admin_pb2_grpc.AdminStub(broker.channel)  # type: ignore[no-untyped-call]
        created = admin.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[admin_pb2.NewTopic(
            name="t", num_partitions=PARTITIONS, replication_factor=1)]), timeout=60)
        assert created.results[0].error_code == 0, created.results[0].error_message
        broker.write_round(stub, 0)
        once = broker.produce(stub, PRODUCER, idempotent_batch())
        broker.acked[PRODUCER].append(b"once")
        epochs = earliest_epochs(stub)
        assert min(epochs) >= 0, epochs
        broker.drop_channel()
        assert broker.process.terminate() == 0

        log_dir = broker.process.log_dir
        for name in (*FILES, NO_PRODUCERS, LEADER_EPOCHS):
            assert (log_dir / name).exists(), name
        rows = read_epochs(log_dir / LEADER_EPOCHS) or {}
        assert sorted(p for _, p in rows) == list(range(PARTITIONS))
        free = read_offsets(log_dir / NO_PRODUCERS) or {}
        assert sorted(p for _, p in free) == [p for p in range(PARTITIONS) if p != PRODUCER]
        for p in range(PARTITIONS):
            path = log_dir / f"t-{p}"
            assert not (path / RECOVERY_CHECKPOINT).exists()
            assert not (path / EPOCH_FILE).exists()  # in the directory's file
            assert len(list(path.glob("*.snapshot"))) == (p == PRODUCER)
            assert (path / CLEAN_SHUTDOWN).read_bytes() == MARKER_TEXT

        stub = broker.start()  # clean restart
        broker.check_all(stub)
        assert earliest_epochs(stub) == epochs
        assert broker.produce(stub, PRODUCER, idempotent_batch()) == once  # a retry: no copy
        broker.check_all(stub)
        broker.write_round(stub, 1)
        broker.drop_channel()

        broker.process.kill()  # kill -9 with every partition changed since the start
        stub = broker.start()
        broker.check_all(stub)
        assert earliest_epochs(stub) == epochs
        broker.write_round(stub, 2)
        broker.drop_channel()
        assert broker.process.terminate() == 0

        stub = broker.start()
        broker.check_all(stub)
        assert earliest_epochs(stub) == epochs
        broker.drop_channel()
    finally:
        broker.drop_channel()
        broker.process.kill()
