"""The hand-encoded ProduceRequest is byte-identical to protobuf's, and parses back."""

from __future__ import annotations

import pytest

from strom.client.produce_request import Buffer, encode_produce_request, varint
from strom.protocol.v1 import broker_pb2


def _protobuf(acks: int, timeout_ms: int, parts: list[tuple[str, int, Buffer]]) -> bytes:
    return broker_pb2.ProduceRequest(
        acks=acks, timeout_ms=timeout_ms,
        partitions=[broker_pb2.PartitionProduceData(topic=t, partition=p, records=bytes(r))
                    for t, p, r in parts]).SerializeToString()


@pytest.mark.parametrize("acks", [-1, 0, 1])
@pytest.mark.parametrize("timeout_ms", [0, 1, 127, 128, 30_000, 2**31 - 1])
def test_scalars_match_protobuf(acks: int, timeout_ms: int) -> None:
    parts: list[tuple[str, int, Buffer]] = [("t", 0, b"x" * 10)]
    assert encode_produce_request(acks, timeout_ms, parts) == _protobuf(acks, timeout_ms, parts)


def test_partitions_and_sizes_match_protobuf() -> None:
    parts: list[tuple[str, int, Buffer]] = [
        ("t", 0, b""),                                   # empty records: field omitted
        ("", 3, b"abc"),                                  # empty topic: field omitted
        ("topic-é", 127, bytearray(b"r" * 300)),          # utf-8 topic, 2-byte length varint
        ("big", 128, memoryview(b"z" * (1 << 20 | 5))),   # 3-byte length varint, memoryview
        ("n", 2**31 - 1, b"q"),
    ]
    assert encode_produce_request(-1, 30_000, parts) == _protobuf(-1, 30_000, parts)
    decoded = broker_pb2.ProduceRequest.FromString(encode_produce_request(1, 5, parts))
    assert [(p.topic, p.partition, len(p.records)) for p in decoded.partitions] == [
        ("t", 0, 0), ("", 3, 3), ("topic-é", 127, 300), ("big", 128, 1 << 20 | 5),
        ("n", 2**31 - 1, 1)]


def test_no_partitions() -> None:
    assert encode_produce_request(1, 100, []) == _protobuf(1, 100, [])


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**31 - 1, -1, -(2**31)])
def test_varint_matches_protobuf(value: int) -> None:
    # acks is an int32 field: its encoding after the tag byte is the varint
    assert varint(value) == broker_pb2.ProduceRequest(acks=value).SerializeToString()[1:] \
        or value == 0
