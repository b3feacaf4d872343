"""LeaveGroup (key 13), versions 0-5: members leave at once (no session timeout wait), through
the coordinator's LeaveGroup handler the gRPC front uses.

Supports one member (v0-2) and batches of members with per-member errors (v3+, KIP-345, static
members by ``group_instance_id``). The ``reason`` (v5) is not recorded.
"""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator import handlers as groups
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.v1 import group_pb2

KEY = 13
VERSIONS = (0, 5)


async def handle(ctx: Context) -> Any:
    body = ctx.body
    if ctx.version >= 3:
        members = [(m.member_id, m.group_instance_id or "") for m in body.members]
    else:
        members = [(body.member_id, "")]
    request = group_pb2.LeaveGroupRequest(group_id=body.group_id)
    for member_id, instance in members:
        request.members.add(member_id=member_id, group_instance_id=instance)
    answer = await groups.leave_group(ctx.core.groups, request)
    errors = list(answer.member_error_codes) or [answer.error_code] * len(members)
    responses = tuple(
        ctx.build("MemberResponse", member_id=member_id, group_instance_id=instance or None,
                  error_code=code(error))
        for (member_id, instance), error in zip(members, errors, strict=False)
    ) if ctx.version >= 3 else ()
    top = answer.error_code
    if ctx.version < 3 and not top and errors:
        top = errors[0]
    return ctx.build("LeaveGroupResponse", throttle_time=NO_THROTTLE, error_code=code(top),
                     members=responses)
