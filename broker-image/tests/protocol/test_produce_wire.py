"""The broker's ProduceRequest view against the client's encoder and protobuf's."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.client.produce_request import encode_produce_request
from strom.protocol.produce_wire import decode_request
from strom.protocol.v1 import broker_pb2
from strom.transport.services import add_service

_partitions = st.lists(st.tuples(st.text(max_size=12), st.integers(0, 2**31 - 1),
                                 st.binary(max_size=200)), max_size=5)


@settings(max_examples=150, deadline=None)
@given(st.integers(-1, 1), st.integers(0, 2**31 - 1), _partitions)
def test_decode_reads_both_encoders(acks: int, timeout_ms: int,
                                    partitions: list[tuple[str, int, bytes]]) -> None:
    message = broker_pb2.ProduceRequest(acks=acks, timeout_ms=timeout_ms, partitions=[
        broker_pb2.PartitionProduceData(topic=t, partition=p, records=r)
        for t, p, r in partitions])
    for data in (message.SerializeToString(),
                 encode_produce_request(acks, timeout_ms, partitions)):
        view = decode_request(data)
        assert (view.acks, view.timeout_ms) == (acks, timeout_ms)
        assert [(p.topic, p.partition, bytes(p.records)) for p in view.partitions] == partitions
        assert all(isinstance(p.records, memoryview) for p in view.partitions)


async def test_add_service_rejects_methods_the_service_does_not_have() -> None:
    server = grpc.aio.server()
    with pytest.raises(ValueError, match="no method"):
        add_service(server, broker_pb2.DESCRIPTOR.services_by_name["Broker"], {},
                    deserializers={"Produc": decode_request})


async def test_add_service_wants_a_handler_for_every_method() -> None:
    """A method without a handler fails when the server is built, not at the first call."""
    from strom.broker.service import BROKER, broker_methods

    server = grpc.aio.server()
    methods = broker_methods(object())  # type: ignore[arg-type]
    assert set(methods) == set(BROKER) == set(
        broker_pb2.DESCRIPTOR.services_by_name["Broker"].methods_by_name)
    del methods["Fetch"]
    with pytest.raises(ValueError, match=r"no handler for \['Fetch'\]"):
        add_service(server, broker_pb2.DESCRIPTOR.services_by_name["Broker"], methods)


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    key = _varint((number << 3) | wire_type)
    return key + (_varint(len(payload)) + payload if wire_type == 2 else payload)


_item_fields = st.lists(st.one_of(
    st.builds(lambda t: _field(1, 2, t), st.one_of(st.text(max_size=8).map(str.encode),
                                                  st.binary(max_size=6))),
    st.builds(lambda p: _field(2, 0, _varint(p)), st.integers(-(2**63), 2**64 - 1)),
    st.builds(lambda r: _field(3, 2, r), st.binary(max_size=20)),
    st.builds(lambda n, v: _field(n, 0, _varint(v)), st.integers(4, 40), st.integers(0, 300)),
    st.just(b"\x8a\x00\x01x"),  # field 1 with an over-long (two-byte) tag
), max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(_item_fields, max_size=4))
def test_partitions_read_by_hand_as_protobuf_reads_them(items: list[list[bytes]]) -> None:
    """Fields in any order, repeated (the last wins), unknown, over-long tags, negative and
    over-wide partitions, topics that are not UTF-8: the hand reading of a partition answers
    what protobuf answers, and fails where protobuf fails."""
    data = b"".join(_field(3, 2, b"".join(fields)) for fields in items) + _field(1, 0, b"\x01")
    try:
        expected = broker_pb2.ProduceRequest.FromString(data)
    except Exception:  # protobuf refuses it (a topic that is not UTF-8): so must we
        with pytest.raises(Exception):  # noqa: B017 - protobuf's own DecodeError
            decode_request(data)
        return
    view = decode_request(data)
    assert view.acks == expected.acks
    assert [(p.topic, p.partition, bytes(p.records)) for p in view.partitions] == [
        (p.topic, p.partition, p.records) for p in expected.partitions]
