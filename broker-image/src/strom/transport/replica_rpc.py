"""ReplicaFetch over gRPC: the leader's service and the follower's call, with the records framed
by hand (:mod:`strom.protocol.replica_fetch`) instead of by the generated servicer and stub."""

from __future__ import annotations

from typing import Any, Protocol

import grpc

from strom.protocol.replica_fetch import (
    METHOD,
    Received,
    Response,
    decode_response,
    encode_response,
)
from strom.protocol.v1 import replica_pb2
from strom.transport.services import add_service

Context = grpc.aio.ServicerContext[Any, Any]


class ReplicaServicer(Protocol):
    async def ReplicaFetch(self, request: replica_pb2.ReplicaFetchRequest, context: Context
                           ) -> Response: ...


def add_to_server(server: grpc.aio.Server, servicer: ReplicaServicer) -> None:
    """Serve ``strom.v1.Replica`` with ``servicer``'s ReplicaFetch (answers framed by hand)."""
    add_service(server, replica_pb2.DESCRIPTOR.services_by_name["Replica"],
                {"ReplicaFetch": servicer.ReplicaFetch},
                serializers={"ReplicaFetch": encode_response})


def fetch_method(channel: grpc.aio.Channel) -> grpc.aio.UnaryUnaryMultiCallable[
        replica_pb2.ReplicaFetchRequest, Received]:
    """The follower's ReplicaFetch call on ``channel``."""
    return channel.unary_unary(
        METHOD, request_serializer=replica_pb2.ReplicaFetchRequest.SerializeToString,
        response_deserializer=decode_response)
