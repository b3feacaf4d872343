"""DeleteTopics (key 20), versions 1-6: through the admin handler the gRPC front uses
(:func:`strom.broker.admin.delete_topics`), after the same metadata barrier.

Supports names (v1-5) and names or topic ids (v6; an unknown id answers UNKNOWN_TOPIC_ID),
per-topic errors (UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION for internal topics).
Deletion completes before the answer; the timeout is not used.
"""

from __future__ import annotations

from typing import Any

from strom.broker import admin
from strom.broker.kafka.context import NO_THROTTLE, Context, code, topic_uuid
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import admin_pb2

KEY = 20
VERSIONS = (1, 6)


async def handle(ctx: Context) -> Any:
    body = ctx.body
    core = ctx.core
    await admin.metadata_barrier(core)
    by_id = {topic_uuid(t.topic_id): n for n, t in core.metadata.topics().items()}
    wanted: list[tuple[str | None, Any]] = []
    if ctx.version >= 6:
        for t in body.topics:
            by_topic_id = by_id.get(t.topic_id) if t.topic_id is not None else None
            wanted.append((t.name or by_topic_id, t.topic_id))
    else:
        wanted = [(name, None) for name in body.topic_names]
    ids = {}
    for name, _ in wanted:
        record = core.metadata.topic(name) if name else None
        if record is not None:
            ids[record.name] = topic_uuid(record.topic_id)
    answer = await admin.delete_topics(core, admin_pb2.DeleteTopicsRequest(
        names=[name for name, _ in wanted if name]))
    results = {r.name: r for r in answer.results}
    out = []
    for name, topic_id in wanted:
        r = results.get(name) if name else None
        message: str | None
        if r is None:
            error, message = int(ErrorCode.UNKNOWN_TOPIC_ID), f"topic id {topic_id} is unknown"
        else:
            error, message = r.error_code, r.error_message or None
        out.append(ctx.build("DeletableTopicResult", name=name,
                             topic_id=topic_id or ids.get(name or "", topic_uuid("")),
                             error_code=code(error), error_message=message))
    return ctx.build("DeleteTopicsResponse", throttle_time=NO_THROTTLE, responses=tuple(out))
