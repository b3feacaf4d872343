"""The table of Kafka APIs this listener serves: key -> versions and handler.

ApiVersions answers from this table, so an API is advertised exactly when a module implements
it (APIs Strom does not have are absent, never advertised and failed later).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from strom.broker.kafka import (
    alter_configs,
    alter_partition_reassignments,
    api_versions,
    create_partitions,
    create_topics,
    delete_groups,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_topic_partitions,
    elect_leaders,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
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
        Api(create_topics.KEY, "CreateTopics", create_topics.VERSIONS, create_topics.handle),
        Api(delete_topics.KEY, "DeleteTopics", delete_topics.VERSIONS, delete_topics.handle),
        Api(create_partitions.KEY, "CreatePartitions", create_partitions.VERSIONS,
            create_partitions.handle),
        Api(describe_configs.KEY, "DescribeConfigs", describe_configs.VERSIONS,
            describe_configs.handle),
        Api(alter_configs.KEY, "AlterConfigs", alter_configs.VERSIONS, alter_configs.handle),
        Api(incremental_alter_configs.KEY, "IncrementalAlterConfigs",
            incremental_alter_configs.VERSIONS, incremental_alter_configs.handle),
        Api(describe_cluster.KEY, "DescribeCluster", describe_cluster.VERSIONS,
            describe_cluster.handle),
        Api(describe_topic_partitions.KEY, "DescribeTopicPartitions",
            describe_topic_partitions.VERSIONS, describe_topic_partitions.handle),
        Api(elect_leaders.KEY, "ElectLeaders", elect_leaders.VERSIONS, elect_leaders.handle),
        Api(alter_partition_reassignments.KEY, "AlterPartitionReassignments",
            alter_partition_reassignments.VERSIONS, alter_partition_reassignments.handle),
        Api(list_partition_reassignments.KEY, "ListPartitionReassignments",
            list_partition_reassignments.VERSIONS, list_partition_reassignments.handle),
        Api(offset_for_leader_epoch.KEY, "OffsetForLeaderEpoch", offset_for_leader_epoch.VERSIONS,
            offset_for_leader_epoch.handle),
        Api(offset_delete.KEY, "OffsetDelete", offset_delete.VERSIONS, offset_delete.handle),
        Api(delete_records.KEY, "DeleteRecords", delete_records.VERSIONS, delete_records.handle),
        Api(describe_log_dirs.KEY, "DescribeLogDirs", describe_log_dirs.VERSIONS,
            describe_log_dirs.handle),
        Api(describe_producers.KEY, "DescribeProducers", describe_producers.VERSIONS,
            describe_producers.handle),
    )
}

SUPPORTED: dict[int, tuple[int, int]] = {key: api.versions for key, api in APIS.items()}
"""What requests are parsed and served at; any other version closes the connection."""

ADVERTISED: dict[int, tuple[int, int]] = {**SUPPORTED, produce.KEY: produce.ADVERTISED}
"""What ApiVersions answers: ``SUPPORTED``, but Produce from v0, as Kafka 4.x advertises it and
refuses v0-2 (see :mod:`strom.broker.kafka.produce`)."""
