"""The table of Kafka APIs this listener serves: key -> versions and handler.

ApiVersions answers from this table, so an API is advertised exactly when a module implements
it (APIs Strom does not have are absent, never advertised and failed later).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from strom.broker.kafka import (
    api_versions,
    delete_groups,
    describe_groups,
    fetch,
    find_coordinator,
    heartbeat,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    produce,
    sync_group,
)
from strom.broker.kafka.context import Context

Handler = Callable[[Context], Awaitable[Any]]


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    versions: tuple[int, int]
    handle: Handler


APIS: dict[int, Api] = {
    api.key: api for api in (
        Api(produce.KEY, "Produce", produce.VERSIONS, produce.handle),
        Api(fetch.KEY, "Fetch", fetch.VERSIONS, fetch.handle),
        Api(list_offsets.KEY, "ListOffsets", list_offsets.VERSIONS, list_offsets.handle),
        Api(metadata.KEY, "Metadata", metadata.VERSIONS, metadata.handle),
        Api(find_coordinator.KEY, "FindCoordinator", find_coordinator.VERSIONS,
            find_coordinator.handle),
        Api(api_versions.KEY, "ApiVersions", api_versions.VERSIONS, api_versions.handle),
        Api(init_producer_id.KEY, "InitProducerId", init_producer_id.VERSIONS,
            init_producer_id.handle),
        Api(join_group.KEY, "JoinGroup", join_group.VERSIONS, join_group.handle),
        Api(sync_group.KEY, "SyncGroup", sync_group.VERSIONS, sync_group.handle),
        Api(heartbeat.KEY, "Heartbeat", heartbeat.VERSIONS, heartbeat.handle),
        Api(leave_group.KEY, "LeaveGroup", leave_group.VERSIONS, leave_group.handle),
        Api(offset_commit.KEY, "OffsetCommit", offset_commit.VERSIONS, offset_commit.handle),
        Api(offset_fetch.KEY, "OffsetFetch", offset_fetch.VERSIONS, offset_fetch.handle),
        Api(list_groups.KEY, "ListGroups", list_groups.VERSIONS, list_groups.handle),
        Api(describe_groups.KEY, "DescribeGroups", describe_groups.VERSIONS,
            describe_groups.handle),
        Api(delete_groups.KEY, "DeleteGroups", delete_groups.VERSIONS, delete_groups.handle),
    )
}

SUPPORTED: dict[int, tuple[int, int]] = {key: api.versions for key, api in APIS.items()}
