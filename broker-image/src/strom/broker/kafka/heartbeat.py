"""Heartbeat (key 12), versions 0-4: a member says it is alive, through the coordinator's
Heartbeat handler the gRPC front uses; REBALANCE_IN_PROGRESS tells it to rejoin.

Supports static members (v3+ ``group_instance_id``). Not supported: nothing else is in the API.
"""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator import handlers as groups
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.v1 import group_pb2

KEY = 12
VERSIONS = (0, 4)


async def handle(ctx: Context) -> Any:
    body = ctx.body
    answer = await groups.heartbeat(ctx.core.groups, group_pb2.HeartbeatRequest(
        group_id=body.group_id, member_id=body.member_id, generation=body.generation_id,
        group_instance_id=getattr(body, "group_instance_id", None) or ""))
    return ctx.build("HeartbeatResponse", throttle_time=NO_THROTTLE,
                     error_code=code(answer.error_code))
