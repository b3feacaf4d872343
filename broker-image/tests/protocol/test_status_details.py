"""Kafka error codes survive the trip through gRPC status details."""

from __future__ import annotations

import grpc
from grpc_status import rpc_status

from strom.protocol.errors import ErrorCode, StromError
from strom.transport.status import from_status_proto, grpc_code_for, to_grpc_status


def test_error_round_trips_through_status_details() -> None:
    err = StromError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "broker 1 does not lead t-0; refresh")
    status = to_grpc_status(err)
    assert status.code == grpc.StatusCode.FAILED_PRECONDITION
    key, value = status.trailing_metadata[0]
    assert key == "grpc-status-details-bin"
    from google.rpc import status_pb2

    proto = status_pb2.Status.FromString(value)
    back = from_status_proto(proto)
    assert back is not None
    assert back.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert back.retriable
    assert "refresh" in back.message
    assert rpc_status is not None


def test_non_retriable_errors_map_to_invalid_argument() -> None:
    from google.rpc import code_pb2

    assert grpc_code_for(ErrorCode.INVALID_CONFIG) == code_pb2.INVALID_ARGUMENT
    assert grpc_code_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) == code_pb2.NOT_FOUND
    assert not StromError(ErrorCode.INVALID_CONFIG, "x").retriable


async def test_codes_are_read_from_sync_and_aio_errors() -> None:
    """grpc.aio shapes trailers differently from the sync API; both must yield the Kafka code."""
    import asyncio

    from strom.protocol.v1 import broker_pb2
    from strom.transport.status import from_rpc_error
    from strom.transport.v1 import broker_pb2_grpc

    class Failing(broker_pb2_grpc.BrokerServicer):
        async def Metadata(self, request: object, context: grpc.aio.ServicerContext) -> None:  # type: ignore[override]
            await context.abort_with_status(
                to_grpc_status(StromError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")))

    server = grpc.aio.server()
    broker_pb2_grpc.add_BrokerServicer_to_server(Failing(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            try:
                await broker_pb2_grpc.BrokerStub(channel).Metadata(broker_pb2.MetadataRequest())
            except grpc.RpcError as exc:
                assert from_rpc_error(exc).code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                raise AssertionError("call should fail")
        sync_channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        try:
            await asyncio.to_thread(broker_pb2_grpc.BrokerStub(sync_channel).Metadata,
                                    broker_pb2.MetadataRequest())
        except grpc.RpcError as exc:
            assert from_rpc_error(exc).code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        else:
            raise AssertionError("call should fail")
        finally:
            sync_channel.close()
    finally:
        await server.stop(0)
