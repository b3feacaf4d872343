"""ElectLeaders (key 43), versions 0-2: preferred (0) or unclean (1) leader elections, through
the admin handler the gRPC front uses (:func:`strom.broker.admin.elect_leaders`), after the same
metadata barrier.

Supports named partitions (per-partition errors: ELECTION_NOT_NEEDED,
PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION) and
all partitions (null: only partitions that changed leader are listed, as Kafka answers).
Elections complete before the answer; the timeout is not used.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from strom.broker import admin
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.errors import StromError
from strom.protocol.v1 import admin_pb2, common_pb2

KEY = 43
VERSIONS = (0, 2)


async def handle(ctx: Context) -> Any:
    body = ctx.body
    await admin.metadata_barrier(ctx.core)
    request = admin_pb2.ElectLeadersRequest(election_type=getattr(body, "election_type", 0))
    for t in body.topic_partitions or ():
        request.partitions.extend(common_pb2.TopicPartition(topic=t.topic, partition=p)
                                  for p in t.partitions)
    try:
        answer = await admin.elect_leaders(ctx.core, request)
    except StromError as err:
        return ctx.build("ElectLeadersResponse", throttle_time=NO_THROTTLE,
                         error_code=code(int(err.code)), replica_election_results=())
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for r in answer.results:
        by_topic[r.topic].append(ctx.build("PartitionResult", partition_id=r.partition,
                                           error_code=code(r.error_code),
                                           error_message=r.error_message or None))
    return ctx.build("ElectLeadersResponse", throttle_time=NO_THROTTLE, error_code=code(0),
                     replica_election_results=tuple(
                         ctx.build("ReplicaElectionResult", topic=t, partition_result=tuple(ps))
                         for t, ps in by_topic.items()))
