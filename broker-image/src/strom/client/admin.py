"""The synchronous ``Admin``: ``AsyncAdmin`` run on a private loop thread.

Admin calls are rare and not on any hot path, so the sync client is a thin blocking front over the
asyncio one rather than a second implementation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType

from strom.client.aio_admin import AsyncAdmin, GroupTopics
from strom.client.loop_thread import LoopThread
from strom.client.models import (
    ClusterDescription,
    ConfigEntry,
    GroupDescription,
    GroupListing,
    GroupPartitionLag,
    NewTopic,
    OffsetReset,
    PartitionReassignment,
    TopicDescription,
    TopicPartition,
)
from strom.protocol.errors import StromError


class Admin:
    def __init__(self, bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092", *,
                 request_timeout_ms: int = 30000, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 1000) -> None:
        self._thread = LoopThread("strom-admin")
        self._closed = False

        async def _make() -> AsyncAdmin:
            return AsyncAdmin(bootstrap_servers, request_timeout_ms=request_timeout_ms,
                              retry_backoff_ms=retry_backoff_ms,
                              retry_backoff_max_ms=retry_backoff_max_ms)

        try:
            self._aio = self._thread.run(_make())
        except BaseException:
            self._thread.stop()
            raise

    def create_topics(self, new_topics: Iterable[NewTopic], validate_only: bool = False, *,
                      raise_on_error: bool = True) -> dict[str, StromError | None]:
        return self._thread.run(self._aio.create_topics(list(new_topics), validate_only,
                                                        raise_on_error=raise_on_error))

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     configs: Mapping[str, str] | None = None) -> None:
        self._thread.run(self._aio.create_topic(name, partitions, replication_factor, configs))

    def delete_topics(self, names: Iterable[str], *, raise_on_error: bool = True
                      ) -> dict[str, StromError | None]:
        return self._thread.run(self._aio.delete_topics(list(names),
                                                        raise_on_error=raise_on_error))

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return self._thread.run(self._aio.list_topics(include_internal))

    def describe_topics(self, names: Iterable[str] | None = None,
                        include_internal: bool = False) -> list[TopicDescription]:
        return self._thread.run(self._aio.describe_topics(
            None if names is None else list(names), include_internal))

    def create_partitions(self, topic: str, new_total_count: int,
                          validate_only: bool = False) -> None:
        self._thread.run(self._aio.create_partitions(topic, new_total_count, validate_only))

    def describe_configs(self, topic: str | None = None, broker: int | str | None = None
                         ) -> list[ConfigEntry]:
        return self._thread.run(self._aio.describe_configs(topic, broker))

    def alter_configs(self, topic: str | None = None, set: Mapping[str, str] | None = None,
                      delete: Iterable[str] | None = None, *, broker: int | str | None = None,
                      validate_only: bool = False) -> None:
        self._thread.run(self._aio.alter_configs(
            topic, set, None if delete is None else list(delete), broker=broker,
            validate_only=validate_only))

    def describe_cluster(self) -> ClusterDescription:
        return self._thread.run(self._aio.describe_cluster())

    def unregister_broker(self, broker_id: int) -> None:
        self._thread.run(self._aio.unregister_broker(broker_id))

    def alter_partition_reassignments(
            self, targets: Mapping[tuple[str, int], Sequence[int] | None],
            throttle_bytes_per_sec: int = 0, validate_only: bool = False, *,
            raise_on_error: bool = True, keep_replication_factor: bool = False
    ) -> dict[tuple[str, int], StromError | None]:
        """See :meth:`AsyncAdmin.alter_partition_reassignments`; ``None`` cancels a move."""
        return self._thread.run(self._aio.alter_partition_reassignments(
            dict(targets), throttle_bytes_per_sec, validate_only,
            raise_on_error=raise_on_error, keep_replication_factor=keep_replication_factor))

    def list_partition_reassignments(self, topics: Iterable[str] | None = None
                                     ) -> list[PartitionReassignment]:
        return self._thread.run(self._aio.list_partition_reassignments(
            None if topics is None else list(topics)))

    def replication_throttle(self) -> int | None:
        return self._thread.run(self._aio.replication_throttle())

    def set_replication_throttle(self, bytes_per_sec: int | None) -> None:
        self._thread.run(self._aio.set_replication_throttle(bytes_per_sec))

    def elect_leaders(self, partitions: Iterable[tuple[str, int]] | None = None,
                      election: str = "preferred", *, raise_on_error: bool = True
                      ) -> dict[tuple[str, int], StromError | None]:
        return self._thread.run(self._aio.elect_leaders(
            None if partitions is None else list(partitions), election,
            raise_on_error=raise_on_error))

    def list_offsets(self, specs: Mapping[TopicPartition, str | int]
                     ) -> dict[TopicPartition, int]:
        return self._thread.run(self._aio.list_offsets(dict(specs)))

    # --- consumer groups (see the AsyncAdmin methods) -------------------------------------
    def find_coordinator(self, group_id: str) -> tuple[int, str]:
        return self._thread.run(self._aio.find_coordinator(group_id))

    def list_groups(self, states: Iterable[str] | None = None) -> list[GroupListing]:
        return self._thread.run(self._aio.list_groups(None if states is None else list(states)))

    def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        return self._thread.run(self._aio.describe_groups(list(group_ids)))

    def describe_group(self, group_id: str) -> GroupDescription:
        return self._thread.run(self._aio.describe_group(group_id))

    def delete_groups(self, group_ids: Iterable[str], *, raise_on_error: bool = True
                      ) -> dict[str, StromError | None]:
        return self._thread.run(self._aio.delete_groups(list(group_ids),
                                                        raise_on_error=raise_on_error))

    def list_group_offsets(self, group_id: str,
                           partitions: Iterable[TopicPartition] | None = None
                           ) -> dict[TopicPartition, int]:
        return self._thread.run(self._aio.list_group_offsets(
            group_id, None if partitions is None else list(partitions)))

    def group_lag(self, group_id: str) -> list[GroupPartitionLag]:
        return self._thread.run(self._aio.group_lag(group_id))

    def reset_group_offsets(self, group_id: str, topics: GroupTopics, spec: str | OffsetReset,
                            *, dry_run: bool = False) -> dict[TopicPartition, int]:
        return self._thread.run(self._aio.reset_group_offsets(group_id, list(topics), spec,
                                                              dry_run=dry_run))

    def commit_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]
                             ) -> None:
        self._thread.run(self._aio.commit_group_offsets(group_id, dict(offsets)))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._thread.run(self._aio.close(), timeout=10)
        finally:
            self._thread.stop()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
