"""IncrementalAlterConfigs (key 44), versions 0-1: change single topic configs (KIP-339),
through the admin handler the gRPC front uses (:func:`strom.broker.admin.alter_configs`).

Supports SET (0) and DELETE (1: back to the default) and, for list configs such as
``cleanup.policy``, APPEND (2) and SUBTRACT (3) on the current value; every change of a resource
is validated before any is applied; ``validate_only``. Broker resources answer INVALID_REQUEST
(static configs), as do other resource types and unknown operations.
"""

from __future__ import annotations

from typing import Any

from strom.broker import admin
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import admin_pb2

KEY = 44
VERSIONS = (0, 1)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


async def handle(ctx: Context) -> Any:
    body = ctx.body
    core = ctx.core
    await admin.metadata_barrier(core)
    request = admin_pb2.AlterConfigsRequest(validate_only=bool(body.validate_only))
    bad: dict[int, str] = {}
    for i, r in enumerate(body.resources):
        resource = request.resources.add()
        resource.resource.type = r.resource_type
        resource.resource.name = r.resource_name
        current = await _current(ctx, r) if any(
            c.config_operation in (APPEND, SUBTRACT) for c in r.configs) else {}
        for c in r.configs:
            op, value = c.config_operation, c.value or ""
            if op == SET:
                resource.set[c.name] = value
            elif op == DELETE:
                resource.delete.append(c.name)
            elif op in (APPEND, SUBTRACT):
                items = [v for v in current.get(c.name, "").split(",") if v]
                change = [v for v in value.split(",") if v]
                if op == APPEND:
                    items += [v for v in change if v not in items]
                else:
                    items = [v for v in items if v not in change]
                resource.set[c.name] = ",".join(items)
            else:
                bad[i] = (f"config_operation={op} for {c.name!r} is not one of 0 (SET), "
                          f"1 (DELETE), 2 (APPEND), 3 (SUBTRACT)")
    for i in sorted(bad, reverse=True):
        del request.resources[i]
    answer = await admin.alter_configs(core, request)
    results = iter(answer.results)
    out = []
    for i, r in enumerate(body.resources):
        message: str | None
        if i in bad:
            error, message = int(ErrorCode.INVALID_REQUEST), bad[i]
        else:
            result = next(results)
            error, message = result.error_code, result.error_message or None
        out.append(ctx.build("AlterConfigsResourceResponse", error_code=code(error),
                             error_message=message, resource_type=r.resource_type,
                             resource_name=r.resource_name))
    return ctx.build("IncrementalAlterConfigsResponse", throttle_time=NO_THROTTLE,
                     responses=tuple(out))


async def _current(ctx: Context, r: Any) -> dict[str, str]:
    request = admin_pb2.DescribeConfigsRequest()
    request.resources.add(type=r.resource_type, name=r.resource_name)
    answer = await admin.describe_configs(ctx.core, request)
    return {e.name: e.value for e in answer.results[0].entries}
