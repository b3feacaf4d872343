"""AlterConfigs (key 33), versions 0-2: replace a topic's config overrides, through the admin
handler the gRPC front uses (:func:`strom.broker.admin.alter_configs`).

Kafka's (non-incremental) meaning: the given configs become the topic's whole set of overrides,
so overrides not named are reverted to their defaults; validated whole before anything changes,
applied live, ``validate_only``. Broker resources answer INVALID_REQUEST (broker configs are
static: change the file and restart), as do other resource types.
"""

from __future__ import annotations

from typing import Any

from strom.broker import admin
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.v1 import admin_pb2

KEY = 33
VERSIONS = (0, 2)
TOPIC = 2


async def handle(ctx: Context) -> Any:
    body = ctx.body
    core = ctx.core
    await admin.metadata_barrier(core)
    request = admin_pb2.AlterConfigsRequest(validate_only=bool(body.validate_only))
    for r in body.resources:
        given = {c.name: c.value for c in r.configs if c.value is not None}
        record = core.metadata.topic(r.resource_name) if r.resource_type == TOPIC else None
        current = set(record.configs) if record is not None else set()
        resource = request.resources.add(delete=sorted(current - set(given)))
        resource.resource.type = r.resource_type
        resource.resource.name = r.resource_name
        resource.set.update(given)
    answer = await admin.alter_configs(core, request)
    return ctx.build("AlterConfigsResponse", throttle_time=NO_THROTTLE, responses=tuple(
        ctx.build("AlterConfigsResourceResponse", error_code=code(result.error_code),
                  error_message=result.error_message or None, resource_type=r.resource_type,
                  resource_name=r.resource_name)
        for r, result in zip(body.resources, answer.results, strict=True)))
