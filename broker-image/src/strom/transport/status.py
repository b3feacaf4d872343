"""Kafka error codes carried in gRPC status details, both directions.

A failed call ends with a ``google.rpc.Status`` whose details hold one ``strom.v1.ErrorInfo``
(the standard ``grpc-status-details-bin`` trailer, via ``grpcio-status``), so any gRPC client can
read the Kafka code and decide to refresh metadata and retry. This module only converts values; it
does no I/O.
"""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2
from grpc_status import rpc_status

from strom.protocol.errors import ErrorCode, StromError, error_code_from_int
from strom.protocol.v1 import common_pb2


def grpc_code_for(code: ErrorCode) -> int:
    """The ``google.rpc.Code`` number of the status for a Kafka error code (its table row)."""
    return int(code_pb2.Code.Value(code.spec.grpc_status))


def error_info(err: StromError) -> common_pb2.ErrorInfo:
    return common_pb2.ErrorInfo(
        code=int(err.code), name=err.code.name, message=err.message, retriable=err.retriable
    )


def to_grpc_status(err: StromError) -> grpc.Status:
    """Build the status to pass to ``context.abort_with_status`` for a failed call."""
    detail = any_pb2.Any()
    detail.Pack(error_info(err))
    status = status_pb2.Status(
        code=grpc_code_for(err.code), message=f"{err.code.name}: {err.message}", details=[detail]
    )
    return rpc_status.to_status(status)


def from_status_proto(status: status_pb2.Status | None) -> StromError | None:
    """The StromError in a ``google.rpc.Status``, if its details carry an ErrorInfo."""
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(common_pb2.ErrorInfo.DESCRIPTOR):
            info = common_pb2.ErrorInfo()
            detail.Unpack(info)
            return StromError(error_code_from_int(info.code), info.message)
    return None


_DETAILS_KEY = "grpc-status-details-bin"


def _details_from_trailers(exc: grpc.RpcError) -> StromError | None:
    """Read our ErrorInfo from the status-details trailer of a sync or ``grpc.aio`` error.

    The sync API returns trailers as (key, value) pairs, ``grpc.aio`` as an ``aio.Metadata``
    mapping; both iterate as pairs, so one reader serves both (``rpc_status.from_call`` only
    understands the sync shape).
    """
    getter = getattr(exc, "trailing_metadata", None)
    if getter is None:
        return None
    try:
        trailers = getter()
    except Exception:
        return None
    for item in trailers or ():
        key, value = item if isinstance(item, tuple) else (item, trailers[item])
        if key == _DETAILS_KEY and isinstance(value, bytes):
            try:
                return from_status_proto(status_pb2.Status.FromString(value))
            except Exception:  # malformed details: fall back to the status code
                return None
    return None


def from_rpc_error(exc: grpc.RpcError) -> StromError:
    """Turn any failed gRPC call into a StromError.

    Calls that carry our ErrorInfo keep its Kafka code; transport failures (broker down,
    deadline) become retriable NETWORK_EXCEPTION / REQUEST_TIMED_OUT so callers retry them.
    """
    found = _details_from_trailers(exc)
    if found is not None:
        return found
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return StromError(ErrorCode.REQUEST_TIMED_OUT, f"request timed out: {details}")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, None):
        return StromError(ErrorCode.NETWORK_EXCEPTION, f"broker unreachable: {details}")
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return StromError(ErrorCode.UNSUPPORTED_VERSION, f"broker does not support this call: "
                                                         f"{details}")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return StromError(ErrorCode.MESSAGE_TOO_LARGE, f"{details}")
    return StromError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{code}: {details}")
