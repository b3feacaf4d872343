"""Every gRPC method a broker serves, read from the protobuf service descriptors, for the tests
that send each one something hostile (malformed bytes, fuzzed messages)."""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor

from strom.protocol.v1 import admin_pb2, broker_pb2, group_pb2, quorum_pb2, replica_pb2

SERVICES = [
    broker_pb2.DESCRIPTOR.services_by_name["Broker"],
    admin_pb2.DESCRIPTOR.services_by_name["Admin"],
    group_pb2.DESCRIPTOR.services_by_name["Group"],
    replica_pb2.DESCRIPTOR.services_by_name["Replica"],
    quorum_pb2.DESCRIPTOR.services_by_name["Quorum"],
]
#: ``/package.Service/Method`` -> the method's request message type.
METHODS: dict[str, Descriptor] = {f"/{s.full_name}/{m.name}": m.input_type
                                  for s in SERVICES for m in s.methods}
