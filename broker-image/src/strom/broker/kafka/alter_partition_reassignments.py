"""AlterPartitionReassignments (key 45), versions 0-1: move partition replicas (KIP-455), through
the admin handler the gRPC front uses (:func:`strom.broker.admin.alter_partition_reassignments`),
after the same metadata barrier; the active controller completes the moves.

Supports target replica lists (preferred leader first) and cancellation (``replicas`` null),
per-partition errors (INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION,
NO_REASSIGNMENT_IN_PROGRESS, ...). The replication throttle is the cluster-wide
``replication.throttled.rate`` (set it with ``strom reassign``). v1's
``allow_replication_factor_change`` (KIP-860) false fails each partition whose target changes
its replica count with INVALID_REPLICATION_FACTOR and Kafka's message (the core's check, the
gRPC request's ``keep_replication_factor``); the answer echoes the flag, as Kafka's does.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from strom.broker import admin
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.v1 import admin_pb2

KEY = 45
VERSIONS = (0, 1)


async def handle(ctx: Context) -> Any:
    await admin.metadata_barrier(ctx.core)
    allow = bool(getattr(ctx.body, "allow_replication_factor_change", True))  # v0: always
    request = admin_pb2.AlterPartitionReassignmentsRequest(keep_replication_factor=not allow)
    for t in ctx.body.topics:
        for p in t.partitions:
            request.partitions.add(topic=t.name, partition=p.partition_index,
                                   replicas=list(p.replicas or ()),
                                   cancel=p.replicas is None)
    answer = await admin.alter_partition_reassignments(ctx.core, request)
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for r in answer.results:
        by_topic[r.topic].append(ctx.build("ReassignablePartitionResponse",
                                           partition_index=r.partition,
                                           error_code=code(r.error_code),
                                           error_message=r.error_message or None))
    return ctx.build("AlterPartitionReassignmentsResponse", throttle_time=NO_THROTTLE,
                     allow_replication_factor_change=allow,
                     error_code=code(0), error_message=None, responses=tuple(
                         ctx.build("ReassignableTopicResponse", name=t, partitions=tuple(ps))
                         for t, ps in by_topic.items()))
