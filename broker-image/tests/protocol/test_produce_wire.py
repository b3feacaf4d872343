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
