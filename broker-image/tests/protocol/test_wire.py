"""strom.protocol.wire against protobuf's own encoder and parser, both directions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol import wire
from strom.protocol.v1 import broker_pb2, replica_pb2

_int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
_int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)

_partition_answers = st.builds(
    replica_pb2.ReplicaFetchPartitionResponse,
    topic=st.text(max_size=20), partition=_int32, error_code=_int32,
    error_message=st.text(max_size=30), high_watermark=_int64, log_start_offset=_int64,
    log_end_offset=_int64, records=st.binary(max_size=300), diverging_epoch=_int32,
    diverging_end_offset=_int64)

_responses = st.builds(replica_pb2.ReplicaFetchResponse,
                       partitions=st.lists(_partition_answers, max_size=4))


def _without_records(p: replica_pb2.ReplicaFetchPartitionResponse
                     ) -> replica_pb2.ReplicaFetchPartitionResponse:
    head = replica_pb2.ReplicaFetchPartitionResponse()
    head.CopyFrom(p)
    head.ClearField("records")
    return head


@settings(max_examples=200, deadline=None)
@given(_responses)
def test_protobuf_parses_what_encode_writes(message: replica_pb2.ReplicaFetchResponse) -> None:
    items = [(_without_records(p), p.records) for p in message.partitions]
    data = wire.encode(replica_pb2.ReplicaFetchResponse(), 1, items, 8)
    assert replica_pb2.ReplicaFetchResponse.FromString(data) == message


@settings(max_examples=200, deadline=None)
@given(_responses)
def test_decode_reads_what_protobuf_writes(message: replica_pb2.ReplicaFetchResponse) -> None:
    # protobuf writes fields in number order: records (8) sits before fields 9 and 10
    head, items = wire.decode(message.SerializeToString(), replica_pb2.ReplicaFetchResponse, 1,
                              replica_pb2.ReplicaFetchPartitionResponse, 8)
    assert head == replica_pb2.ReplicaFetchResponse()
    assert [(h, bytes(r)) for h, r in items] == [(_without_records(p), p.records)
                                                  for p in message.partitions]


def test_records_are_views_of_the_received_bytes() -> None:
    records = bytes(range(256)) * 4
    data = wire.encode(broker_pb2.FetchResponse(), 1,
                       [(broker_pb2.FetchPartitionResponse(topic="t", high_watermark=9), records)],
                       7)
    _, [(head, view)] = wire.decode(data, broker_pb2.FetchResponse, 1,
                                    broker_pb2.FetchPartitionResponse, 7)
    assert head == broker_pb2.FetchPartitionResponse(topic="t", high_watermark=9)
    assert isinstance(view, memoryview) and view.obj is not None and view == records


def test_head_fields_outside_the_items_survive() -> None:
    # ProduceRequest: scalar fields before and after the repeated items, a repeated scalar
    # given twice (last wins), and the records field repeated inside one item (last wins).
    item = (wire.length_prefix(1, 1) + b"t" + b"\x10\x05" + wire.length_prefix(3, 2) + b"xx"
            + wire.length_prefix(3, 3) + b"abc")
    data = (b"\x08\x01" + wire.length_prefix(3, len(item)) + item + b"\x10\xe8\x07"
            + b"\x08\x7f")
    head, [(p, records)] = wire.decode(data, broker_pb2.ProduceRequest, 3,
                                       broker_pb2.PartitionProduceData, 3)
    assert (head.acks, head.timeout_ms, len(head.partitions)) == (127, 1000, 0)
    assert (p.topic, p.partition, p.records, bytes(records)) == ("t", 5, b"", b"abc")
    assert broker_pb2.ProduceRequest.FromString(data).partitions[0].records == b"abc"


@pytest.mark.parametrize("data", [b"\x0a\x05ab", b"\x80", b"\x0b", b"\x00\x01",
                                  b"\x0a" + b"\xff" * 11])
def test_malformed_bytes_fail_with_a_decode_error(data: bytes) -> None:
    with pytest.raises(wire.WireError):
        wire.decode(data, replica_pb2.ReplicaFetchResponse, 1,
                    replica_pb2.ReplicaFetchPartitionResponse, 8)


def test_varint_round_trip() -> None:
    for value in (0, 1, 127, 128, 300, 2**31 - 1, 2**63 - 1, -1, -(2**63)):
        encoded = wire.varint(value)
        decoded, end = wire.read_varint(encoded, 0, len(encoded))
        assert end == len(encoded)
        assert decoded == value % (1 << 64)
