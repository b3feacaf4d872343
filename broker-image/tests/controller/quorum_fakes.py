"""A ``Quorum`` gRPC server for transport tests: AppendEntries answered by the test's handler,
every other method refused, on a free 127.0.0.1 port."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from strom.protocol.v1 import quorum_pb2
from strom.transport.services import add_service

Handler = Callable[[Any, Any], Awaitable[Any]]


async def _refuse(request: Any, context: Any) -> Any:
    await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not in this test")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def serve_appends(append: Handler) -> tuple[grpc.aio.Server, str]:
    """A started server whose AppendEntries is ``append``, and its address; stop it after."""
    service = quorum_pb2.DESCRIPTOR.services_by_name["Quorum"]
    methods: dict[str, Handler] = {name: _refuse for name in service.methods_by_name}
    methods["AppendEntries"] = append
    server = grpc.aio.server()
    add_service(server, service, methods)
    address = f"127.0.0.1:{_free_port()}"
    server.add_insecure_port(address)
    await server.start()
    return server, address
