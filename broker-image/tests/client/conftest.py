"""Test double for the client tests: a fake in-process Strom cluster (``FakeCluster``).

NOT the broker. It is a few dozen lines of ``grpc.aio`` servicer that keeps produced batches in a
dict, so the client's I/O paths (routing to leaders, retries after injected errors, long-poll,
prefetch, admin calls) can be tested before and independently of the real broker. It runs on its
own loop thread so both the sync and the asyncio clients can talk to it. Real-broker tests live
in ``tests/integration``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
import pytest

from strom.groups import membership as gm
from strom.protocol.batch import parse_header, patch_offsets, validate_batches
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import decode_batches
from strom.protocol.v1 import admin_pb2, broker_pb2, common_pb2, group_pb2
from strom.transport.status import to_grpc_status
from strom.transport.v1 import admin_pb2_grpc, broker_pb2_grpc, group_pb2_grpc


@dataclass
class FakePartition:
    leader: int
    batches: list[tuple[int, bytes]] = field(default_factory=list)  # (base_offset, bytes)
    next_offset: int = 0
    arrived: asyncio.Event | None = None


class FakeCluster:
    """N fake brokers sharing one state: topics, leaders, logs, fault injection."""

    def __init__(self, brokers: int = 1) -> None:
        self.topics: dict[str, list[FakePartition]] = {}
        self.configs: dict[str, dict[str, str]] = defaultdict(dict)
        self.servers: dict[int, grpc.aio.Server] = {}
        self.ports: dict[int, int] = {}
        # injected per-partition errors: (rpc, topic, partition) -> codes to return, in order
        self.faults: dict[tuple[str, str, int], list[ErrorCode]] = defaultdict(list)
        # injected whole-call errors: rpc -> codes (raised as gRPC status with ErrorInfo)
        self.call_faults: dict[str, list[ErrorCode]] = defaultdict(list)
        self.calls: list[tuple[int, str, Any]] = []  # (broker id, rpc, request)
        # Produce answers lost after the append (the client sees a timeout): (topic, partition)
        self.lost_answers: dict[tuple[str, int], int] = defaultdict(int)
        self.next_producer_id = 1000
        # brokers that hang: Produce and Metadata to them never answer (a SIGSTOP-ed process)
        self.hung: set[int] = set()
        # brokers whose Produce calls wait (a slow broker that still answers Metadata)
        self.slow_produce: set[int] = set()
        # while set (an Event of ``loop``), ListOffsets calls asking for a latest offset wait
        # for it (an answer still on the network)
        self.latest_offsets_gate: asyncio.Event | None = None
        self.group_coordinator = FakeGroups(self)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        for broker_id in range(1, brokers + 1):
            self.run(self._start(broker_id))

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports.values())

    async def _start(self, broker_id: int) -> None:
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", -1),
                                          ("grpc.max_send_message_length", -1)])
        broker_pb2_grpc.add_BrokerServicer_to_server(_FakeBroker(self, broker_id), server)
        admin_pb2_grpc.add_AdminServicer_to_server(_FakeAdmin(self, broker_id), server)
        group_pb2_grpc.add_GroupServicer_to_server(_FakeGroup(self, broker_id), server)
        self.ports[broker_id] = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self.servers[broker_id] = server

    def create_topic(self, name: str, partitions: int, leaders: list[int] | None = None) -> None:
        async def _do() -> None:
            self.topics[name] = [
                FakePartition(leader=(leaders[p] if leaders else 1), arrived=asyncio.Event())
                for p in range(partitions)]
        self.run(_do())

    def set_leader(self, topic: str, partition: int, leader: int) -> None:
        self.topics[topic][partition].leader = leader

    def records_in(self, topic: str, partition: int) -> int:
        return self.topics[topic][partition].next_offset

    def close(self) -> None:
        self.run(self.group_coordinator.stop())
        for server in self.servers.values():
            self.run(server.stop(None))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)

    def take_fault(self, rpc: str, topic: str, partition: int) -> ErrorCode | None:
        codes = self.faults.get((rpc, topic, partition))
        return codes.pop(0) if codes else None

    async def abort_if_call_fault(self, rpc: str, context: grpc.aio.ServicerContext) -> None:
        codes = self.call_faults.get(rpc)
        if codes:
            code = codes.pop(0)
            await context.abort_with_status(to_grpc_status(StromError(code, "injected")))


class _FakeBroker(broker_pb2_grpc.BrokerServicer):
    def __init__(self, cluster: FakeCluster, broker_id: int) -> None:
        self.c = cluster
        self.id = broker_id

    async def InitProducerId(self, request: Any, context: Any) -> Any:
        self.c.calls.append((self.id, "InitProducerId", request))
        await self.c.abort_if_call_fault("InitProducerId", context)
        self.c.next_producer_id += 1
        return broker_pb2.InitProducerIdResponse(producer_id=self.c.next_producer_id,
                                                 producer_epoch=0)

    async def _hang_if_hung(self) -> None:
        while self.id in self.c.hung:
            await asyncio.sleep(0.05)

    async def Metadata(self, request: Any, context: Any) -> Any:
        self.c.calls.append((self.id, "Metadata", request))
        await self._hang_if_hung()
        await self.c.abort_if_call_fault("Metadata", context)
        names = list(request.topics) or list(self.c.topics)
        topics = []
        for name in names:
            parts = self.c.topics.get(name)
            if parts is None:
                topics.append(broker_pb2.TopicMetadata(
                    name=name, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
                continue
            topics.append(broker_pb2.TopicMetadata(name=name, partitions=[
                broker_pb2.PartitionMetadata(partition=i, leader=p.leader, leader_epoch=0,
                                             # every fake broker holds a replica
                                             replicas=sorted(self.c.ports), isr=[p.leader])
                for i, p in enumerate(parts)]))
        return broker_pb2.MetadataResponse(
            cluster_id="fake", controller_id=1, topics=topics,
            brokers=[common_pb2.BrokerEndpoint(broker_id=b, host="127.0.0.1", port=port)
                     for b, port in self.c.ports.items()])

    def _check(self, rpc: str, topic: str, partition: int) -> tuple[ErrorCode, Any]:
        parts = self.c.topics.get(topic)
        if parts is None or not 0 <= partition < len(parts):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        fault = self.c.take_fault(rpc, topic, partition)
        if fault is not None:
            return fault, None
        if parts[partition].leader != self.id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
        return ErrorCode.NONE, parts[partition]

    async def Produce(self, request: Any, context: Any) -> Any:
        self.c.calls.append((self.id, "Produce", request))
        await self._hang_if_hung()
        while self.id in self.c.slow_produce:
            await asyncio.sleep(0.05)
        await self.c.abort_if_call_fault("Produce", context)
        out = []
        for pd in request.partitions:
            code, part = self._check("Produce", pd.topic, pd.partition)
            if code:
                out.append(broker_pb2.PartitionProduceResponse(
                    topic=pd.topic, partition=pd.partition, error_code=int(code),
                    error_message=code.name))
                continue
            headers = validate_batches(pd.records)
            buf = bytearray(pd.records)
            base = part.next_offset
            for h in headers:
                patch_offsets(buf, h.position, part.next_offset, 0)
                part.next_offset += h.last_offset_delta + 1
            part.batches.append((base, bytes(buf)))
            part.arrived.set()
            if self.c.lost_answers[(pd.topic, pd.partition)] > 0:
                self.c.lost_answers[(pd.topic, pd.partition)] -= 1
                await context.abort_with_status(to_grpc_status(
                    StromError(ErrorCode.REQUEST_TIMED_OUT, "injected: answer lost")))
            out.append(broker_pb2.PartitionProduceResponse(
                topic=pd.topic, partition=pd.partition, base_offset=base, log_append_time_ms=-1))
        return broker_pb2.ProduceResponse(partitions=out)

    async def Fetch(self, request: Any, context: Any) -> Any:
        self.c.calls.append((self.id, "Fetch", request))
        await self.c.abort_if_call_fault("Fetch", context)

        def collect() -> tuple[list[Any], int]:
            out, total = [], 0
            for fp in request.partitions:
                code, part = self._check("Fetch", fp.topic, fp.partition)
                if code:
                    out.append(broker_pb2.FetchPartitionResponse(
                        topic=fp.topic, partition=fp.partition, error_code=int(code)))
                    continue
                if fp.fetch_offset > part.next_offset:
                    out.append(broker_pb2.FetchPartitionResponse(
                        topic=fp.topic, partition=fp.partition,
                        error_code=int(ErrorCode.OFFSET_OUT_OF_RANGE)))
                    continue
                data = b""
                for _base, batch in part.batches:
                    h = parse_header(batch)
                    if h.next_offset <= fp.fetch_offset:
                        continue
                    if data and len(data) + len(batch) > fp.partition_max_bytes:
                        break
                    data += batch
                total += len(data)
                out.append(broker_pb2.FetchPartitionResponse(
                    topic=fp.topic, partition=fp.partition, high_watermark=part.next_offset,
                    log_start_offset=0, records=data))
            return out, total

        out, total = collect()
        if total < max(1, request.min_bytes) and request.max_wait_ms > 0:
            events = [self.c.topics[fp.topic][fp.partition].arrived
                      for fp in request.partitions if fp.topic in self.c.topics
                      and fp.partition < len(self.c.topics[fp.topic])]
            for e in events:
                e.clear()
            waiters = [asyncio.ensure_future(e.wait()) for e in events]
            if waiters:
                await asyncio.wait(waiters, timeout=request.max_wait_ms / 1000.0,
                                   return_when=asyncio.FIRST_COMPLETED)
                for w in waiters:
                    w.cancel()
            else:
                await asyncio.sleep(request.max_wait_ms / 1000.0)
            out, total = collect()
        return broker_pb2.FetchResponse(partitions=out)

    async def ListOffsets(self, request: Any, context: Any) -> Any:
        self.c.calls.append((self.id, "ListOffsets", request))
        gate = self.c.latest_offsets_gate
        if gate is not None and any(lp.timestamp == -1 for lp in request.partitions):
            await gate.wait()
        out = []
        for lp in request.partitions:
            code, part = self._check("ListOffsets", lp.topic, lp.partition)
            if code:
                out.append(broker_pb2.ListOffsetsPartitionResponse(
                    topic=lp.topic, partition=lp.partition, error_code=int(code)))
                continue
            offset = {-1: part.next_offset, -2: 0}.get(lp.timestamp, -1)
            if lp.timestamp >= 0:
                for base, batch in part.batches:
                    for r in decode_batches(batch, lp.topic, lp.partition, base):
                        if r.timestamp >= lp.timestamp:
                            offset = r.offset
                            break
                    if offset >= 0:
                        break
            out.append(broker_pb2.ListOffsetsPartitionResponse(
                topic=lp.topic, partition=lp.partition, offset=offset, timestamp=-1))
        return broker_pb2.ListOffsetsResponse(partitions=out)


class _FakeAdmin(admin_pb2_grpc.AdminServicer):
    def __init__(self, cluster: FakeCluster, broker_id: int) -> None:
        self.c = cluster
        self.id = broker_id

    async def CreateTopics(self, request: Any, context: Any) -> Any:
        self.c.calls.append((self.id, "CreateTopics", request))
        await self.c.abort_if_call_fault("CreateTopics", context)
        results = []
        for t in request.topics:
            if t.name in self.c.topics:
                results.append(admin_pb2.TopicResult(
                    name=t.name, error_code=int(ErrorCode.TOPIC_ALREADY_EXISTS),
                    error_message=f"topic {t.name!r} already exists"))
                continue
            if not request.validate_only:
                n = t.num_partitions if t.num_partitions > 0 else 1
                self.c.topics[t.name] = [FakePartition(1, arrived=asyncio.Event())
                                         for _ in range(n)]
                self.c.configs[t.name].update(t.configs)
            results.append(admin_pb2.TopicResult(name=t.name))
        return admin_pb2.CreateTopicsResponse(results=results)

    async def DeleteTopics(self, request: Any, context: Any) -> Any:
        results = []
        for name in request.names:
            code = 0 if self.c.topics.pop(name, None) is not None else int(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            results.append(admin_pb2.TopicResult(name=name, error_code=code))
        return admin_pb2.DeleteTopicsResponse(results=results)

    async def DescribeTopics(self, request: Any, context: Any) -> Any:
        names = list(request.names) or list(self.c.topics)
        out = []
        for name in names:
            parts = self.c.topics.get(name)
            if parts is None:
                out.append(admin_pb2.TopicDescription(
                    name=name, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
                continue
            out.append(admin_pb2.TopicDescription(
                name=name, topic_id="id-" + name, configs=self.c.configs[name],
                partitions=[admin_pb2.PartitionDescription(
                    partition=i, leader=p.leader, replicas=[p.leader], isr=[p.leader],
                    log_end_offset=p.next_offset, high_watermark=p.next_offset)
                    for i, p in enumerate(parts)]))
        return admin_pb2.DescribeTopicsResponse(topics=out)

    async def CreatePartitions(self, request: Any, context: Any) -> Any:
        parts = self.c.topics.get(request.topic)
        if parts is None or request.new_total_count <= len(parts):
            return admin_pb2.CreatePartitionsResponse(result=admin_pb2.TopicResult(
                name=request.topic, error_code=int(ErrorCode.INVALID_PARTITIONS),
                error_message="partitions can only grow"))
        while len(parts) < request.new_total_count:
            parts.append(FakePartition(1, arrived=asyncio.Event()))
        return admin_pb2.CreatePartitionsResponse(result=admin_pb2.TopicResult(
            name=request.topic))

    async def DescribeConfigs(self, request: Any, context: Any) -> Any:
        results = []
        for res in request.resources:
            entries = [admin_pb2.ConfigEntry(name=k, value=v, source="DYNAMIC_TOPIC_CONFIG")
                       for k, v in sorted(self.c.configs[res.name].items())]
            results.append(admin_pb2.ResourceConfigs(resource=res, entries=entries))
        return admin_pb2.DescribeConfigsResponse(results=results)

    async def AlterConfigs(self, request: Any, context: Any) -> Any:
        results = []
        for res in request.resources:
            cfg = self.c.configs[res.resource.name]
            cfg.update(res.set)
            for k in res.delete:
                cfg.pop(k, None)
            results.append(admin_pb2.AlterConfigsResult(resource=res.resource))
        return admin_pb2.AlterConfigsResponse(results=results)

    async def DescribeCluster(self, request: Any, context: Any) -> Any:
        await self.c.abort_if_call_fault("DescribeCluster", context)
        return admin_pb2.DescribeClusterResponse(
            cluster_id="fake", controller_id=1,
            brokers=[common_pb2.BrokerEndpoint(broker_id=b, host="127.0.0.1", port=port)
                     for b, port in self.c.ports.items()])


class FakeGroups:
    """The fake's group coordinator: the real pure ``strom.groups.membership.Group`` state
    machines, a dict of committed offsets, and a ticker; one coordinator (``coordinator_id``)
    for every group, the other brokers answer NOT_COORDINATOR as real ones would."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.c = cluster
        self.coordinator_id = 1
        self.config = gm.GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=100)
        self.groups: dict[str, gm.Group] = {}
        self.offsets: dict[tuple[str, str, int], int] = {}
        # error codes to answer (in the error_code field) per rpc, in order
        self.faults: dict[str, list[ErrorCode]] = defaultdict(list)
        self._waiters: dict[int, asyncio.Future[Any]] = {}
        self._ids = 0
        self._ticker: asyncio.Task[None] | None = None

    def group(self, group_id: str) -> gm.Group:
        g = self.groups.get(group_id)
        if g is None or g.state is gm.GroupState.DEAD:
            g = self.groups[group_id] = gm.Group(group_id, self.config)
        return g

    def _dispatch(self, outputs: list[gm.Output]) -> None:
        for out in outputs:
            rid = getattr(out, "request_id", None)
            if rid is not None and rid in self._waiters:
                fut = self._waiters.pop(rid)
                if not fut.done():
                    fut.set_result(out)

    async def call(self, group_id: str, make: Any) -> Any:
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick())
        self._ids += 1
        rid = self._ids
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters[rid] = fut
        self._dispatch(self.group(group_id).handle(make(rid), _ms()))
        return await fut

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.02)
            for g in list(self.groups.values()):
                self._dispatch(g.tick(_ms()))

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()

    def members(self, group_id: str) -> dict[str, tuple[tuple[str, int], ...]]:
        g = self.groups.get(group_id)
        return {} if g is None else {m.member_id: m.assignment for m in g.members.values()}


def _ms() -> int:
    return int(time.monotonic() * 1000)


def _tps(items: Any) -> tuple[tuple[str, int], ...]:
    return tuple((p.topic, p.partition) for p in items)


class _FakeGroup(group_pb2_grpc.GroupServicer):
    def __init__(self, cluster: FakeCluster, broker_id: int) -> None:
        self.c = cluster
        self.g = cluster.group_coordinator
        self.id = broker_id

    async def _enter(self, rpc: str, request: Any, context: Any) -> ErrorCode | None:
        self.c.calls.append((self.id, rpc, request))
        await self.c.abort_if_call_fault(rpc, context)
        codes = self.g.faults.get(rpc)
        if codes:
            return codes.pop(0)
        if rpc != "FindCoordinator" and self.id != self.g.coordinator_id:
            return ErrorCode.NOT_COORDINATOR
        return None

    async def FindCoordinator(self, request: Any, context: Any) -> Any:
        fault = await self._enter("FindCoordinator", request, context)
        if fault is not None:
            return group_pb2.FindCoordinatorResponse(error_code=int(fault))
        cid = self.g.coordinator_id
        return group_pb2.FindCoordinatorResponse(coordinator=common_pb2.BrokerEndpoint(
            broker_id=cid, host="127.0.0.1", port=self.c.ports[cid]))

    async def JoinGroup(self, request: Any, context: Any) -> Any:
        fault = await self._enter("JoinGroup", request, context)
        if fault is not None:
            return group_pb2.JoinGroupResponse(error_code=int(fault))
        sub = request.subscription
        r: gm.JoinGroupResponse = await self.g.call(request.group_id, lambda rid: gm.JoinGroup(
            rid, request.member_id,
            gm.Subscription(tuple(sub.topics), _tps(sub.owned_partitions), sub.user_data),
            tuple(request.protocols), request.group_instance_id or None, request.client_id,
            request.session_timeout_ms, request.rebalance_timeout_ms, request.protocol_type))
        return group_pb2.JoinGroupResponse(
            error_code=int(r.error), generation=r.generation, protocol_name=r.protocol_name or "",
            leader_id=r.leader_id, member_id=r.member_id,
            members=[group_pb2.JoinedMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id or "",
                subscription=group_pb2.Subscription(
                    topics=list(m.subscription.topics), user_data=m.subscription.user_data,
                    owned_partitions=[common_pb2.TopicPartition(topic=t, partition=p)
                                      for t, p in m.subscription.owned_partitions]))
                for m in r.members])

    async def SyncGroup(self, request: Any, context: Any) -> Any:
        fault = await self._enter("SyncGroup", request, context)
        if fault is not None:
            return group_pb2.SyncGroupResponse(error_code=int(fault))
        given = {a.member_id: _tps(a.partitions) for a in request.assignments}
        r: gm.SyncGroupResponse = await self.g.call(request.group_id, lambda rid: gm.SyncGroup(
            rid, request.member_id, request.generation, request.group_instance_id or None,
            given or None))
        return group_pb2.SyncGroupResponse(
            error_code=int(r.error),
            assignment=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in r.assignment])

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        fault = await self._enter("Heartbeat", request, context)
        if fault is not None:
            return group_pb2.HeartbeatResponse(error_code=int(fault))
        r: gm.HeartbeatResponse = await self.g.call(request.group_id, lambda rid: gm.Heartbeat(
            rid, request.member_id, request.generation, request.group_instance_id or None))
        return group_pb2.HeartbeatResponse(error_code=int(r.error))

    async def LeaveGroup(self, request: Any, context: Any) -> Any:
        fault = await self._enter("LeaveGroup", request, context)
        if fault is not None:
            return group_pb2.LeaveGroupResponse(error_code=int(fault))
        r: gm.LeaveGroupResponse = await self.g.call(request.group_id, lambda rid: gm.LeaveGroup(
            rid, tuple(gm.LeavingMember(m.member_id, m.group_instance_id or None)
                       for m in request.members)))
        return group_pb2.LeaveGroupResponse(
            error_code=int(r.error), member_error_codes=[int(e) for _, e in r.member_errors])

    async def OffsetCommit(self, request: Any, context: Any) -> Any:
        fault = await self._enter("OffsetCommit", request, context)
        if fault is not None:
            return group_pb2.OffsetCommitResponse(error_code=int(fault))
        code = self.g.group(request.group_id).validate_offset_commit(
            request.member_id, request.generation, request.group_instance_id or None, _ms())
        if code is not ErrorCode.NONE:
            return group_pb2.OffsetCommitResponse(error_code=int(code), error_message=code.name)
        for p in request.partitions:
            self.g.offsets[(request.group_id, p.topic, p.partition)] = p.offset
        return group_pb2.OffsetCommitResponse()

    async def OffsetFetch(self, request: Any, context: Any) -> Any:
        fault = await self._enter("OffsetFetch", request, context)
        if fault is not None:
            return group_pb2.OffsetFetchResponse(error_code=int(fault))
        wanted = [(p.topic, p.partition) for p in request.partitions] or [
            (t, p) for (g, t, p) in self.g.offsets if g == request.group_id]
        return group_pb2.OffsetFetchResponse(offsets=[group_pb2.CommittedOffset(
            topic=t, partition=p, offset=self.g.offsets.get((request.group_id, t, p), -1),
            leader_epoch=-1) for t, p in wanted])


@pytest.fixture
def fake_cluster() -> Iterator[FakeCluster]:
    cluster = FakeCluster(brokers=1)
    yield cluster
    cluster.close()


@pytest.fixture
def fake_cluster2() -> Iterator[FakeCluster]:
    cluster = FakeCluster(brokers=2)
    yield cluster
    cluster.close()
