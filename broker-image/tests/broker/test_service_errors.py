"""The service layer: StromError -> status details; other exceptions -> UNKNOWN_SERVER_ERROR."""

from __future__ import annotations

from typing import Any, NoReturn

import grpc
import pytest
from google.rpc import status_pb2

from strom.broker.core import BrokerCore
from strom.broker.service import call
from strom.protocol.errors import ErrorCode, StromError
from strom.transport.status import from_status_proto


class Aborted(Exception):
    pass


class FakeContext:
    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None
        self.details = ""
        self.error: StromError | None = None

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1234"

    async def abort(self, code: grpc.StatusCode, details: str = "",
                    trailing_metadata: Any = ()) -> NoReturn:
        self.code = code
        self.details = details
        for key, value in trailing_metadata:
            if key == "grpc-status-details-bin":
                self.error = from_status_proto(status_pb2.Status.FromString(value))
        raise Aborted()


async def test_strom_error_becomes_status_details(core: BrokerCore) -> None:
    async def handler(core: BrokerCore, request: object) -> object:
        raise StromError(ErrorCode.INVALID_REQUIRED_ACKS, "acks=9 is invalid")

    context = FakeContext()
    with pytest.raises(Aborted):
        await call(core, "Produce", handler, None, context)  # type: ignore[arg-type]
    assert context.code == grpc.StatusCode.INVALID_ARGUMENT
    assert context.error is not None and context.error.code == ErrorCode.INVALID_REQUIRED_ACKS
    value = core.metrics.registry.get_sample_value(
        "strom_broker_requests_total",
        {"api": "Produce", "result": "INVALID_REQUIRED_ACKS", "listener": "grpc"})
    assert value == 1


async def test_unexpected_exception_is_unknown_server_error(core: BrokerCore) -> None:
    async def handler(core: BrokerCore, request: object) -> object:
        raise ZeroDivisionError("boom")

    context = FakeContext()
    with pytest.raises(Aborted):
        await call(core, "Fetch", handler, None, context)  # type: ignore[arg-type]
    assert context.code == grpc.StatusCode.INTERNAL
    assert context.error is not None
    assert context.error.code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert "ZeroDivisionError: boom" in context.error.message
    assert core.metrics.registry.get_sample_value("strom_broker_inflight_requests") == 0


async def test_success_is_counted(core: BrokerCore) -> None:
    async def handler(core: BrokerCore, request: int) -> int:
        return request + 1

    assert await call(core, "Metadata", handler, 1, FakeContext()) == 2  # type: ignore[arg-type]
    assert core.metrics.registry.get_sample_value(
        "strom_broker_requests_total", {"api": "Metadata", "result": "ok", "listener": "grpc"}) == 1
    assert core.metrics.active_peers() == 1
