"""Issue 13 item 1 against a real broker process: every poison batch is refused with Kafka's
code and changes nothing, so the partition reads back exactly the good records around them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from strom.client import Admin, Consumer, TopicPartition
from strom.protocol.errors import ErrorCode
from strom.protocol.records import Compression, decode_batches, encode_batch
from strom.protocol.v1 import broker_pb2
from strom.testing import BrokerProcess, running_broker
from strom.transport.v1 import broker_pb2_grpc

from .poison import POISON

pytestmark = pytest.mark.integration

EXPECTED = {
    "header claims 1 record over 3": ErrorCode.INVALID_RECORD,
    "random bytes after a valid header": ErrorCode.INVALID_RECORD,
    "gzip attribute on an uncompressed body": ErrorCode.INVALID_RECORD,
    "client-set control flag": ErrorCode.INVALID_RECORD,
    "transactional flag": ErrorCode.INVALID_TXN_STATE,
    "trailing bytes after the records": ErrorCode.INVALID_RECORD,
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path) as b:
        yield b


def _produce(stub: broker_pb2_grpc.BrokerStub, records: bytes
             ) -> broker_pb2.PartitionProduceResponse:
    response = stub.Produce(broker_pb2.ProduceRequest(acks=-1, timeout_ms=10_000, partitions=[
        broker_pb2.PartitionProduceData(topic="poison", partition=0, records=records)]),
        timeout=15)
    [result] = response.partitions
    return result


def test_poison_batches_are_refused_and_change_nothing(broker: BrokerProcess) -> None:
    assert set(EXPECTED) == set(POISON)
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("poison")
    good_values: list[bytes] = []
    with grpc.insecure_channel(broker.bootstrap) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
        for i, (name, make) in enumerate(POISON.items()):
            values = [b"good-%d-%d" % (i, j) for j in range(2)]
            codec = list(Compression)[i % len(Compression)]
            ok = _produce(stub, encode_batch([(None, v) for v in values], codec))
            assert ok.error_code == 0, ok.error_message
            good_values += values
            refused = _produce(stub, make())
            assert ErrorCode(refused.error_code) is EXPECTED[name], (name, refused)
            assert refused.base_offset == -1 and refused.error_message, name
            # the same poison among good batches in one request: the request is refused whole
            whole = _produce(stub, encode_batch([(None, b"lost")]) + make())
            assert ErrorCode(whole.error_code) is EXPECTED[name], (name, whole)
        fetched = stub.Fetch(broker_pb2.FetchRequest(max_wait_ms=0, max_bytes=1 << 20,
                                                     partitions=[broker_pb2.FetchPartition(
                                                         topic="poison", partition=0,
                                                         fetch_offset=0,
                                                         partition_max_bytes=1 << 20)]),
                             timeout=10)
    [part] = fetched.partitions
    assert part.high_watermark == len(good_values)
    records = list(decode_batches(part.records))
    assert [r.value for r in records] == good_values
    assert [r.offset for r in records] == list(range(len(good_values)))
    # and a consumer reads exactly them, then stays at the end (nothing to skip, no error)
    got: list[bytes | None] = []
    with Consumer(broker.bootstrap, auto_offset_reset="earliest") as consumer:
        tp = TopicPartition("poison", 0)
        consumer.assign([tp])
        deadline = time.monotonic() + 30
        while len(got) < len(good_values) and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(500)]
        assert consumer.position(tp) == len(good_values)
    assert got == good_values
