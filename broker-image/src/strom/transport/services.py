"""Register a protobuf service on a gRPC server, with chosen methods (de)serialized by hand.

The generated ``add_*Servicer_to_server`` functions fix every method's (de)serializers; the hot
record paths (Produce, ReplicaFetch) need their own (:mod:`strom.protocol.wire`). This builds
the same handlers from the service descriptor, so the other methods stay exactly as generated.
Only unary-unary methods exist in Strom's services; others are rejected loudly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass

#: One method's implementation: ``async (request, context) -> response``.
Method = Callable[[Any, Any], Awaitable[Any]]


def add_service(server: grpc.aio.Server, service: ServiceDescriptor,
                methods: Mapping[str, Method],
                deserializers: Mapping[str, Callable[[bytes], Any]] | None = None,
                serializers: Mapping[str, Callable[[Any], bytes]] | None = None) -> None:
    """Serve ``service`` with ``methods`` (its table: method name -> implementation), which must
    name every method of the service and no other; ``deserializers`` / ``serializers`` replace
    protobuf's for the methods they name."""
    deserializers = deserializers or {}
    serializers = serializers or {}
    unknown = (set(deserializers) | set(serializers) | set(methods)) - set(service.methods_by_name)
    if unknown:
        raise ValueError(f"{service.full_name} has no method(s) {sorted(unknown)}")
    missing = set(service.methods_by_name) - set(methods)
    if missing:
        raise ValueError(f"{service.full_name}: no handler for {sorted(missing)}")
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in service.methods:
        if method.client_streaming or method.server_streaming:
            raise ValueError(f"{service.full_name}.{method.name} is streaming; add it by hand")
        request_type = GetMessageClass(method.input_type)
        response_type = GetMessageClass(method.output_type)
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            methods[method.name],
            request_deserializer=deserializers.get(method.name, request_type.FromString),
            response_serializer=serializers.get(method.name, response_type.SerializeToString))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),))
