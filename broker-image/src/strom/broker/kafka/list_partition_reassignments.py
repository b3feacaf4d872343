"""ListPartitionReassignments (key 46), version 0: reassignments in progress, through the admin
handler the gRPC front uses (:func:`strom.broker.admin.list_partition_reassignments`).

Supports all topics (null) or named partitions; each ongoing move lists its replicas and the
replicas being added and removed.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from strom.broker import admin
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.v1 import admin_pb2

KEY = 46
VERSIONS = (0, 0)


async def handle(ctx: Context) -> Any:
    await admin.metadata_barrier(ctx.core)
    topics = ctx.body.topics
    wanted = None if topics is None else {
        (t.name, p) for t in topics for p in t.partition_indexes}
    answer = await admin.list_partition_reassignments(ctx.core,
                                                      admin_pb2.ListPartitionReassignmentsRequest(
        topics=sorted({t.name for t in topics}) if topics is not None else []))
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for r in answer.reassignments:
        if wanted is not None and (r.topic, r.partition) not in wanted:
            continue
        by_topic[r.topic].append(ctx.build(
            "OngoingPartitionReassignment", partition_index=r.partition,
            replicas=tuple(r.replicas), adding_replicas=tuple(r.adding_replicas),
            removing_replicas=tuple(r.removing_replicas)))
    return ctx.build("ListPartitionReassignmentsResponse", throttle_time=NO_THROTTLE,
                     error_code=code(0), error_message=None, topics=tuple(
                         ctx.build("OngoingTopicReassignment", name=t, partitions=tuple(ps))
                         for t, ps in by_topic.items()))
