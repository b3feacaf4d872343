"""The asyncio ``AsyncAdmin``: topics, partitions, configs, cluster description, offsets, groups.

Admin calls go to any broker (each forwards to the controller); a whole-call failure with a
retriable code (NOT_CONTROLLER, NETWORK_EXCEPTION, ...) is retried on the next broker with backoff
until ``request_timeout_ms``. Results are per resource, as in Kafka's admin API: the ``*_topics``
methods return ``{name: StromError | None}`` and, by default, raise the first error after the call
(``raise_on_error=False`` to inspect partial success). Everything else raises on any error.

Group calls go to the group's coordinator (FindCoordinator, asked again whenever an answer says
NOT_COORDINATOR or the coordinator is loading / unavailable), except ListGroups, which every live
broker answers for the groups it coordinates.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

import grpc

from strom.client import commits
from strom.client.backoff import RetryPolicy
from strom.client.config import parse_bootstrap, require_positive
from strom.client.connections import Connections, now_ms, rpc_error
from strom.client.group_admin import (
    description_from_proto,
    merge_listings,
    not_found_description,
    partition_lags,
    plan_reset,
    require_inactive,
)
from strom.client.metadata import ClusterMetadata
from strom.client.models import (
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    GroupDescription,
    GroupListing,
    GroupPartitionLag,
    NewTopic,
    OffsetReset,
    PartitionDescription,
    PartitionReassignment,
    TopicDescription,
    TopicPartition,
)
from strom.client.offsets import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    list_offsets,
    parse_offset_spec,
)
from strom.protocol.errors import ErrorCode, StromError, error_code_from_int
from strom.protocol.v1 import admin_pb2, broker_pb2, common_pb2, group_pb2
from strom.transport.v1 import group_pb2_grpc

#: ``elect_leaders(election=...)`` values and their wire numbers (Kafka's ElectionType).
ELECTION_TYPES = {"preferred": 0, "unclean": 1}

PartitionKey = tuple[str, int]

#: What ``reset_group_offsets`` accepts for its topics: a topic (every partition) or one partition.
GroupTopics = Iterable[str | TopicPartition | tuple[str, int]]


def _result_error(code: int, message: str, what: str) -> StromError | None:
    if not code:
        return None
    return StromError(error_code_from_int(code), message or f"{what} failed")


def _raise_first(results: Mapping[Any, StromError | None]) -> None:
    for err in results.values():
        if err is not None:
            raise err


def _partition_results(results: Iterable[admin_pb2.PartitionResult], what: str
                       ) -> dict[tuple[str, int], StromError | None]:
    return {(r.topic, r.partition): _result_error(r.error_code, r.error_message,
                                                  f"{what} {r.topic}-{r.partition}")
            for r in results}


def cluster_from_response(response: admin_pb2.DescribeClusterResponse) -> ClusterDescription:
    return ClusterDescription(
        cluster_id=response.cluster_id, controller_id=response.controller_id,
        brokers=[BrokerDescription(b.broker_id, b.host, b.port, b.rack or None,
                                   tuple(b.offline_log_dirs))
                 for b in sorted(response.brokers, key=lambda b: b.broker_id)],
        fenced_broker_ids=sorted(response.fenced_broker_ids),
        voters=sorted(response.voters),
        metadata_offset=response.metadata_offset,
        answered_by=response.answered_by,
        offline_log_dirs=list(response.offline_log_dirs))


def merge_reassignments(answers: Iterable[admin_pb2.PartitionReassignment]
                        ) -> list[PartitionReassignment]:
    """One entry per partition; progress from the answer of the broker that leads it.

    Without the leader's answer the replica sets come from whichever broker answered (the most
    recent metadata wins: the one naming the most adding/removing replicas is as good as any,
    so the first is kept) and progress stays unknown.
    """
    chosen: dict[tuple[str, int], admin_pb2.PartitionReassignment] = {}
    for r in answers:
        key = (r.topic, r.partition)
        current = chosen.get(key)
        from_leader = r.answered_by == r.leader and len(r.progress) > 0
        if current is None or (from_leader and not (
                current.answered_by == current.leader and len(current.progress) > 0)):
            chosen[key] = r
    out: list[PartitionReassignment] = []
    for key in sorted(chosen):
        r = chosen[key]
        from_leader = r.answered_by == r.leader
        out.append(PartitionReassignment(
            topic=r.topic, partition=r.partition, replicas=list(r.replicas),
            adding=list(r.adding_replicas), removing=list(r.removing_replicas),
            isr=list(r.isr), leader=r.leader,
            leader_log_end_offset=r.leader_log_end_offset if from_leader else -1,
            progress={p.broker_id: p.log_end_offset for p in r.progress} if from_leader else {}))
    return out


def _partition_from(p: admin_pb2.PartitionDescription,
                    offsets: admin_pb2.PartitionDescription | None) -> PartitionDescription:
    return PartitionDescription(
        partition=p.partition, leader=p.leader, leader_epoch=p.leader_epoch,
        replicas=list(p.replicas), isr=list(p.isr),
        log_start_offset=offsets.log_start_offset if offsets is not None else -1,
        log_end_offset=offsets.log_end_offset if offsets is not None else -1,
        high_watermark=offsets.high_watermark if offsets is not None else -1,
        size_bytes=offsets.size_bytes if offsets is not None else -1,
        offline_replicas=list(p.offline_replicas))


def merge_topic_descriptions(first: admin_pb2.DescribeTopicsResponse,
                             others: Iterable[admin_pb2.DescribeTopicsResponse]
                             ) -> list[TopicDescription]:
    """``first``'s topics, each partition's offsets taken from the answer of its leader.

    A broker fills offsets (>= 0) only for partitions it leads; of several such answers (the
    leadership moved between the calls) the one with the highest leader epoch wins, and its
    leader, epoch and ISR are used too: they are the leader's own view.
    """
    led: dict[tuple[str, int], admin_pb2.PartitionDescription] = {}
    for response in (first, *others):
        for t in response.topics:
            if t.error_code:
                continue
            for p in t.partitions:
                if p.high_watermark < 0:
                    continue
                key = (t.name, p.partition)
                current = led.get(key)
                if current is None or p.leader_epoch > current.leader_epoch:
                    led[key] = p
    out: list[TopicDescription] = []
    for t in first.topics:
        parts = []
        for p in sorted(t.partitions, key=lambda p: p.partition):
            leader_view = led.get((t.name, p.partition))
            parts.append(_partition_from(leader_view or p, leader_view))
        out.append(TopicDescription(
            name=t.name, topic_id=t.topic_id, internal=t.internal, partitions=parts,
            configs=dict(t.configs), min_insync_replicas=t.min_insync_replicas))
    return out


class AsyncAdmin:
    def __init__(self, bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092", *,
                 request_timeout_ms: int = 30000, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 1000) -> None:
        require_positive("request_timeout_ms", request_timeout_ms)
        self._timeout_ms = request_timeout_ms
        self._metadata = ClusterMetadata()
        self._conns = Connections(parse_bootstrap(bootstrap_servers), self._metadata,
                                  request_timeout_ms)
        self._retry = RetryPolicy(retry_backoff_ms, max(retry_backoff_ms, retry_backoff_max_ms))
        self._group_stubs: dict[str, group_pb2_grpc.GroupStub] = {}

    async def _call(self, method: str, request: Any, *, broker_rpc: bool = False,
                    group_rpc: bool = False) -> Any:
        deadline = time.monotonic() + self._timeout_ms / 1000.0
        attempt = 0
        last: StromError | None = None
        while True:
            for address in self._conns.addresses():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                stub: Any = (self._conns.broker_stub_at(address) if broker_rpc
                             else self._group_stub(address) if group_rpc
                             else self._conns.admin_stub_at(address))
                try:
                    response = await getattr(stub, method)(request, timeout=left)
                except grpc.RpcError as exc:
                    err = rpc_error(exc)
                    if not err.retriable:
                        raise err from None
                    last = err
                    self._conns.bootstrap_tracker.failed(address, exc, now_ms())
                    continue
                self._conns.bootstrap_tracker.succeeded()
                return response
            attempt += 1
            unreachable = self._conns.bootstrap_tracker.give_up(now_ms())
            if unreachable is not None:
                raise unreachable
            left = deadline - time.monotonic()
            if left <= 0:
                raise last or StromError(ErrorCode.REQUEST_TIMED_OUT,
                                         f"{method} did not complete in {self._timeout_ms} ms")
            await asyncio.sleep(min(left, self._retry.backoff(attempt) / 1000.0))

    # --- topics --------------------------------------------------------------------------
    async def create_topics(self, new_topics: Iterable[NewTopic], validate_only: bool = False,
                            *, raise_on_error: bool = True) -> dict[str, StromError | None]:
        request = admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.NewTopic(name=t.name, num_partitions=t.num_partitions,
                                       replication_factor=t.replication_factor,
                                       configs=dict(t.configs)) for t in new_topics],
            validate_only=validate_only, timeout_ms=self._timeout_ms)
        response = await self._call("CreateTopics", request)
        results = {r.name: _result_error(r.error_code, r.error_message, f"create topic {r.name}")
                   for r in response.results}
        if raise_on_error:
            _raise_first(results)
        return results

    async def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                           configs: Mapping[str, str] | None = None) -> None:
        await self.create_topics([NewTopic(name, partitions, replication_factor,
                                           dict(configs or {}))])

    async def delete_topics(self, names: Iterable[str], *, raise_on_error: bool = True
                            ) -> dict[str, StromError | None]:
        request = admin_pb2.DeleteTopicsRequest(names=list(names), timeout_ms=self._timeout_ms)
        response = await self._call("DeleteTopics", request)
        results = {r.name: _result_error(r.error_code, r.error_message, f"delete topic {r.name}")
                   for r in response.results}
        if raise_on_error:
            _raise_first(results)
        return results

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        response = await self._call(
            "Metadata", broker_pb2.MetadataRequest(include_internal=include_internal),
            broker_rpc=True)
        return sorted(t.name for t in response.topics
                      if include_internal or not t.internal)

    async def describe_topics(self, names: Iterable[str] | None = None,
                              include_internal: bool = False) -> list[TopicDescription]:
        """Topics with their partitions; offsets, high watermark and size from each leader.

        A broker only answers those four for the partitions it leads, so every live broker is
        asked (as ``list_partition_reassignments`` does) and the answers are merged; a partition
        whose leader did not answer keeps -1 (unknown), never a follower's lagging figures.
        """
        request = admin_pb2.DescribeTopicsRequest(names=list(names or []),
                                                  include_internal=include_internal)
        first = await self._call("DescribeTopics", request)
        for t in first.topics:
            err = _result_error(t.error_code, t.error_message, f"describe topic {t.name}")
            if err is not None:
                raise err
        leaders = {p.leader for t in first.topics for p in t.partitions if p.leader >= 0}
        others: list[admin_pb2.DescribeTopicsResponse] = []
        if leaders:
            named = admin_pb2.DescribeTopicsRequest(names=[t.name for t in first.topics],
                                                    include_internal=True)
            left = self._timeout_ms / 1000.0

            async def ask(address: str) -> admin_pb2.DescribeTopicsResponse:
                answer: admin_pb2.DescribeTopicsResponse = await self._conns.admin_stub_at(
                    address).DescribeTopics(named, timeout=left)
                return answer

            addresses = await self._live_broker_addresses()
            answers = await asyncio.gather(*(ask(a) for a in addresses), return_exceptions=True)
            others = [a for a in answers if isinstance(a, admin_pb2.DescribeTopicsResponse)]
        return merge_topic_descriptions(first, others)

    async def create_partitions(self, topic: str, new_total_count: int,
                                validate_only: bool = False) -> None:
        request = admin_pb2.CreatePartitionsRequest(topic=topic, new_total_count=new_total_count,
                                                    validate_only=validate_only)
        response = await self._call("CreatePartitions", request)
        err = _result_error(response.result.error_code, response.result.error_message,
                            f"create partitions for {topic}")
        if err is not None:
            raise err

    # --- configs -------------------------------------------------------------------------
    @staticmethod
    def _resource(topic: str | None, broker: int | str | None) -> admin_pb2.ConfigResource:
        if (topic is None) == (broker is None):
            raise StromError(ErrorCode.INVALID_REQUEST,
                             "pass exactly one of topic=NAME or broker=ID")
        if topic is not None:
            return admin_pb2.ConfigResource(type=admin_pb2.TOPIC, name=topic)
        return admin_pb2.ConfigResource(type=admin_pb2.BROKER, name=str(broker))

    async def describe_configs(self, topic: str | None = None, broker: int | str | None = None
                               ) -> list[ConfigEntry]:
        request = admin_pb2.DescribeConfigsRequest(resources=[self._resource(topic, broker)])
        response = await self._call("DescribeConfigs", request)
        out: list[ConfigEntry] = []
        for r in response.results:
            err = _result_error(r.error_code, r.error_message,
                                f"describe configs of {r.resource.name}")
            if err is not None:
                raise err
            out.extend(ConfigEntry(e.name, e.value, e.source, e.is_default, e.read_only,
                                   e.sensitive, e.documentation) for e in r.entries)
        return out

    async def alter_configs(self, topic: str | None = None, set: Mapping[str, str] | None = None,
                            delete: Iterable[str] | None = None, *,
                            broker: int | str | None = None, validate_only: bool = False
                            ) -> None:
        """Incrementally set and/or revert (``delete``) configs of one topic or broker."""
        resource = admin_pb2.AlterConfigsResource(resource=self._resource(topic, broker),
                                                  set=dict(set or {}), delete=list(delete or []))
        request = admin_pb2.AlterConfigsRequest(resources=[resource], validate_only=validate_only)
        response = await self._call("AlterConfigs", request)
        for r in response.results:
            err = _result_error(r.error_code, r.error_message,
                                f"alter configs of {r.resource.name}")
            if err is not None:
                raise err

    # --- cluster and offsets -------------------------------------------------------------
    async def describe_cluster(self) -> ClusterDescription:
        response = await self._call("DescribeCluster", admin_pb2.DescribeClusterRequest())
        return cluster_from_response(response)

    async def unregister_broker(self, broker_id: int) -> None:
        """Forget a broker that was removed for good (it must be down and host no replica)."""
        response = await self._call("UnregisterBroker",
                                    admin_pb2.UnregisterBrokerRequest(broker_id=broker_id))
        if response.error_code:
            raise StromError(error_code_from_int(response.error_code), response.error_message)

    # --- reassignments and elections (KIP-455, KIP-460) ----------------------------------
    async def alter_partition_reassignments(
            self, targets: Mapping[PartitionKey, Sequence[int] | None],
            throttle_bytes_per_sec: int = 0, validate_only: bool = False, *,
            raise_on_error: bool = True, keep_replication_factor: bool = False
    ) -> dict[PartitionKey, StromError | None]:
        """Move partitions to ``{(topic, partition): replicas}``; ``None`` cancels a move.

        ``throttle_bytes_per_sec``: 0 keeps the cluster's replication throttle, -1 removes it,
        N > 0 caps the copy rate of the replicas being added. ``keep_replication_factor``
        (KIP-860) fails a target whose replica count differs from its partition's
        (INVALID_REPLICATION_FACTOR).
        """
        if throttle_bytes_per_sec < -1:
            raise StromError(ErrorCode.INVALID_REQUEST,
                             f"throttle_bytes_per_sec={throttle_bytes_per_sec}: give N > 0 "
                             "bytes/s, 0 to keep the current throttle or -1 to remove it")
        request = admin_pb2.AlterPartitionReassignmentsRequest(
            partitions=[admin_pb2.ReassignmentTarget(
                topic=topic, partition=partition, replicas=list(replicas or ()),
                cancel=replicas is None) for (topic, partition), replicas in targets.items()],
            throttle_bytes_per_sec=throttle_bytes_per_sec, validate_only=validate_only,
            keep_replication_factor=keep_replication_factor)
        response = await self._call("AlterPartitionReassignments", request)
        results = _partition_results(response.results, "reassign")
        if raise_on_error:
            _raise_first(results)
        return results

    async def list_partition_reassignments(self, topics: Iterable[str] | None = None
                                           ) -> list[PartitionReassignment]:
        """The reassignments in flight, merged from every live broker's answer.

        Any broker knows which moves are in flight (it is in the metadata), but only a
        partition's leader knows how far its followers have copied; so every broker is asked
        and each partition's progress is taken from its leader's answer.
        """
        request = admin_pb2.ListPartitionReassignmentsRequest(topics=list(topics or ()))
        addresses = await self._live_broker_addresses()
        left = self._timeout_ms / 1000.0

        async def ask(address: str) -> Any:
            return await self._conns.admin_stub_at(address).ListPartitionReassignments(
                request, timeout=left)

        answers = await asyncio.gather(*(ask(a) for a in addresses), return_exceptions=True)
        responses = [a for a in answers if not isinstance(a, BaseException)]
        if not responses:
            # nobody answered directly: one retried call through any broker, no progress
            responses = [await self._call("ListPartitionReassignments", request)]
        else:
            for a in answers:
                if isinstance(a, grpc.RpcError) and not rpc_error(a).retriable:
                    raise rpc_error(a) from None
        return merge_reassignments(
            [r for response in responses for r in response.reassignments])

    async def replication_throttle(self) -> int | None:
        """The reassignment throttle in bytes/s every broker applies to itself, as leader and as
        follower (None when unthrottled)."""
        response = await self._call("ListPartitionReassignments",
                                    admin_pb2.ListPartitionReassignmentsRequest())
        rate = int(response.throttle_bytes_per_sec)
        return rate if rate > 0 else None

    async def set_replication_throttle(self, bytes_per_sec: int | None) -> None:
        """Set (N > 0) or remove (None) the throttle of replicas being added by reassignments.

        Kafka leaves the throttle in place after a reassignment until ``--verify`` sees it done;
        this is the call that removes it.
        """
        if bytes_per_sec is not None and bytes_per_sec < 1:
            raise StromError(ErrorCode.INVALID_REQUEST,
                             f"bytes_per_sec={bytes_per_sec}: give N > 0, or None to remove it")
        await self._call("AlterPartitionReassignments",
                         admin_pb2.AlterPartitionReassignmentsRequest(
                             throttle_bytes_per_sec=-1 if bytes_per_sec is None
                             else bytes_per_sec))

    async def elect_leaders(self, partitions: Iterable[PartitionKey] | None = None,
                            election: str = "preferred", *, raise_on_error: bool = True
                            ) -> dict[PartitionKey, StromError | None]:
        """Preferred (or unclean) leader election; ``partitions=None`` means every partition.

        As in Kafka, ELECTION_NOT_NEEDED (the preferred replica already leads) is not an error.
        """
        if election not in ELECTION_TYPES:
            raise StromError(ErrorCode.INVALID_REQUEST,
                             f"election={election!r}: use 'preferred' or 'unclean'")
        request = admin_pb2.ElectLeadersRequest(
            election_type=ELECTION_TYPES[election],
            partitions=[common_pb2.TopicPartition(topic=t, partition=p)
                        for t, p in (partitions or ())])
        response = await self._call("ElectLeaders", request)
        results = _partition_results(response.results, "elect a leader for")
        results = {k: None if e is not None and e.code is ErrorCode.ELECTION_NOT_NEEDED else e
                   for k, e in results.items()}
        if raise_on_error:
            _raise_first(results)
        return results

    async def _live_broker_addresses(self) -> list[str]:
        """Every unfenced broker's address (a fenced one is down or not caught up: asking it
        would only wait for its timeout)."""
        cluster = await self.describe_cluster()
        addresses = sorted({b.address for b in cluster.live_brokers})
        return addresses or self._conns.addresses()

    async def list_offsets(self, specs: Mapping[TopicPartition, str | int]
                           ) -> dict[TopicPartition, int]:
        """{tp: "earliest" | "latest" | "max_timestamp" | timestamp_ms} -> {tp: offset}.

        For a timestamp the offset is that of the first record at or after it, -1 if none.
        """
        wanted = {TopicPartition(*tp): parse_offset_spec(spec) for tp, spec in specs.items()}
        found = await list_offsets(self._conns, self._retry, wanted, self._timeout_ms / 1000.0)
        return {tp: off for tp, (off, _) in found.items()}

    # --- consumer groups -----------------------------------------------------------------
    def _group_stub(self, address: str) -> group_pb2_grpc.GroupStub:
        stub = self._group_stubs.get(address)
        if stub is None:
            stub = self._group_stubs[address] = group_pb2_grpc.GroupStub(  # type: ignore[no-untyped-call]
                self._conns.channel(address))
        return stub

    def _deadline(self) -> float:
        return time.monotonic() + self._timeout_ms / 1000.0

    async def _backoff(self, attempt: int, deadline: float, last: StromError,
                       what: str) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise StromError(last.code, f"{what}: {last.message} (gave up after "
                             f"{self._timeout_ms} ms)")
        await asyncio.sleep(min(left, self._retry.backoff(attempt) / 1000.0))

    async def find_coordinator(self, group_id: str) -> tuple[int, str]:
        """(broker id, address) of the broker coordinating ``group_id``."""
        deadline = self._deadline()
        attempt = 0
        while True:
            response = await self._call("FindCoordinator",
                                        group_pb2.FindCoordinatorRequest(group_id=group_id),
                                        group_rpc=True)
            if not response.error_code:
                c = response.coordinator
                return c.broker_id, f"{c.host}:{c.port}"
            err = StromError(error_code_from_int(response.error_code),
                             response.error_message or f"no coordinator for {group_id!r}")
            if not err.retriable:
                raise err
            attempt += 1
            await self._backoff(attempt, deadline, err, f"find the coordinator of {group_id!r}")

    async def _coordinator_call(self, group_id: str, method: str, request: Any,
                                error_of: Callable[[Any], tuple[int, str]]) -> Any:
        """``method`` on the coordinator of ``group_id``, found again after any retriable error.

        ``error_of(response)`` picks the error code the call reports (group-level, or the one
        group's result). REBALANCE_IN_PROGRESS is not retried: it would only wait out a
        rebalance that admin calls have no part in.
        """
        deadline = self._deadline()
        attempt = 0
        while True:
            try:
                _, address = await self.find_coordinator(group_id)
                left = max(0.001, deadline - time.monotonic())
                response = await getattr(self._group_stub(address), method)(request,
                                                                            timeout=left)
                code, message = error_of(response)
                if not code:
                    return response
                err = StromError(error_code_from_int(code),
                                 message or f"{method} for group {group_id!r} failed")
            except grpc.RpcError as exc:
                err = rpc_error(exc)
            if not err.retriable or err.code is ErrorCode.REBALANCE_IN_PROGRESS:
                raise err
            attempt += 1
            await self._backoff(attempt, deadline, err, f"{method} for group {group_id!r}")

    async def list_groups(self, states: Iterable[str] | None = None) -> list[GroupListing]:
        """Every group of the cluster (optionally only those in ``states``, e.g. ``Empty``).

        Each broker answers for the groups it coordinates, so every live broker is asked and
        the answers merged; a broker that does not answer in time fails the call rather than
        silently leaving its groups out.
        """
        wanted = list(states or ())
        request = group_pb2.ListGroupsRequest(states=wanted)
        addresses = await self._live_broker_addresses()
        deadline = self._deadline()

        async def ask(address: str) -> list[group_pb2.GroupListing]:
            attempt = 0
            while True:
                try:
                    response = await self._group_stub(address).ListGroups(
                        request, timeout=max(0.001, deadline - time.monotonic()))
                    if not response.error_code:
                        return list(response.groups)
                    err = StromError(error_code_from_int(response.error_code),
                                     response.error_message or "ListGroups failed")
                except grpc.RpcError as exc:
                    err = rpc_error(exc)
                if not err.retriable:
                    raise err
                attempt += 1
                await self._backoff(attempt, deadline, err, f"list the groups of {address}")

        answers = await asyncio.gather(*(ask(a) for a in addresses))
        return merge_listings((g for answer in answers for g in answer), wanted)

    async def describe_group(self, group_id: str) -> GroupDescription:
        """A group as its coordinator sees it; an unknown group is described as Dead."""
        def error_of(r: Any) -> tuple[int, str]:
            return (r.groups[0].error_code, r.groups[0].error_message) if r.groups else (0, "")

        try:
            response = await self._coordinator_call(
                group_id, "DescribeGroups",
                group_pb2.DescribeGroupsRequest(group_ids=[group_id]), error_of)
        except StromError as err:
            if err.code is ErrorCode.GROUP_ID_NOT_FOUND:
                return not_found_description(group_id)
            raise
        if not response.groups:
            return not_found_description(group_id)
        return description_from_proto(response.groups[0])

    async def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """Each group from its own coordinator, in the order asked."""
        return list(await asyncio.gather(*(self.describe_group(g) for g in group_ids)))

    async def delete_groups(self, group_ids: Iterable[str], *, raise_on_error: bool = True
                            ) -> dict[str, StromError | None]:
        """Delete groups and their committed offsets; only groups without members
        (NON_EMPTY_GROUP otherwise), as in Kafka."""
        def error_of(r: Any) -> tuple[int, str]:
            return (r.results[0].error_code, r.results[0].error_message) if r.results else (0, "")

        async def one(group_id: str) -> StromError | None:
            try:
                await self._coordinator_call(
                    group_id, "DeleteGroups",
                    group_pb2.DeleteGroupsRequest(group_ids=[group_id]), error_of)
            except StromError as err:
                return err
            return None

        ids = list(dict.fromkeys(group_ids))
        results = dict(zip(ids, await asyncio.gather(*(one(g) for g in ids)), strict=True))
        if raise_on_error:
            _raise_first(results)
        return results

    async def list_group_offsets(self, group_id: str,
                                 partitions: Iterable[TopicPartition] | None = None
                                 ) -> dict[TopicPartition, int]:
        """{partition: committed offset} of the group; partitions without a commit are left
        out (``partitions=None``: every partition the group committed)."""
        request = group_pb2.OffsetFetchRequest(group_id=group_id, partitions=[
            common_pb2.TopicPartition(topic=t, partition=p) for t, p in partitions or ()])
        response = await self._coordinator_call(
            group_id, "OffsetFetch", request, lambda r: (r.error_code, r.error_message))
        out: dict[TopicPartition, int] = {}
        for o in response.offsets:
            tp = TopicPartition(o.topic, o.partition)
            if o.error_code:
                raise StromError(error_code_from_int(o.error_code),
                                 f"committed offset of {group_id!r} on {tp} unreadable")
            if o.offset >= 0:
                out[tp] = o.offset
        return out

    async def _log_bounds(self, partitions: Iterable[TopicPartition]
                          ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        tps = sorted(set(partitions))
        if not tps:
            return {}, {}
        timeout = self._timeout_ms / 1000.0
        starts, ends = await asyncio.gather(
            list_offsets(self._conns, self._retry, dict.fromkeys(tps, EARLIEST_TIMESTAMP),
                         timeout),
            list_offsets(self._conns, self._retry, dict.fromkeys(tps, LATEST_TIMESTAMP),
                         timeout))
        return ({tp: o for tp, (o, _) in starts.items()},
                {tp: o for tp, (o, _) in ends.items()})

    async def group_lag(self, group_id: str) -> list[GroupPartitionLag]:
        """Per partition the group committed or is assigned: committed, log start/end, lag and
        owner (the table of ``strom group describe``). Log ends come from the partition
        leaders' ListOffsets; see ``GroupPartitionLag.lag`` for partitions without a commit."""
        description, committed = await asyncio.gather(self.describe_group(group_id),
                                                      self.list_group_offsets(group_id))
        assigned = {tp for m in description.members for tp in m.assignment}
        wanted = set(committed) | assigned
        try:
            starts, ends = await self._log_bounds(wanted)
        except StromError as err:
            if err.code is not ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise
            # a topic deleted since the commit: its rows keep log offsets -1, the rest resolve
            starts, ends = {}, {}
            for topic in sorted({tp.topic for tp in wanted}):
                try:
                    s, e = await self._log_bounds(tp for tp in wanted if tp.topic == topic)
                except StromError as inner:
                    if inner.code is not ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        raise
                    continue
                starts.update(s)
                ends.update(e)
        return partition_lags(description, committed, starts, ends)

    async def _resolve_partitions(self, topics: GroupTopics) -> list[TopicPartition]:
        whole: list[str] = []
        single: set[TopicPartition] = set()
        for item in topics:
            if isinstance(item, str):
                whole.append(item)
            else:
                single.add(TopicPartition(*item))
        names = sorted(set(whole) | {tp.topic for tp in single})
        if not names:
            raise StromError(ErrorCode.INVALID_REQUEST,
                             "no topic given: name the topics (or topic partitions) to reset")
        counts = {d.name: {p.partition for p in d.partitions}
                  for d in await self.describe_topics(names)}
        for tp in single:
            if tp.partition not in counts.get(tp.topic, set()):
                raise StromError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"{tp} does not exist: {tp.topic!r} has partitions "
                                 f"{sorted(counts.get(tp.topic, set()))}")
        out = set(single)
        for name in whole:
            out.update(TopicPartition(name, p) for p in counts.get(name, ()))
        return sorted(out)

    async def reset_group_offsets(self, group_id: str, topics: GroupTopics,
                                  spec: str | OffsetReset, *, dry_run: bool = False
                                  ) -> dict[TopicPartition, int]:
        """Move the group's committed offsets (kafka-consumer-groups --reset-offsets).

        ``topics``: names (every partition) and/or ``(topic, partition)`` pairs. ``spec``: an
        ``OffsetReset`` or its text form (``earliest``, ``latest``, ``offset:N``,
        ``datetime:ISO|MS``, ``shift:N``); results are clamped to [log start, log end]. Only
        while the group has no members (NON_EMPTY_GROUP otherwise, checked first so the message
        can say what to do). ``dry_run`` returns the plan without committing it.
        """
        reset = OffsetReset.parse(spec)
        require_inactive(await self.describe_group(group_id))
        partitions = await self._resolve_partitions(topics)
        committed = await self.list_group_offsets(group_id, partitions)
        starts, ends = await self._log_bounds(partitions)
        by_time: dict[TopicPartition, int] | None = None
        if reset.kind == "datetime":
            found = await list_offsets(self._conns, self._retry,
                                       dict.fromkeys(partitions, parse_offset_spec(reset.value)),
                                       self._timeout_ms / 1000.0)
            by_time = {tp: o for tp, (o, _) in found.items()}
        plan = plan_reset(reset, partitions, committed, starts, ends, by_time)
        if not dry_run:
            await self.commit_group_offsets(group_id, plan)
        return plan

    async def commit_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]
                                   ) -> None:
        """An admin (generation -1) commit: the coordinator accepts it only while the group has
        no members."""
        request = commits.commit_request(group_id, -1, "", None, offsets)
        response = await self._coordinator_call(
            group_id, "OffsetCommit", request, lambda r: (r.error_code, r.error_message))
        for p in response.partitions:
            if not p.error_code:
                continue
            code = error_code_from_int(p.error_code)
            if code in commits.LOST_GENERATION_ERRORS:  # the group has members
                # the member-facing text ("rejoin ...") means nothing to an operator
                raise StromError(code, f"the coordinator refused the admin commit to group "
                                 f"{group_id!r}: it has members now; stop its consumers first "
                                 f"(see 'strom group describe {group_id} --members')")
            raise StromError(code, p.error_message or f"commit of {group_id!r} on "
                             f"{p.topic}-{p.partition} failed")

    async def close(self) -> None:
        await self._conns.close()

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()
