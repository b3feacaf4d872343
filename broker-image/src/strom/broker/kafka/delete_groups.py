"""DeleteGroups (key 42), versions 0-2: delete empty groups and their committed offsets, through
the coordinator's DeleteGroups handler the gRPC front uses.

Supports per-group errors as Kafka returns them: NON_EMPTY_GROUP while members remain,
GROUP_ID_NOT_FOUND, NOT_COORDINATOR for groups another broker coordinates.
"""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator import handlers as groups
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.v1 import group_pb2

KEY = 42
VERSIONS = (0, 2)


async def handle(ctx: Context) -> Any:
    answer = await groups.delete_groups(ctx.core.groups, group_pb2.DeleteGroupsRequest(
        group_ids=list(ctx.body.groups_names)))
    return ctx.build("DeleteGroupsResponse", throttle_time=NO_THROTTLE, results=tuple(
        ctx.build("DeletableGroupResult", group_id=r.group_id, error_code=code(r.error_code))
        for r in answer.results))
