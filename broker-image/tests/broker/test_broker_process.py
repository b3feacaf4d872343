"""A real broker process over gRPC: data path, errors on the wire, restarts, kill -9, SIGTERM,
metrics and health endpoints. Every test stops the process it starts (running_broker)."""

from __future__ import annotations

import concurrent.futures
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import decode_batches, encode_batch
from strom.protocol.v1 import admin_pb2, broker_pb2
from strom.storage.checkpoint import CLEAN_SHUTDOWN
from strom.testing import BrokerProcess, BrokerStartError, free_port, running_broker
from strom.testing.grpc_reads import fetch_all
from strom.testing.waits import wait_until
from strom.transport.status import from_rpc_error
from strom.transport.v1 import admin_pb2_grpc, broker_pb2_grpc

pytestmark = pytest.mark.integration


class Stubs:
    def __init__(self, broker: BrokerProcess) -> None:
        self.channel = grpc.insecure_channel(broker.bootstrap)
        self.broker: Any = broker_pb2_grpc.BrokerStub(self.channel)  # type: ignore[no-untyped-call]
        self.admin: Any = admin_pb2_grpc.AdminStub(self.channel)  # type: ignore[no-untyped-call]

    def create(self, name: str, partitions: int = 1, **configs: str) -> None:
        response = self.admin.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[
            admin_pb2.NewTopic(name=name, num_partitions=partitions, replication_factor=1,
                               configs={k.replace("_", "."): v for k, v in configs.items()})]),
            timeout=10)
        assert response.results[0].error_code == 0, response.results[0].error_message

    def produce(self, topic: str, values: list[bytes], partition: int = 0, acks: int = 1,
                timestamp_ms: int | None = None) -> broker_pb2.PartitionProduceResponse:
        response = self.broker.Produce(broker_pb2.ProduceRequest(acks=acks, partitions=[
            broker_pb2.PartitionProduceData(
                topic=topic, partition=partition,
                records=encode_batch([(None, v) for v in values], timestamp_ms=timestamp_ms))]),
            timeout=10)
        part: broker_pb2.PartitionProduceResponse = response.partitions[0]
        return part

    def fetch_all(self, topic: str, partition: int = 0) -> list[tuple[int, bytes | None]]:
        return [(r.offset, r.value) for r in fetch_all(self.broker, topic, partition)]

    def end_offset(self, topic: str, partition: int = 0) -> int:
        response = self.broker.ListOffsets(broker_pb2.ListOffsetsRequest(partitions=[
            broker_pb2.ListOffsetsPartition(topic=topic, partition=partition, timestamp=-1)]),
            timeout=10)
        return int(response.partitions[0].offset)

    def close(self) -> None:
        self.channel.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path) as b:
        yield b


@pytest.fixture
def stubs(broker: BrokerProcess) -> Iterator[Stubs]:
    s = Stubs(broker)
    yield s
    s.close()


def _wire_error(call: object) -> StromError:
    assert isinstance(call, grpc.RpcError)
    return from_rpc_error(call)


def test_create_produce_fetch(stubs: Stubs) -> None:
    stubs.create("orders", 3)
    assert stubs.produce("orders", [b"a", b"b"], partition=2).base_offset == 0
    assert stubs.produce("orders", [b"c"], partition=2).base_offset == 2
    assert stubs.fetch_all("orders", 2) == [(0, b"a"), (1, b"b"), (2, b"c")]
    metadata = stubs.broker.Metadata(broker_pb2.MetadataRequest(topics=["orders"]), timeout=10)
    assert [p.leader for p in metadata.topics[0].partitions] == [0, 0, 0]


def test_long_poll_wakes_on_produce(stubs: Stubs, broker: BrokerProcess) -> None:
    stubs.create("poll")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        future = pool.submit(stubs.broker.Fetch, broker_pb2.FetchRequest(
            min_bytes=1, max_wait_ms=20_000, partitions=[
                broker_pb2.FetchPartition(topic="poll", partition=0, fetch_offset=0)]),
            timeout=30)
        wait_until(lambda: _inflight(broker) == 1, 10, what="the fetch to be in the long poll")
        assert not future.done()
        stubs.produce("poll", [b"wake"])
        response = future.result(timeout=10)
    assert time.monotonic() - started < 10
    assert [r.value for r in decode_batches(response.partitions[0].records)] == [b"wake"]


def test_list_offsets_by_time(stubs: Stubs) -> None:
    stubs.create("times")
    for ts in (10_000, 20_000, 30_000):
        stubs.produce("times", [b"x"], timestamp_ms=ts)
    response = stubs.broker.ListOffsets(broker_pb2.ListOffsetsRequest(partitions=[
        broker_pb2.ListOffsetsPartition(topic="times", partition=0, timestamp=t)
        for t in (15_000, 30_000, 40_000, -2, -1, -3)]), timeout=10)
    assert [(p.offset, p.timestamp) for p in response.partitions] == [
        (1, 20_000), (2, 30_000), (-1, -1), (0, -1), (3, -1), (2, 30_000)]


def test_invalid_requests_get_codes_and_change_nothing(stubs: Stubs) -> None:
    stubs.create("safe", max_message_bytes="1000")
    stubs.produce("safe", [b"ok"])
    good = encode_batch([(None, b"x")])
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    cases = [
        ("unknown", 0, good, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("safe", 9, good, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("safe", 0, bytes(bad_crc), ErrorCode.CORRUPT_MESSAGE),
        ("safe", 0, b"\xde\xad\xbe\xef" * 64, ErrorCode.CORRUPT_MESSAGE),
        ("safe", 0, encode_batch([(None, b"y" * 5000)]), ErrorCode.MESSAGE_TOO_LARGE),
    ]
    for topic, partition, records, code in cases:
        response = stubs.broker.Produce(broker_pb2.ProduceRequest(acks=1, partitions=[
            broker_pb2.PartitionProduceData(topic=topic, partition=partition,
                                            records=records)]), timeout=10)
        part = response.partitions[0]
        assert part.error_code == code, (topic, partition, part.error_message)
        assert part.error_message
    assert stubs.end_offset("safe") == 1

    fetch = stubs.broker.Fetch(broker_pb2.FetchRequest(partitions=[
        broker_pb2.FetchPartition(topic="safe", partition=0, fetch_offset=-3)]), timeout=10)
    assert fetch.partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert "[0, 1]" in fetch.partitions[0].error_message

    with pytest.raises(grpc.RpcError) as info:
        stubs.broker.Produce(broker_pb2.ProduceRequest(acks=5, partitions=[
            broker_pb2.PartitionProduceData(topic="safe", partition=0, records=good)]),
            timeout=10)
    err = _wire_error(info.value)
    assert err.code == ErrorCode.INVALID_REQUIRED_ACKS and "acks=5" in err.message
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    with pytest.raises(grpc.RpcError) as info:
        stubs.broker.Fetch(broker_pb2.FetchRequest(min_bytes=-1), timeout=10)
    assert _wire_error(info.value).code == ErrorCode.INVALID_FETCH_SIZE

    with pytest.raises(grpc.RpcError) as info:
        stubs.broker.Produce(broker_pb2.ProduceRequest(acks=1, partitions=[
            broker_pb2.PartitionProduceData(topic="", partition=0, records=good)]), timeout=10)
    assert _wire_error(info.value).code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert stubs.end_offset("safe") == 1


def test_restart_keeps_data_topics_and_configs(broker: BrokerProcess) -> None:
    stubs = Stubs(broker)
    stubs.create("keep", 2, retention_ms="123456")
    stubs.produce("keep", [b"1", b"2"], partition=1)
    cluster_id = stubs.admin.DescribeCluster(admin_pb2.DescribeClusterRequest()).cluster_id
    stubs.close()
    assert broker.terminate() == 0
    broker.start()
    stubs = Stubs(broker)
    try:
        assert stubs.fetch_all("keep", 1) == [(0, b"1"), (1, b"2")]
        described = stubs.admin.DescribeTopics(admin_pb2.DescribeTopicsRequest(names=["keep"]))
        topic = described.topics[0]
        assert len(topic.partitions) == 2 and dict(topic.configs) == {"retention.ms": "123456"}
        assert stubs.admin.DescribeCluster(
            admin_pb2.DescribeClusterRequest()).cluster_id == cluster_id
        assert stubs.produce("keep", [b"3"], partition=1).base_offset == 2
    finally:
        stubs.close()


def test_kill_9_mid_produce_loses_no_acked_batch(broker: BrokerProcess) -> None:
    stubs = Stubs(broker)
    stubs.create("durable")
    acked: dict[int, bytes] = {}
    stop = threading.Event()

    def produce_forever() -> None:
        i = 0
        while not stop.is_set():
            value = f"value-{i}".encode()
            try:
                part = stubs.produce("durable", [value, value + b"-b"])
            except grpc.RpcError:
                return
            if part.error_code == 0:
                acked[part.base_offset] = value
            i += 1

    thread = threading.Thread(target=produce_forever)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while len(acked) < 50 and time.monotonic() < deadline:
            time.sleep(0.01)
        broker.kill()
    finally:
        stop.set()
        thread.join(timeout=30)
        stubs.close()
    assert len(acked) >= 50
    broker.start()
    stubs = Stubs(broker)
    try:
        stored = dict(stubs.fetch_all("durable"))
        for offset, value in acked.items():
            assert stored.get(offset) == value, offset
            assert stored.get(offset + 1) == value + b"-b"
        assert sorted(stored) == list(range(len(stored)))  # dense offsets
    finally:
        stubs.close()


def _inflight(broker: BrokerProcess) -> float:
    """The broker's ``strom_broker_inflight_requests``: gRPC calls being served now."""
    with urllib.request.urlopen(broker.metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "strom_broker_inflight_requests")


def test_sigterm_is_graceful_and_exits_0(broker: BrokerProcess) -> None:
    stubs = Stubs(broker)
    stubs.create("bye")
    stubs.produce("bye", [b"x"])
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(stubs.broker.Fetch, broker_pb2.FetchRequest(
            min_bytes=1, max_wait_ms=60_000, partitions=[
                broker_pb2.FetchPartition(topic="bye", partition=0, fetch_offset=1)]),
            timeout=60)
        wait_until(lambda: _inflight(broker) == 1, 10, what="the fetch to be in the long poll")
        started = time.monotonic()
        assert broker.terminate(timeout=20) == 0
        assert time.monotonic() - started < 10
        assert waiting.result(timeout=10).partitions[0].error_code == 0
    stubs.close()
    assert (broker.log_dir / "bye-0" / CLEAN_SHUTDOWN).exists()
    assert "stopped" in broker.stderr_tail()


def test_metrics_and_health_endpoints(stubs: Stubs, broker: BrokerProcess) -> None:
    stubs.create("m", 2)
    stubs.produce("m", [b"a", b"b"])
    stubs.fetch_all("m")
    with urllib.request.urlopen(broker.metrics_url, timeout=5) as resp:
        text = resp.read()
    body = text.decode()
    for name in ("strom_broker_bytes_in_total{topic=\"m\"}",
                 "strom_broker_bytes_out_total{topic=\"m\"}",
                 "strom_broker_messages_in_total{topic=\"m\"} 2.0",
                 "strom_broker_messages_out_total{topic=\"m\"} 2.0",
                 "strom_broker_requests_total{api=\"Produce\",listener=\"grpc\",result=\"ok\"}",
                 "strom_broker_request_duration_seconds_bucket",
                 "strom_log_size_bytes{partition=\"0\",topic=\"m\"}",
                 "strom_log_end_offset{partition=\"0\",topic=\"m\"} 2.0",
                 "strom_log_start_offset{partition=\"1\",topic=\"m\"} 0.0",
                 "strom_broker_active_connections 1.0",
                 "strom_broker_partitions 2.0",
                 "strom_broker_up 1.0",
                 "strom_broker_info{"):
        assert name in body, name
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=text,
                               capture_output=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr
    for url in (broker.health_url, broker.ready_url):
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert resp.status == 200
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(broker.metrics_url.replace("/metrics", "/nope"), timeout=5)
    assert info.value.code == 404


def test_pause_and_resume(stubs: Stubs, broker: BrokerProcess) -> None:
    stubs.create("p")
    broker.pause()
    try:
        with pytest.raises(grpc.RpcError) as info:
            stubs.broker.Metadata(broker_pb2.MetadataRequest(), timeout=0.5)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        broker.resume()
    assert stubs.produce("p", [b"after"]).error_code == 0


def test_config_error_exits_2_with_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "strom.broker", "--set", "log.dir=/tmp/x"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "did you mean 'log.dirs'" in result.stderr


def test_start_failure_reports_stderr_tail(tmp_path: Path) -> None:
    port = free_port()
    with running_broker(tmp_path / "a", port=port) as first:
        second = BrokerProcess(tmp_path / "b", port=first.port, startup_timeout=20)
        with pytest.raises(BrokerStartError) as info:
            second.start()
        assert "cannot listen" in str(info.value)
        assert not second.is_alive()
