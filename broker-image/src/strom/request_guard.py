"""Undecodable requests get INVALID_ARGUMENT with a one-line reason, on every gRPC service.

Why it exists: gRPC deserializes a request before the servicer runs; when the bytes are not a
valid message (random bytes, a truncated or mutated payload) the deserializer raises inside
grpcio, which answers UNKNOWN and logs a full traceback per request. This server interceptor
wraps each unary method's deserializer so that a decoding failure becomes a :class:`Malformed`
value instead, and the method answers it with gRPC ``INVALID_ARGUMENT`` and Kafka's
``INVALID_REQUEST`` in the status details (like any other Strom error), naming the method and
what was wrong. The log gets one rate-limited line per method (:mod:`strom.ratelimit`).

One interceptor serves every service a server hosts (Broker, Admin, Group, Replica, Quorum),
including those registered by generated ``add_*Servicer_to_server`` functions; wrapped handlers
are built once per method and cached.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from strom.protocol.errors import ErrorCode, StromError
from strom.ratelimit import RateLimitedLog
from strom.transport.status import to_grpc_status

__all__ = ["Malformed", "RequestGuard"]

log = logging.getLogger("strom.requests")

_MAX_REASON = 200


@dataclass(frozen=True, slots=True)
class Malformed:
    """What a guarded deserializer returns for bytes that do not decode."""

    method: str
    reason: str

    def error(self) -> StromError:
        return StromError(ErrorCode.INVALID_REQUEST,
                          f"{self.method}: the request does not decode as its protobuf message "
                          f"({self.reason})")


def _reason(exc: Exception) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= _MAX_REASON else text[:_MAX_REASON] + "..."


OnMalformed = Callable[[str], None]

if TYPE_CHECKING:
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:  # not subscriptable at run time
    _Interceptor = grpc.aio.ServerInterceptor


class RequestGuard(_Interceptor):
    """Pass to ``grpc.aio.server(interceptors=[RequestGuard()])``.

    ``on_malformed(method)`` is called for each rejected request (metrics).
    """

    def __init__(self, on_malformed: OnMalformed | None = None) -> None:
        self._on_malformed = on_malformed
        self._cache: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        self._log = RateLimitedLog(log)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails],
                               Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        method: str = details.method
        cached = self._cache.get(method)
        if cached is not None:
            return cached
        handler = await continuation(details)
        if handler is None:  # an unknown method: gRPC answers UNIMPLEMENTED; cache nothing
            return None  # type: ignore[return-value]
        guarded = self._guard(method, handler)
        self._cache[method] = guarded
        return guarded

    def _guard(self, method: str, handler: grpc.RpcMethodHandler[Any, Any]
               ) -> grpc.RpcMethodHandler[Any, Any]:
        if handler.unary_unary is None:
            return handler
        name = method.rsplit("/", 1)[-1]
        decode = handler.request_deserializer
        behaviour = handler.unary_unary

        def deserialize(data: bytes) -> Any:
            try:
                return decode(data) if decode is not None else data
            except Exception as exc:
                return Malformed(name, _reason(exc))

        async def serve(request: Any, context: Any) -> Any:
            if isinstance(request, Malformed):
                await self._reject(request, context)
            return await behaviour(request, context)

        return grpc.unary_unary_rpc_method_handler(
            serve, request_deserializer=deserialize,
            response_serializer=handler.response_serializer)

    async def _reject(self, bad: Malformed, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        if self._on_malformed is not None:
            try:
                self._on_malformed(bad.method)
            except Exception:  # counting must never change the answer
                log.exception("counting a malformed %s request failed", bad.method)
        self._log.warning(f"malformed {bad.method}", "rejected a malformed %s request from %s: %s",
                          bad.method, context.peer(), bad.reason)
        status = to_grpc_status(bad.error())
        await context.abort(status.code, status.details, status.trailing_metadata)
