"""CreateTopics (key 19), versions 2-7: through the admin handler the gRPC front uses
(:func:`strom.broker.admin.create_topics`), after the same metadata barrier.

Supports Kafka's name rules, partitions and replication factor (-1: the broker defaults),
Kafka-named topic configs, ``validate_only``, per-topic errors (TOPIC_ALREADY_EXISTS,
INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_CONFIG, POLICY_VIOLATION past
``max.partitions.per.request``, INVALID_REQUEST for a name given twice), and v5+'s answer of the
partition count and replication factor (v7: the topic id).

Not supported: caller-chosen replica assignments (INVALID_REQUEST with the reason: Strom places
replicas rack-aware itself), the created topic's configs in the v5+ answer (empty list), the
request timeout (creation completes before the answer).
"""

from __future__ import annotations

from typing import Any

from strom.broker import admin
from strom.broker.kafka.context import NO_THROTTLE, Context, code, topic_uuid
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import admin_pb2

KEY = 19
VERSIONS = (2, 7)


async def handle(ctx: Context) -> Any:
    body = ctx.body
    core = ctx.core
    await admin.metadata_barrier(core)
    manual = {t.name for t in body.topics if t.assignments}
    request = admin_pb2.CreateTopicsRequest(validate_only=bool(body.validate_only))
    for t in body.topics:
        if t.name in manual:
            continue
        request.topics.add(name=t.name, num_partitions=t.num_partitions,
                           replication_factor=t.replication_factor,
                           configs={c.name: c.value for c in t.configs if c.value is not None})
    answer = await admin.create_topics(core, request)
    results = {r.name: r for r in answer.results}
    out = []
    for t in body.topics:
        r = results.get(t.name)
        message: str | None
        if t.name in manual or r is None:
            error, message = int(ErrorCode.INVALID_REQUEST), (
                "replica assignments are chosen by Strom (rack-aware); leave assignments empty "
                "and give num_partitions and replication_factor")
        else:
            error, message = r.error_code, r.error_message or None
        record = core.metadata.topic(t.name) if not error else None
        out.append(ctx.build(
            "CreatableTopicResult", name=t.name,
            topic_id=topic_uuid(record.topic_id) if record else topic_uuid(""),
            error_code=code(error), error_message=message,
            num_partitions=record.partitions if record else (
                t.num_partitions if not error else -1),
            replication_factor=record.replication_factor if record else (
                t.replication_factor if not error else -1),
            configs=()))
    return ctx.build("CreateTopicsResponse", throttle_time=NO_THROTTLE, topics=tuple(out))
