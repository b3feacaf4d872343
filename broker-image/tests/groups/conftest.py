"""A started single-broker core with a group coordinator wired as ``broker/core.py`` will wire it.

Handlers are driven directly (no gRPC server): the core's Raft member is the only voter, so topic
creation and leadership are local. ``Node.stop`` stops the coordinator before the core, as the
broker must.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from strom.broker.config import BrokerConfig
from strom.broker.coordinator import GroupCoordinator, GroupSettings
from strom.broker.core import BrokerCore
from strom.testing import free_port

FAST = {
    "group.initial.rebalance.delay.ms": 200,
    "group.min.session.timeout.ms": 100,
    "offsets.topic.num.partitions": 3,
}


@dataclass
class Node:
    core: BrokerCore
    groups: GroupCoordinator

    async def stop(self) -> None:
        await self.groups.stop()
        await self.core.stop()


NodeFactory = Callable[..., Awaitable[Node]]


def wire(core: BrokerCore) -> GroupCoordinator:
    """The core's own coordinator once ``core.py`` wires one (started by ``core.start``), else
    one wired here as ``core.py`` will (start it after ``core.start``). Partition-count changes
    are polled every 100 ms instead of every second."""
    groups = getattr(core, "groups", None)
    if not isinstance(groups, GroupCoordinator):
        groups = GroupCoordinator(GroupSettings.from_config(core.config), core.config.broker_id,
                                  core.metadata, core.replicas, core.topics, core.metrics)
        core.publisher.on_leadership = groups.on_leadership
    groups.settings = dataclasses.replace(groups.settings, metadata_poll_ms=100)
    return groups


@pytest.fixture
async def make_node(tmp_path: Path) -> AsyncIterator[NodeFactory]:
    made: list[Node] = []

    async def make(**settings: Any) -> Node:
        raw: dict[str, object] = {"log.dirs": str(tmp_path / "data"), **FAST}
        raw.update({k.replace("_", "."): v for k, v in settings.items()})
        config = BrokerConfig.from_mapping(raw)
        core = BrokerCore.create(config, port=free_port())
        core.load()
        groups = wire(core)
        await core.start()
        if not groups.started:
            await groups.start()
        node = Node(core, groups)
        made.append(node)
        return node

    yield make
    for node in made:
        await node.stop()


@pytest.fixture
async def node(make_node: NodeFactory) -> Node:
    return await make_node()
