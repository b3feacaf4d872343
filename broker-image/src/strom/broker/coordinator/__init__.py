"""The broker side of consumer groups: coordinators of ``__consumer_offsets`` partitions.

- ``settings``: the ``offsets.*`` / ``group.*`` broker keys as one frozen value.
- ``partition``: the coordinator runtime of one partition (groups, offsets, timer, writes).
- ``loader``: replaying a partition's log when its leadership arrives.
- ``coordinator``: which partitions this broker serves, topic creation, routing, housekeeping.
- ``handlers``: the ``strom.v1.Group`` RPCs.

The rules themselves (membership, record layouts, expiry, lag) are pure, in ``strom.groups``.
"""

from strom.broker.coordinator.coordinator import GroupCoordinator
from strom.broker.coordinator.settings import GroupSettings

__all__ = ["GroupCoordinator", "GroupSettings"]
