"""The gRPC servicers: route each RPC to its handler module, and own the cross-cutting parts.

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

from strom.broker import admin, fetch, metadata_rpc, offsets, produce, replica_fetch
from strom.broker.coordinator import handlers as groups
from strom.broker.coordinator.coordinator import GroupCoordinator
from strom.broker.core import BrokerCore
from strom.broker.listeners import GRPC_LISTENER
from strom.broker.producer_ids import handle_init_producer_id
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.produce_wire import ProduceRequestLike
from strom.protocol.replica_fetch import Answer
from strom.protocol.status import to_grpc_status
from strom.protocol.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    broker_pb2,
    group_pb2,
    group_pb2_grpc,
    replica_pb2,
)
from strom.ratelimit import RateLimitedLog

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


class BrokerService:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    async def Produce(self, request: ProduceRequestLike, context: Context
                      ) -> broker_pb2.ProduceResponse:
        return await call(self.core, "Produce", produce.handle, request, context)

    async def Fetch(self, request: broker_pb2.FetchRequest, context: Context
                    ) -> broker_pb2.FetchResponse:
        return await call(self.core, "Fetch", fetch.handle, request, context)

    async def ListOffsets(self, request: broker_pb2.ListOffsetsRequest, context: Context
                          ) -> broker_pb2.ListOffsetsResponse:
        return await call(self.core, "ListOffsets", offsets.handle, request, context)

    async def Metadata(self, request: broker_pb2.MetadataRequest, context: Context
                       ) -> broker_pb2.MetadataResponse:
        return await call(self.core, "Metadata", metadata_rpc.handle, request, context)

    async def InitProducerId(self, request: broker_pb2.InitProducerIdRequest, context: Context
                             ) -> broker_pb2.InitProducerIdResponse:
        return await call(self.core, "InitProducerId", handle_init_producer_id, request, context)


class AdminService(admin_pb2_grpc.AdminServicer):
    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    async def _call(self, api: str, handler: Callable[[BrokerCore, Req], Awaitable[Resp]],
                    request: Req, context: Context) -> Resp:
        """Every admin answer reads after a metadata barrier (:meth:`ClusterLink.sync`): a topic
        created or changed through another broker a moment ago is known here."""
        async def synced(core: BrokerCore, req: Req) -> Resp:
            await admin.metadata_barrier(core)
            return await handler(core, req)

        return await call(self.core, api, synced, request, context)

    async def CreateTopics(self, request: admin_pb2.CreateTopicsRequest, context: Context
                           ) -> admin_pb2.CreateTopicsResponse:
        return await self._call("CreateTopics", admin.create_topics, request, context)

    async def DeleteTopics(self, request: admin_pb2.DeleteTopicsRequest, context: Context
                           ) -> admin_pb2.DeleteTopicsResponse:
        return await self._call("DeleteTopics", admin.delete_topics, request, context)

    async def DescribeTopics(self, request: admin_pb2.DescribeTopicsRequest, context: Context
                             ) -> admin_pb2.DescribeTopicsResponse:
        return await self._call("DescribeTopics", admin.describe_topics, request, context)

    async def CreatePartitions(self, request: admin_pb2.CreatePartitionsRequest,
                               context: Context) -> admin_pb2.CreatePartitionsResponse:
        return await self._call("CreatePartitions", admin.create_partitions, request,
                          context)

    async def DescribeConfigs(self, request: admin_pb2.DescribeConfigsRequest, context: Context
                              ) -> admin_pb2.DescribeConfigsResponse:
        return await self._call("DescribeConfigs", admin.describe_configs, request,
                          context)

    async def AlterConfigs(self, request: admin_pb2.AlterConfigsRequest, context: Context
                           ) -> admin_pb2.AlterConfigsResponse:
        return await self._call("AlterConfigs", admin.alter_configs, request, context)

    async def DescribeCluster(self, request: admin_pb2.DescribeClusterRequest, context: Context
                              ) -> admin_pb2.DescribeClusterResponse:
        return await self._call("DescribeCluster", admin.describe_cluster, request,
                          context)

    async def AlterPartitionReassignments(
            self, request: admin_pb2.AlterPartitionReassignmentsRequest, context: Context
    ) -> admin_pb2.AlterPartitionReassignmentsResponse:
        return await self._call("AlterPartitionReassignments",
                          admin.alter_partition_reassignments, request, context)

    async def ListPartitionReassignments(
            self, request: admin_pb2.ListPartitionReassignmentsRequest, context: Context
    ) -> admin_pb2.ListPartitionReassignmentsResponse:
        return await self._call("ListPartitionReassignments",
                          admin.list_partition_reassignments, request, context)

    async def ElectLeaders(self, request: admin_pb2.ElectLeadersRequest, context: Context
                           ) -> admin_pb2.ElectLeadersResponse:
        return await self._call("ElectLeaders", admin.elect_leaders, request, context)

    async def UnregisterBroker(self, request: admin_pb2.UnregisterBrokerRequest, context: Context
                               ) -> admin_pb2.UnregisterBrokerResponse:
        return await self._call("UnregisterBroker", admin.unregister_broker, request,
                          context)


class ReplicaService:
    """Follower fetches from other brokers (``strom.v1.Replica``), registered with
    :func:`strom.protocol.replica_fetch.add_to_server` (records framed by hand)."""

    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    async def ReplicaFetch(self, request: replica_pb2.ReplicaFetchRequest, context: Context
                           ) -> list[Answer]:
        return await call(self.core, "ReplicaFetch", replica_fetch.handle, request, context)


class GroupService(group_pb2_grpc.GroupServicer):
    """Consumer groups (``strom.v1.Group``), served by this broker's group coordinator."""

    def __init__(self, core: BrokerCore, coordinator: GroupCoordinator) -> None:
        self.core = core
        self.coordinator = coordinator

    def _bind(self, handler: Callable[[GroupCoordinator, Req], Awaitable[Resp]]
              ) -> Callable[[BrokerCore, Req], Awaitable[Resp]]:
        coordinator = self.coordinator

        async def bound(core: BrokerCore, request: Req) -> Resp:
            return await handler(coordinator, request)

        return bound

    async def FindCoordinator(self, request: group_pb2.FindCoordinatorRequest,
                              context: Context) -> group_pb2.FindCoordinatorResponse:
        return await call(self.core, "FindCoordinator", self._bind(groups.find_coordinator),
                          request, context)

    async def JoinGroup(self, request: group_pb2.JoinGroupRequest, context: Context
                        ) -> group_pb2.JoinGroupResponse:
        return await call(self.core, "JoinGroup", self._bind(groups.join_group), request,
                          context)

    async def SyncGroup(self, request: group_pb2.SyncGroupRequest, context: Context
                        ) -> group_pb2.SyncGroupResponse:
        return await call(self.core, "SyncGroup", self._bind(groups.sync_group), request,
                          context)

    async def Heartbeat(self, request: group_pb2.HeartbeatRequest, context: Context
                        ) -> group_pb2.HeartbeatResponse:
        return await call(self.core, "Heartbeat", self._bind(groups.heartbeat), request,
                          context)

    async def LeaveGroup(self, request: group_pb2.LeaveGroupRequest, context: Context
                         ) -> group_pb2.LeaveGroupResponse:
        return await call(self.core, "LeaveGroup", self._bind(groups.leave_group), request,
                          context)

    async def OffsetCommit(self, request: group_pb2.OffsetCommitRequest, context: Context
                           ) -> group_pb2.OffsetCommitResponse:
        return await call(self.core, "OffsetCommit", self._bind(groups.offset_commit), request,
                          context)

    async def OffsetFetch(self, request: group_pb2.OffsetFetchRequest, context: Context
                          ) -> group_pb2.OffsetFetchResponse:
        return await call(self.core, "OffsetFetch", self._bind(groups.offset_fetch), request,
                          context)

    async def ListGroups(self, request: group_pb2.ListGroupsRequest, context: Context
                         ) -> group_pb2.ListGroupsResponse:
        return await call(self.core, "ListGroups", self._bind(groups.list_groups), request,
                          context)

    async def DescribeGroups(self, request: group_pb2.DescribeGroupsRequest, context: Context
                             ) -> group_pb2.DescribeGroupsResponse:
        return await call(self.core, "DescribeGroups", self._bind(groups.describe_groups),
                          request, context)

    async def DeleteGroups(self, request: group_pb2.DeleteGroupsRequest, context: Context
                           ) -> group_pb2.DeleteGroupsResponse:
        return await call(self.core, "DeleteGroups", self._bind(groups.delete_groups), request,
                          context)
