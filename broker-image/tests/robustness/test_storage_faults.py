"""A real broker whose second log directory fails writes (``STROM_FAULT_FS``, the storage
file-system seam): a multi-partition Produce answers KAFKA_STORAGE_ERROR for the partitions in
the failed directory only, the others are written; the directory goes offline (metrics,
DescribeCluster); reads go on; no traceback per request; a restart finds exactly the acknowledged
records; a broker whose directory is full still starts and serves reads."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.records import encode_batch
from strom.protocol.v1 import admin_pb2, broker_pb2
from strom.storage import fileops
from strom.testing import BrokerProcess
from strom.testing.grpc_reads import fetch_all
from strom.transport.v1 import admin_pb2_grpc, broker_pb2_grpc

pytestmark = pytest.mark.integration

PARTITIONS = 4


class Client:
    def __init__(self, broker: BrokerProcess) -> None:
        self.channel = grpc.insecure_channel(broker.bootstrap)
        self.broker: Any = broker_pb2_grpc.BrokerStub(self.channel)  # type: ignore[no-untyped-call]
        self.admin: Any = admin_pb2_grpc.AdminStub(self.channel)  # type: ignore[no-untyped-call]

    def produce(self, batches: dict[int, list[bytes]]) -> dict[int, tuple[int, str]]:
        response = self.broker.Produce(broker_pb2.ProduceRequest(acks=1, partitions=[
            broker_pb2.PartitionProduceData(topic="t", partition=p,
                                            records=encode_batch([(None, v) for v in values]))
            for p, values in batches.items()]), timeout=10)
        return {r.partition: (r.error_code, r.error_message) for r in response.partitions}

    def read(self, partition: int) -> list[bytes]:
        return [r.value or b"" for r in fetch_all(self.broker, "t", partition)]

    def close(self) -> None:
        self.channel.close()


def test_log_dir_failure_is_per_partition_offline_and_truthful(tmp_path: Path) -> None:
    good, bad = tmp_path / "d0", tmp_path / "d1"
    config = {"log.dirs": f"{good},{bad}"}
    faulty = {fileops.ENV: f"ENOSPC:pwrite,pwritev:/{bad.name}/"}
    broker = BrokerProcess(tmp_path, config=config, env=faulty)
    acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    try:
        broker.start()
        client = Client(broker)
        created = client.admin.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[
            admin_pb2.NewTopic(name="t", num_partitions=PARTITIONS, replication_factor=1)]),
            timeout=10)
        assert created.results[0].error_code == 0, created.results[0].error_message
        in_bad = {p for p in range(PARTITIONS) if (bad / f"t-{p}").is_dir()}
        assert in_bad and len(in_bad) < PARTITIONS
        for round_ in range(30):
            batch = {p: [f"{p}-{round_}-{i}".encode() for i in range(3)]
                     for p in range(PARTITIONS)}
            answers = client.produce(batch)
            for p, (code, message) in answers.items():
                if p in in_bad:
                    assert code == ErrorCode.KAFKA_STORAGE_ERROR, (p, code, message)
                else:
                    assert code == 0, (p, code, message)
                    acked[p] += batch[p]
        for p in range(PARTITIONS):
            assert client.read(p) == acked[p]
        described = client.admin.DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=10)
        assert [d.split(":")[0] for d in described.offline_log_dirs] == [str(bad)]
        assert "ENOSPC" in described.offline_log_dirs[0]
        metrics = urllib.request.urlopen(broker.metrics_url, timeout=5).read().decode()
        assert f'strom_log_dir_offline{{dir="{bad}"}} 1.0' in metrics
        assert f'strom_log_dir_offline{{dir="{good}"}} 0.0' in metrics
        assert "strom_broker_offline_log_dirs 1.0" in metrics
        assert broker.is_ready()
        stderr = broker.stderr_path.read_text()
        assert "Traceback" not in stderr
        assert stderr.count("produce to t-") <= 2 * len(in_bad)  # rate-limited, not per request
        client.close()
        broker.stop()

        # The disk is fixed: exactly the acknowledged records, and writes work again.
        broker = BrokerProcess(tmp_path, config=config, port=broker.port,
                               metrics_port=broker.metrics_port)
        broker.start()
        client = Client(broker)
        for p in range(PARTITIONS):
            assert client.read(p) == acked[p]
        answers = client.produce({p: [b"after"] for p in range(PARTITIONS)})
        assert all(code == 0 for code, _ in answers.values()), answers
        for p in range(PARTITIONS):
            acked[p].append(b"after")
        client.close()
        broker.stop()

        # A full disk (checkpoints cannot be written either): it starts and serves reads.
        full = {fileops.ENV: f"ENOSPC:write,pwrite,pwritev:/{bad.name}/"}
        broker = BrokerProcess(tmp_path, config=config, env=full, port=broker.port,
                               metrics_port=broker.metrics_port)
        broker.start()
        client = Client(broker)
        # Reported to the controller before the broker was unfenced (it was ready).
        described = client.admin.DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=10)
        [me] = described.brokers
        assert [d.split(":")[0] for d in me.offline_log_dirs] == [str(bad)], described
        for p in range(PARTITIONS):
            assert client.read(p) == acked[p]
        answers = client.produce({p: [b"full"] for p in range(PARTITIONS)})
        for p, (code, _) in answers.items():
            assert code == (ErrorCode.KAFKA_STORAGE_ERROR if p in in_bad else 0)
        assert "Traceback" not in broker.stderr_path.read_text()
        client.close()
    finally:
        broker.stop()


def test_an_offline_log_dir_is_reported_again_after_registering_again(tmp_path: Path) -> None:
    """A new registration of a broker clears its offline directories in the metadata (a new
    incarnation reopens its logs); when the controller stops knowing this broker's registration
    (its heartbeat answered STALE_BROKER_EPOCH) the broker registers again with the same logs,
    one still failed, so it must report that directory again - or the controller would lead
    and elect replicas there as if they were online."""
    import asyncio
    import time
    import uuid

    from strom.controller.metadata import Endpoint, RegisterBroker, encode_command
    from strom.controller.quorum_client import QuorumClient

    good, bad = tmp_path / "d0", tmp_path / "d1"
    broker = BrokerProcess(tmp_path, config={"log.dirs": f"{good},{bad}"},
                           env={fileops.ENV: f"ENOSPC:pwrite,pwritev:/{bad.name}/"})
    try:
        broker.start()
        client = Client(broker)
        created = client.admin.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[
            admin_pb2.NewTopic(name="t", num_partitions=PARTITIONS, replication_factor=1)]),
            timeout=10)
        assert created.results[0].error_code == 0, created.results[0].error_message
        client.produce({p: [b"x"] for p in range(PARTITIONS)})  # the bad directory fails

        def offline_dirs() -> list[str]:
            described = client.admin.DescribeCluster(admin_pb2.DescribeClusterRequest(),
                                                     timeout=10)
            # a fresh registration is fenced (not listed) until its first heartbeat
            return [d.split(":")[0] for me in described.brokers for d in me.offline_log_dirs]

        def wait_offline(what: str) -> None:
            deadline = time.monotonic() + 30
            while offline_dirs() != [str(bad)]:
                assert time.monotonic() < deadline, f"{what}\n{broker.stderr_tail()}"
                time.sleep(0.2)

        wait_offline("the failed directory was never reported")

        # Another registration of broker 0 (a new incarnation, as after a restart elsewhere):
        # the metadata clears broker 0's offline directories and its heartbeats go stale.
        async def register_elsewhere() -> None:
            async with QuorumClient({0: broker.bootstrap}) as quorum:
                await quorum.propose(encode_command(RegisterBroker(
                    0, uuid.uuid4().hex, (Endpoint("PLAINTEXT", "127.0.0.1", 1),))))

        asyncio.run(register_elsewhere())
        deadline = time.monotonic() + 30
        while "registering again" not in broker.stderr_path.read_text():
            assert time.monotonic() < deadline, broker.stderr_tail()
            time.sleep(0.1)
        wait_offline("the directory was not reported again after registering again")
        stderr = broker.stderr_path.read_text()
        assert stderr.count("reported offline log directories") >= 2, stderr[-3000:]
        assert broker.is_ready()
        client.close()
    finally:
        broker.stop()
