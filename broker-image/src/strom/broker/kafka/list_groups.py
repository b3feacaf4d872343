"""ListGroups (key 16), versions 0-5: the groups this broker coordinates (admin clients ask
every broker, as with Kafka), through the coordinator's ListGroups handler the gRPC front uses.

Supports state filters (v4+, case-insensitive as in Kafka) and type filters (v5+: every group is
``classic``, so a filter without ``classic`` lists none); COORDINATOR_LOAD_IN_PROGRESS while a
``__consumer_offsets`` partition loads.
"""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator import handlers as groups
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.v1 import group_pb2

KEY = 16
VERSIONS = (0, 5)
CLASSIC = "classic"


async def handle(ctx: Context) -> Any:
    body = ctx.body
    types = {t.lower() for t in getattr(body, "types_filter", ())}
    answer = await groups.list_groups(ctx.core.groups, group_pb2.ListGroupsRequest(
        states=list(getattr(body, "states_filter", ()))))
    listed = () if types and CLASSIC not in types else tuple(
        ctx.build("ListedGroup", group_id=g.group_id, protocol_type=g.protocol_type,
                  group_state=g.state, group_type=CLASSIC)
        for g in answer.groups)
    return ctx.build("ListGroupsResponse", throttle_time=NO_THROTTLE,
                     error_code=code(answer.error_code), groups=listed)
