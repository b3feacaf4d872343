"""CreatePartitions (key 37), versions 0-3: grow topics, through the admin handler the gRPC
front uses (:func:`strom.broker.admin.create_partitions`), after the same metadata barrier.

Supports grow-only counts (INVALID_PARTITIONS to shrink or keep), ``validate_only``, the
``max.partitions.per.request`` bound, per-topic errors.

Not supported: caller-chosen assignments of the new partitions (INVALID_REQUEST with the reason).
"""

from __future__ import annotations

from typing import Any

from strom.broker import admin
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import admin_pb2

KEY = 37
VERSIONS = (0, 3)


async def handle(ctx: Context) -> Any:
    body = ctx.body
    await admin.metadata_barrier(ctx.core)
    out = []
    for t in body.topics:
        message: str | None
        if t.assignments:
            error, message = int(ErrorCode.INVALID_REQUEST), (
                "replica assignments are chosen by Strom (rack-aware); leave assignments null")
        else:
            answer = await admin.create_partitions(ctx.core, admin_pb2.CreatePartitionsRequest(
                topic=t.name, new_total_count=t.count, validate_only=bool(body.validate_only)))
            error, message = answer.result.error_code, answer.result.error_message or None
        out.append(ctx.build("CreatePartitionsTopicResult", name=t.name, error_code=code(error),
                             error_message=message))
    return ctx.build("CreatePartitionsResponse", throttle_time=NO_THROTTLE, results=tuple(out))
