"""The asyncio ``AsyncAdmin``: topics, partitions, configs, cluster description, offsets.

Admin calls go to any broker (each forwards to the controller); a whole-call failure with a
retriable code (NOT_CONTROLLER, NETWORK_EXCEPTION, ...) is retried on the next broker with backoff
until ``request_timeout_ms``. Results are per resource, as in Kafka's admin API: the ``*_topics``
methods return ``{name: StromError | None}`` and, by default, raise the first error after the call
(``raise_on_error=False`` to inspect partial success). Everything else raises on any error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

import grpc

from strom.client.backoff import RetryPolicy
from strom.client.config import parse_bootstrap, require_positive
from strom.client.connections import Connections, rpc_error
from strom.client.metadata import ClusterMetadata
from strom.client.models import (
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    NewTopic,
    PartitionDescription,
    PartitionReassignment,
    TopicDescription,
    TopicPartition,
)
from strom.client.offsets import list_offsets, parse_offset_spec
from strom.protocol.errors import ErrorCode, StromError, error_code_from_int
from strom.protocol.v1 import admin_pb2, broker_pb2, common_pb2

#: ``elect_leaders(election=...)`` values and their wire numbers (Kafka's ElectionType).
ELECTION_TYPES = {"preferred": 0, "unclean": 1}

PartitionKey = tuple[str, int]


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
        brokers=[BrokerDescription(b.broker_id, b.host, b.port, b.rack or None)
                 for b in sorted(response.brokers, key=lambda b: b.broker_id)],
        fenced_broker_ids=sorted(response.fenced_broker_ids),
        voters=sorted(response.voters),
        metadata_offset=response.metadata_offset,
        answered_by=response.answered_by)


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

    async def _call(self, method: str, request: Any, *, broker_rpc: bool = False) -> Any:
        deadline = time.monotonic() + self._timeout_ms / 1000.0
        attempt = 0
        last: StromError | None = None
        while True:
            for address in self._conns.addresses():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                stub: Any = (self._conns.broker_stub_at(address) if broker_rpc
                             else self._conns.admin_stub_at(address))
                try:
                    return await getattr(stub, method)(request, timeout=left)
                except grpc.RpcError as exc:
                    err = rpc_error(exc)
                    if not err.retriable:
                        raise err from None
                    last = err
            attempt += 1
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
        request = admin_pb2.DescribeTopicsRequest(names=list(names or []),
                                                  include_internal=include_internal)
        response = await self._call("DescribeTopics", request)
        out: list[TopicDescription] = []
        for t in response.topics:
            err = _result_error(t.error_code, t.error_message, f"describe topic {t.name}")
            if err is not None:
                raise err
            out.append(TopicDescription(
                name=t.name, topic_id=t.topic_id, internal=t.internal,
                partitions=[PartitionDescription(
                    partition=p.partition, leader=p.leader, leader_epoch=p.leader_epoch,
                    replicas=list(p.replicas), isr=list(p.isr),
                    log_start_offset=p.log_start_offset, log_end_offset=p.log_end_offset,
                    high_watermark=p.high_watermark, size_bytes=p.size_bytes)
                    for p in sorted(t.partitions, key=lambda p: p.partition)],
                configs=dict(t.configs)))
        return out

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

    # --- reassignments and elections (KIP-455, KIP-460) ----------------------------------
    async def alter_partition_reassignments(
            self, targets: Mapping[PartitionKey, Sequence[int] | None],
            throttle_bytes_per_sec: int = 0, validate_only: bool = False, *,
            raise_on_error: bool = True) -> dict[PartitionKey, StromError | None]:
        """Move partitions to ``{(topic, partition): replicas}``; ``None`` cancels a move.

        ``throttle_bytes_per_sec``: 0 keeps the cluster's replication throttle, -1 removes it,
        N > 0 caps the copy rate of the replicas being added.
        """
        if throttle_bytes_per_sec < -1:
            raise StromError(ErrorCode.INVALID_REQUEST,
                             f"throttle_bytes_per_sec={throttle_bytes_per_sec}: give N > 0 "
                             "bytes/s, 0 to keep the current throttle or -1 to remove it")
        request = admin_pb2.AlterPartitionReassignmentsRequest(
            partitions=[admin_pb2.ReassignmentTarget(
                topic=topic, partition=partition, replicas=list(replicas or ()),
                cancel=replicas is None) for (topic, partition), replicas in targets.items()],
            throttle_bytes_per_sec=throttle_bytes_per_sec, validate_only=validate_only)
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
        """The cluster-wide reassignment throttle in bytes/s (None when unthrottled)."""
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

    async def close(self) -> None:
        await self._conns.close()

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()
