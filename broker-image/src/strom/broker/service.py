"""The gRPC front: a table per service from method name to handler module, and the parts every
call shares.

Each service is a table (method name -> the handler of its module, e.g. ``"Produce":
produce.handle``) handed to :func:`strom.transport.services.add_service`, so adding an RPC is one
line and a method without a handler fails at start, not at the first call.

Every call goes through :func:`call`, which counts it (requests, in-flight, duration, peers),
turns a :class:`~strom.protocol.errors.StromError` raised by a handler into a failed call with the
Kafka code in the gRPC status details, and turns any other exception into UNKNOWN_SERVER_ERROR
with a message (and a traceback logged at most once per API, error type and 10 s:
:mod:`strom.ratelimit`) so that no Python traceback reaches a client as a bare
error. Handlers are ``async def handle(core, request) -> response`` and never see the context.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc

from strom.broker import (
    admin,
    delete_records,
    fetch,
    log_dirs,
    metadata_rpc,
    offsets,
    produce,
    producers,
    replica_fetch,
)
from strom.broker.coordinator import handlers as groups
from strom.broker.coordinator.coordinator import GroupCoordinator
from strom.broker.core import BrokerCore
from strom.broker.listeners import GRPC_LISTENER
from strom.broker.producer_ids import handle_init_producer_id
from strom.protocol.errors import ErrorCode, StromError
from strom.ratelimit import RateLimitedLog
from strom.transport.services import Method
from strom.transport.status import to_grpc_status

log = logging.getLogger(__name__)
_unexpected = RateLimitedLog(log)

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Context = grpc.aio.ServicerContext[Any, Any]


async def call(core: BrokerCore, api: str, handler: Callable[[BrokerCore, Req], Awaitable[Resp]],
               request: Req, context: Context) -> Resp:
    metrics = core.metrics
    metrics.peer_seen(context.peer())
    metrics.inflight.inc()
    started = time.perf_counter()
    result = "ok"
    try:
        return await handler(core, request)
    except StromError as err:
        result = err.code.name
        log.debug("%s failed: %s", api, err)
        await _abort(context, err)
    except asyncio.CancelledError:
        result = "cancelled"
        raise
    except Exception as exc:
        result = ErrorCode.UNKNOWN_SERVER_ERROR.name
        _unexpected.error(f"{api} {type(exc).__name__}", "%s failed with an unexpected error",
                          api, exc_info=True)
        await _abort(context, StromError(
            ErrorCode.UNKNOWN_SERVER_ERROR,
            f"{api} failed inside the broker: {type(exc).__name__}: {exc}; see the broker log"))
    finally:
        metrics.inflight.dec()
        metrics.requests.labels(api, result, GRPC_LISTENER).inc()
        metrics.request_duration.labels(api, GRPC_LISTENER).observe(time.perf_counter() - started)


async def _abort(context: Context, err: StromError) -> NoReturn:
    status = to_grpc_status(err)
    await context.abort(status.code, status.details, status.trailing_metadata)


Handler = Callable[[BrokerCore, Any], Awaitable[Any]]


def _method(core: BrokerCore, api: str, handler: Handler) -> Method:
    async def serve(request: Any, context: Context) -> Any:
        return await call(core, api, handler, request, context)

    return serve


def _synced(handler: Handler) -> Handler:
    """Every admin answer reads after a metadata barrier (:meth:`ClusterLink.sync`): a topic
    created or changed through another broker a moment ago is known here."""
    async def synced(core: BrokerCore, request: Any) -> Any:
        await admin.metadata_barrier(core)
        return await handler(core, request)

    return synced


def _bound(coordinator: GroupCoordinator,
           handler: Callable[[GroupCoordinator, Any], Awaitable[Any]]) -> Handler:
    async def bound(core: BrokerCore, request: Any) -> Any:
        return await handler(coordinator, request)

    return bound


#: ``strom.v1.Broker``: produce, fetch, offsets, metadata, producer ids.
BROKER: dict[str, Handler] = {
    "Produce": produce.handle,
    "Fetch": fetch.handle,
    "ListOffsets": offsets.handle,
    "Metadata": metadata_rpc.handle,
    "InitProducerId": handle_init_producer_id,
    "DeleteRecords": delete_records.handle,
    "DescribeLogDirs": log_dirs.handle,
    "DescribeProducers": producers.handle,
}

#: ``strom.v1.Admin``: each call after a metadata barrier.
ADMIN: dict[str, Handler] = {
    "CreateTopics": admin.create_topics,
    "DeleteTopics": admin.delete_topics,
    "DescribeTopics": admin.describe_topics,
    "CreatePartitions": admin.create_partitions,
    "DescribeConfigs": admin.describe_configs,
    "AlterConfigs": admin.alter_configs,
    "DescribeCluster": admin.describe_cluster,
    "AlterPartitionReassignments": admin.alter_partition_reassignments,
    "ListPartitionReassignments": admin.list_partition_reassignments,
    "ElectLeaders": admin.elect_leaders,
    "UnregisterBroker": admin.unregister_broker,
}

#: ``strom.v1.Replica``: follower fetches (answers framed by hand, see
#: :mod:`strom.protocol.replica_fetch`).
REPLICA: dict[str, Handler] = {"ReplicaFetch": replica_fetch.handle}

#: ``strom.v1.Group``: served by this broker's group coordinator.
GROUP: dict[str, Callable[[GroupCoordinator, Any], Awaitable[Any]]] = {
    "FindCoordinator": groups.find_coordinator,
    "JoinGroup": groups.join_group,
    "SyncGroup": groups.sync_group,
    "Heartbeat": groups.heartbeat,
    "LeaveGroup": groups.leave_group,
    "OffsetCommit": groups.offset_commit,
    "OffsetFetch": groups.offset_fetch,
    "ListGroups": groups.list_groups,
    "DescribeGroups": groups.describe_groups,
    "DeleteGroups": groups.delete_groups,
    "OffsetDelete": groups.offset_delete,
}


def broker_methods(core: BrokerCore) -> dict[str, Method]:
    return {api: _method(core, api, handler) for api, handler in BROKER.items()}


def admin_methods(core: BrokerCore) -> dict[str, Method]:
    return {api: _method(core, api, _synced(handler)) for api, handler in ADMIN.items()}


def replica_methods(core: BrokerCore) -> dict[str, Method]:
    return {api: _method(core, api, handler) for api, handler in REPLICA.items()}


def group_methods(core: BrokerCore, coordinator: GroupCoordinator) -> dict[str, Method]:
    return {api: _method(core, api, _bound(coordinator, handler))
            for api, handler in GROUP.items()}
