"""A real broker whose hard open-file limit is far below 3 descriptors per partition (issue 21
item 4): with hundreds of partitions holding data in several segments each, it creates them,
takes writes and serves reads with its segment files in an LRU under the cap, recovers every
acknowledged record after kill -9, and restarts cleanly. Before the LRU each partition kept its
log and both index files open: the writes failed with EMFILE and the restart was refused."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.records import encode_batch
from strom.protocol.v1 import admin_pb2, broker_pb2
from strom.testing import BrokerProcess
from strom.testing.grpc_reads import fetch_all
from strom.transport.v1 import admin_pb2_grpc, broker_pb2_grpc

pytestmark = pytest.mark.integration

PARTITIONS = 200
NOFILE = 330  # soft = hard: 3 x 200 = 600 files would not fit
CAP = 60  # log.open.segments.max
ROUNDS = 5
RETRIABLE = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
             ErrorCode.LEADER_NOT_AVAILABLE}


class Client:
    def __init__(self, broker: BrokerProcess) -> None:
        self.channel = grpc.insecure_channel(broker.bootstrap)
        self.broker: Any = broker_pb2_grpc.BrokerStub(self.channel)  # type: ignore[no-untyped-call]
        self.admin: Any = admin_pb2_grpc.AdminStub(self.channel)  # type: ignore[no-untyped-call]

    def produce_all(self, batches: dict[int, list[bytes]], timeout: float = 60.0) -> None:
        """Produce every partition's values (one request for all), retrying partitions whose
        leader is not published yet; fail on any other error."""
        pending = dict(batches)
        deadline = time.monotonic() + timeout
        while pending:
            response = self.broker.Produce(broker_pb2.ProduceRequest(acks=1, partitions=[
                broker_pb2.PartitionProduceData(
                    topic="t", partition=p, records=encode_batch([(b"k", v) for v in values]))
                for p, values in pending.items()]), timeout=30)
            for r in response.partitions:
                if r.error_code == 0:
                    pending.pop(r.partition)
                elif r.error_code not in RETRIABLE or time.monotonic() > deadline:
                    raise AssertionError(f"partition {r.partition}: {r.error_code} "
                                         f"{r.error_message}")
            if pending:
                time.sleep(0.2)

    def read(self, partition: int) -> list[bytes]:
        return [r.value or b"" for r in fetch_all(self.broker, "t", partition, timeout=30)]

    def close(self) -> None:
        self.channel.close()


def held_files(pid: int) -> list[str]:
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return out


def check_files(broker: BrokerProcess) -> None:
    held = held_files(broker.pid)
    segments = [f for f in held if f.endswith(".log") and "/t-" in f]  # not the metadata log
    assert len(segments) <= CAP, len(segments)
    assert not [f for f in held if f.endswith((".index", ".timeindex"))]


def test_hundreds_of_partitions_under_a_small_file_limit(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, nofile=NOFILE,
                           config={"log.open.segments.max": CAP}, startup_timeout=120)
    acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}

    def write_round(client: Client, round_: int) -> None:
        batch = {p: [f"{p}-{round_}-{i}".encode() + b"x" * 300 for i in range(2)]
                 for p in range(PARTITIONS)}
        client.produce_all(batch)
        for p, values in batch.items():
            acked[p] += values

    def read_all(client: Client) -> None:
        for p in range(PARTITIONS):
            assert client.read(p) == acked[p], p

    try:
        broker.start()
        client = Client(broker)
        created = client.admin.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[
            admin_pb2.NewTopic(name="t", num_partitions=PARTITIONS, replication_factor=1,
                               configs={"segment.bytes": "2000",
                                        "index.interval.bytes": "500"})]), timeout=60)
        assert created.results[0].error_code == 0, created.results[0].error_message
        for round_ in range(ROUNDS):  # 5 x 2 x ~370 B: several segments per partition
            write_round(client, round_)
        check_files(broker)
        read_all(client)
        check_files(broker)
        client.close()

        broker.kill()  # kill -9: nothing flushed since the rolls, descriptors closed by the LRU
        broker.start()
        client = Client(broker)
        read_all(client)
        write_round(client, ROUNDS)
        check_files(broker)
        client.close()

        assert broker.terminate() == 0
        broker.start()
        client = Client(broker)
        read_all(client)
        check_files(broker)
        client.close()
        assert "Too many open files" not in broker.stderr_tail(2000)
    finally:
        broker.kill()
