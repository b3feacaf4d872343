"""FindCoordinator (key 10), versions 0-6: the broker coordinating a consumer group, through the
core's :meth:`GroupCoordinator.find_coordinator` (the gRPC front's call), answered with that
broker's endpoint on *this* Kafka listener.

Supports group keys (key type 0) one at a time (v0-3) or batched (v4+, KIP-699), creating
``__consumer_offsets`` on first use; COORDINATOR_NOT_AVAILABLE while its partition has no leader.

Not supported: transaction coordinators (key type 1: transactions do not exist yet, answered
INVALID_REQUEST with the reason, so a transactional producer fails fast), share
groups (key type 2).
"""

from __future__ import annotations

from typing import Any

from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.errors import ErrorCode, StromError

KEY = 10
VERSIONS = (0, 6)
GROUP_KEY = 0


async def handle(ctx: Context) -> Any:
    body = ctx.body
    keys = list(body.coordinator_keys) if ctx.version >= 4 else [body.key]
    key_type = getattr(body, "key_type", GROUP_KEY)
    answers = [await _find(ctx, key, key_type) for key in keys]
    if ctx.version >= 4:
        coordinators = tuple(
            ctx.build("Coordinator", key=key, node_id=node, host=host, port=port,
                      error_code=code(error), error_message=message)
            for key, (error, message, node, host, port) in zip(keys, answers, strict=True))
        return ctx.build("FindCoordinatorResponse", throttle_time=NO_THROTTLE,
                         coordinators=coordinators)
    error, message, node, host, port = answers[0]
    return ctx.build("FindCoordinatorResponse", throttle_time=NO_THROTTLE,
                     error_code=code(error), error_message=message, node_id=node, host=host,
                     port=port)


async def _find(ctx: Context, key: str, key_type: int
                ) -> tuple[int, str | None, int, str, int]:
    if key_type != GROUP_KEY:
        return (int(ErrorCode.INVALID_REQUEST),
                f"key_type={key_type}: Strom has consumer group coordinators only (no "
                f"transactions, no share groups)", -1, "", -1)
    try:
        broker, _ = await ctx.core.groups.find_coordinator(key)
    except StromError as err:
        return int(err.code), err.message, -1, "", -1
    for b in ctx.core.metadata.live_brokers(ctx.listener):
        if b.broker_id == broker.broker_id and b.host:
            return 0, None, b.broker_id, b.host, b.port
    return (int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
            f"the coordinator, broker {broker.broker_id}, has no {ctx.listener} listener",
            -1, "", -1)
