"""Produce requests pipelined on one connection (librdkafka at linger.ms=0 sends one request per
record, many in flight): the listener appends consecutive ones for the same partition together,
yet each gets the answer it would get alone, in request order: per-request errors in the middle
of a run, acks=0 requests unanswered (and a failed one closing the connection before the
requests behind it are served), idempotent sequences checked per request."""

from __future__ import annotations

import datetime
import io
import socket
import struct
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v9.response import ProduceResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer

from strom.protocol.records import BatchBuilder
from strom.testing import BrokerProcess

from .conftest import new_topic
from .test_produce_fetch_clients import consume

pytestmark = pytest.mark.integration

NONE, CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION, OUT_OF_ORDER_SEQUENCE_NUMBER = 0, 2, 3, 45


@dataclass(frozen=True)
class Req:
    value: bytes
    acks: int = 1
    partition: int = 0
    corrupt: bool = False
    producer_id: int = -1
    sequence: int = -1


def _frame(topic: str, correlation_id: int, req: Req) -> bytes:
    b = BatchBuilder(batch_size=1 << 20, producer_id=req.producer_id,
                     producer_epoch=0 if req.producer_id >= 0 else -1,
                     base_sequence=req.sequence)
    b.append(None, req.value, None)
    records = bytearray(b.build())
    if req.corrupt:
        records[-1] ^= 0xFF  # the CRC no longer matches
    body = ProduceRequest(  # type: ignore[call-arg]
        transactional_id=None, acks=req.acks, timeout=datetime.timedelta(seconds=30),  # type: ignore[arg-type]
        topic_data=(TopicProduceData(name=topic, partition_data=(  # type: ignore[arg-type]
            PartitionProduceData(index=req.partition, records=bytes(records)),)),))  # type: ignore[arg-type]
    buffer = io.BytesIO()
    entity_writer(RequestHeader)(buffer, RequestHeader(  # type: ignore[call-arg]
        request_api_key=0, request_api_version=9,  # type: ignore[arg-type]
        correlation_id=correlation_id, client_id="pipelined"))  # type: ignore[arg-type]
    entity_writer(ProduceRequest)(buffer, body)
    data = buffer.getvalue()
    return struct.pack(">i", len(data)) + data


def _exactly(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return out


def _pipeline(broker: BrokerProcess, topic: str, reqs: Sequence[Req], answers: int
              ) -> tuple[list[tuple[int, int, int]], bool]:
    """Send every request in one write; read ``answers`` answers as (correlation id, error
    code, base offset), and whether the broker then closed the connection."""
    with socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=20) as s:
        s.sendall(b"".join(_frame(topic, i, r) for i, r in enumerate(reqs)))
        out = []
        for _ in range(answers):
            frame = _exactly(s, struct.unpack(">i", _exactly(s, 4))[0])
            response, _ = entity_reader(ProduceResponse)(frame, 5)
            part = response.responses[0].partition_responses[0]
            out.append((struct.unpack_from(">i", frame)[0], int(part.error_code),
                        int(part.base_offset)))
        s.settimeout(5)
        try:
            closed = s.recv(1) == b""
        except TimeoutError:
            closed = False
        except ConnectionResetError:
            closed = True
    return out, closed


def test_pipelined_requests_get_their_own_results_in_order(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    reqs = [Req(b"v0"), Req(b"v1"), Req(b"v2"), Req(b"bad", corrupt=True), Req(b"v3"),
            Req(b"nowhere", partition=9), Req(b"v4"), Req(b"v5", acks=0), Req(b"v6", acks=0),
            Req(b"v7", acks=-1), Req(b"v8"), Req(b"v9", acks=0)]
    answers, closed = _pipeline(broker, topic, reqs, answers=9)
    assert answers == [(0, NONE, 0), (1, NONE, 1), (2, NONE, 2), (3, CORRUPT_MESSAGE, -1),
                       (4, NONE, 3), (5, UNKNOWN_TOPIC_OR_PARTITION, -1), (6, NONE, 4),
                       (9, NONE, 7), (10, NONE, 8)]  # acks=0 (7, 8, 11): appended, unanswered
    assert not closed
    assert [m.value() for m in consume(broker, topic, 1, 10)] == [
        b"v%d" % i for i in range(10)]


def test_a_failed_acks0_request_closes_the_connection_before_the_ones_behind_it(
        broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    reqs = [Req(b"v0"), Req(b"v1", acks=0), Req(b"v2"), Req(b"bad", acks=0, corrupt=True),
            Req(b"lost0"), Req(b"lost1", acks=0), Req(b"lost2")]
    answers, closed = _pipeline(broker, topic, reqs, answers=2)
    assert answers == [(0, NONE, 0), (2, NONE, 2)]
    assert closed
    after, _ = _pipeline(broker, topic, [Req(b"v3")], answers=1)
    assert after == [(0, NONE, 3)]  # nothing behind the failed request was appended


def test_idempotent_sequences_are_checked_per_request(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    pid = 424_242
    seqs = [0, 1, 2, 5, 3, 3, 4]  # a gap (5), then a resend of 3 (a duplicate)
    reqs = [Req(b"s%d" % s, producer_id=pid, sequence=s) for s in seqs]
    answers, _ = _pipeline(broker, topic, reqs, answers=len(reqs))
    assert answers == [(0, NONE, 0), (1, NONE, 1), (2, NONE, 2),
                       (3, OUT_OF_ORDER_SEQUENCE_NUMBER, -1), (4, NONE, 3),
                       (5, NONE, 3), (6, NONE, 4)]  # the duplicate: its original offset
    assert [m.value() for m in consume(broker, topic, 1, 5)] == [
        b"s0", b"s1", b"s2", b"s3", b"s4"]


def test_pipelined_produce_requests_are_counted_per_request(broker: BrokerProcess) -> None:
    def produced() -> float:
        text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith('strom_broker_requests_total{api="Produce",'
                                      'listener="PLAINTEXT",result="ok"}'))

    topic = new_topic(broker)
    before = produced()
    _pipeline(broker, topic, [Req(b"v%d" % i) for i in range(20)], answers=20)
    assert produced() - before == 20


def test_pipelined_requests_for_different_partitions_get_their_own_results(
        broker: BrokerProcess) -> None:
    """librdkafka sends one partition per request: writing many partitions, its pipelined
    requests rotate over them, and the core serves acks=1 ones in one pass. Each still gets
    its own answer in order: offsets per partition, a corrupt batch, an unknown partition and
    an idempotent gap failing only their request, acks=0 unanswered, acks=-1 and a run of one
    partition in the middle served as before."""
    topic = new_topic(broker, partitions=4)
    pid = 515_151
    reqs = [Req(b"a0", partition=0), Req(b"b0", partition=1), Req(b"c0", partition=2),
            Req(b"bad", partition=3, corrupt=True), Req(b"a1", partition=0),
            Req(b"x", partition=9), Req(b"d0", partition=3, producer_id=pid, sequence=0),
            Req(b"d-gap", partition=3, producer_id=pid, sequence=5),
            Req(b"b1", partition=1), Req(b"b2", partition=1), Req(b"b3", partition=1),
            Req(b"c1", partition=2, acks=0), Req(b"a2", partition=0, acks=-1),
            Req(b"c2", partition=2), Req(b"d1", partition=3, producer_id=pid, sequence=1),
            Req(b"a3", partition=0)]
    answers, closed = _pipeline(broker, topic, reqs, answers=len(reqs) - 1)
    assert answers == [
        (0, NONE, 0), (1, NONE, 0), (2, NONE, 0), (3, CORRUPT_MESSAGE, -1), (4, NONE, 1),
        (5, UNKNOWN_TOPIC_OR_PARTITION, -1), (6, NONE, 0), (7, OUT_OF_ORDER_SEQUENCE_NUMBER, -1),
        (8, NONE, 1), (9, NONE, 2), (10, NONE, 3), (12, NONE, 2), (13, NONE, 2), (14, NONE, 1),
        (15, NONE, 3)]  # 11: acks=0, appended at offset 1 of partition 2, unanswered
    assert not closed
    got = {(m.partition(), m.offset()): m.value() for m in consume(broker, topic, 4, 13)}
    assert got == {(0, 0): b"a0", (0, 1): b"a1", (0, 2): b"a2", (0, 3): b"a3",
                   (1, 0): b"b0", (1, 1): b"b1", (1, 2): b"b2", (1, 3): b"b3",
                   (2, 0): b"c0", (2, 1): b"c1", (2, 2): b"c2",
                   (3, 0): b"d0", (3, 1): b"d1"}
