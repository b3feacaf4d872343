"""The Kafka listener's socket behaviour, with raw frames: Kafka's answers to bad input
(disconnect), pipelined requests answered in order, the connection and request metrics."""

from __future__ import annotations

import datetime
import io
import socket
import struct
import time
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.fetch.v12 import request as fetch_req
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer

from strom.client import Admin, Producer
from strom.testing import BrokerProcess
from strom.testing.process import starts_processes

from .conftest import checked_broker

pytestmark = pytest.mark.integration


def _request(api_key: int, version: int, correlation_id: int, body: object) -> bytes:
    buffer = io.BytesIO()
    entity_writer(RequestHeader)(buffer, RequestHeader(  # type: ignore[call-arg]
        request_api_key=api_key, request_api_version=version,  # type: ignore[arg-type]
        correlation_id=correlation_id, client_id="raw"))  # type: ignore[arg-type]
    entity_writer(type(body))(buffer, body)  # type: ignore[arg-type]
    data = buffer.getvalue()
    return struct.pack(">i", len(data)) + data


def _connect(broker: BrokerProcess) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=10)
    s.settimeout(10)
    return s


def _read_frame(s: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = s.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return out

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def _closed_by_broker(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def test_pipelined_requests_are_answered_in_order(broker: BrokerProcess) -> None:
    versions = ApiVersionsRequest(client_software_name="raw", client_software_version="1")
    metadata = MetadataRequest(topics=None, allow_auto_topic_creation=False,  # type: ignore[call-arg]
                               include_topic_authorized_operations=False)
    with _connect(broker) as s:
        s.sendall(_request(18, 3, 1, versions) + _request(3, 12, 2, metadata)
                  + _request(18, 3, 3, versions))
        first, second, third = _read_frame(s), _read_frame(s), _read_frame(s)
    assert [struct.unpack_from(">i", f)[0] for f in (first, second, third)] == [1, 2, 3]
    answer, _ = entity_reader(ApiVersionsResponse)(first, 4)
    assert {k.api_key for k in answer.api_keys} >= {0, 1, 2, 3, 10, 18, 22}
    meta, _ = entity_reader(MetadataResponse)(second, 5)  # header v1: id + tagged fields
    assert [(b.node_id, b.host, b.port) for b in meta.brokers] == [
        (0, "127.0.0.1", broker.kafka_port)]  # the Kafka listener, not the gRPC port


@pytest.mark.parametrize("frame", [
    struct.pack(">i", -5),                                  # negative size
    struct.pack(">i", 200 * 1024 * 1024),                   # above socket.request.max.bytes
    struct.pack(">ihhih", 10, 9999, 0, 1, -1),              # unknown API key
    struct.pack(">ihhih", 10, 0, 1, 1, -1),                 # Produce v1: not served
    struct.pack(">i", 3) + b"\x00\x12\x00",                 # too short for a header
    struct.pack(">ihhi", 12, 3, 12, 1) + b"\xff\xff\xff\xff",  # Metadata body cut short
])
def test_bad_frames_close_the_connection_and_the_broker_keeps_serving(
        broker: BrokerProcess, frame: bytes) -> None:
    with _connect(broker) as s:
        s.sendall(frame)
        assert _closed_by_broker(s)
    versions = ApiVersionsRequest(client_software_name="raw", client_software_version="1")
    with _connect(broker) as s:
        s.sendall(_request(18, 3, 9, versions))
        assert struct.unpack_from(">i", _read_frame(s))[0] == 9


def test_a_newer_api_versions_request_is_answered_with_the_supported_ranges(
        broker: BrokerProcess) -> None:
    with _connect(broker) as s:
        s.sendall(struct.pack(">ihhih", 10, 18, 127, 4, -1))
        frame = _read_frame(s)
    correlation_id, error = struct.unpack_from(">ih", frame)
    assert (correlation_id, error) == (4, 35)


def test_metrics_count_kafka_requests_and_connections_by_listener(broker: BrokerProcess) -> None:
    versions = ApiVersionsRequest(client_software_name="raw", client_software_version="1")
    with _connect(broker) as s:
        s.sendall(_request(18, 3, 1, versions))
        _read_frame(s)
        text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    assert 'strom_broker_connections{listener="PLAINTEXT"}' in text
    assert ('strom_broker_requests_total{api="ApiVersions",listener="PLAINTEXT",result="ok"}'
            in text)
    assert 'strom_broker_request_duration_seconds_count{api="ApiVersions",listener="PLAINTEXT"}' \
        in text
    assert 'strom_broker_connections_created_total{listener="PLAINTEXT"}' in text


def test_many_pipelined_produce_requests_are_appended_and_answered_in_order(
        broker: BrokerProcess) -> None:
    # librdkafka's default (linger.ms=0, up to 1,000,000 in flight): one request per record, all
    # sent before any answer. The answers to requests already read may share one write, but
    # each is answered, in request order, with the offset its batch got.
    import datetime

    from kio.schema.produce.v9.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    from kio.schema.produce.v9.response import ProduceResponse

    from strom.protocol.records import encode_batch

    from .conftest import new_topic

    topic = new_topic(broker)
    count = 300

    def produce(i: int) -> bytes:
        body = ProduceRequest(transactional_id=None, acks=1,  # type: ignore[arg-type]
                              timeout=datetime.timedelta(seconds=30), topic_data=(
                                  TopicProduceData(name=topic, partition_data=(  # type: ignore[arg-type]
                                      PartitionProduceData(index=0, records=encode_batch(  # type: ignore[arg-type]
                                          [(None, b"r%d" % i)])),)),))
        return _request(0, 9, 1000 + i, body)

    with _connect(broker) as s:
        s.sendall(b"".join(produce(i) for i in range(count)))
        frames = [_read_frame(s) for _ in range(count)]
    answers = [(struct.unpack_from(">i", f)[0], entity_reader(ProduceResponse)(f, 5)[0])
               for f in frames]
    assert [cid for cid, _ in answers] == [1000 + i for i in range(count)]
    parts = [a.responses[0].partition_responses[0] for _, a in answers]
    assert [p.error_code for p in parts] == [0] * count
    assert [p.base_offset for p in parts] == list(range(count))
    from .test_produce_fetch_clients import consume

    assert [m.value() for m in consume(broker, topic, 1, count)] == [
        b"r%d" % i for i in range(count)]  # appended in the order they were sent


def _connections(broker: BrokerProcess) -> float:
    """The broker's open Kafka-listener connections (its gauge; none before the first)."""
    text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith('strom_broker_connections{listener="PLAINTEXT"}'):
            return float(line.split()[-1])
    return 0.0


def _until(what: str, ok: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:.0f}s: {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
@starts_processes
def impatient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker that drops a connection idle for 1.5 s (Kafka's connections.max.idle.ms)."""
    yield from checked_broker(tmp_path_factory, "idle", {"connections.max.idle.ms": "1500"})


def test_slow_half_open_and_unread_connections_are_closed_after_the_idle_time(
        impatient: BrokerProcess) -> None:
    """Issue 14: a peer that stops mid-frame, one that connects and says nothing (half-open),
    and one that sends Fetches and never reads the answers are each closed after
    connections.max.idle.ms, and the broker keeps serving others meanwhile (the event loop is
    never stuck behind them). Bounded waits on the broker's connection gauge."""
    with Admin(impatient.bootstrap) as admin:
        admin.create_topic("idle-big", partitions=1, replication_factor=1)
    producer = Producer(impatient.bootstrap)  # over gRPC: no Kafka connection of its own
    try:
        for _ in range(64):  # 6.4 MiB for the answers nobody reads
            producer.send("idle-big", b"x" * 100_000)
        producer.flush()
    finally:
        producer.close()
    fetch = _request(1, 12, 1, fetch_req.FetchRequest(  # type: ignore[call-arg]
        cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=10),  # type: ignore[arg-type]
        min_bytes=1, max_bytes=64 << 20, isolation_level=0, session_id=0, session_epoch=-1,  # type: ignore[arg-type]
        topics=(fetch_req.FetchTopic(topic="idle-big", partitions=(  # type: ignore[arg-type]
            fetch_req.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,  # type: ignore[arg-type]
                                     last_fetched_epoch=-1, log_start_offset=-1,  # type: ignore[arg-type]
                                     partition_max_bytes=8 << 20),)),),  # type: ignore[arg-type]
        forgotten_topics_data=(), rack_id=""))
    assert _connections(impatient) == 0
    stalled = _connect(impatient)
    silent = _connect(impatient)
    unread = socket.socket()
    unread.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    unread.connect(("127.0.0.1", impatient.kafka_port))
    try:
        stalled.sendall(fetch[:7])  # the size and three bytes of the header, then nothing
        unread.sendall(fetch * 4)  # ~26 MiB of answers into a 4 KiB receive buffer
        _until("three connections open", lambda: _connections(impatient) == 3)
        versions = ApiVersionsRequest(client_software_name="raw", client_software_version="1")
        with _connect(impatient) as other:  # served while the three hang
            other.sendall(_request(18, 3, 5, versions))
            assert struct.unpack_from(">i", _read_frame(other))[0] == 5
        _until("all three closed by the broker", lambda: _connections(impatient) == 0)
        assert _closed_by_broker(stalled) and _closed_by_broker(silent)
    finally:
        for s in (stalled, silent, unread):
            s.close()
