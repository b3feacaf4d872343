"""Fixtures for the broker tests: an in-process, started BrokerCore (no gRPC server).

A core started without a server is a cluster of one: its Raft member is the only voter and
answers its own proposals and heartbeats locally, so handlers can be driven directly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from strom.broker.config import BrokerConfig
from strom.broker.core import BrokerCore
from strom.testing import free_port

CoreFactory = Callable[..., Awaitable[BrokerCore]]


@pytest.fixture
async def make_core(tmp_path: Path) -> AsyncIterator[CoreFactory]:
    """``await make_core(**config)`` -> a started BrokerCore on tmp_path; stopped at teardown."""
    made: list[BrokerCore] = []

    async def make(**settings: Any) -> BrokerCore:
        raw: dict[str, object] = {"log.dirs": str(tmp_path / "data")}
        raw.update({k.replace("_", "."): v for k, v in settings.items()})
        core = BrokerCore.create(BrokerConfig.from_mapping(raw), port=free_port())
        core.load()
        await core.start()
        made.append(core)
        return core

    yield make
    for core in made:
        await core.stop()


@pytest.fixture
async def core(make_core: CoreFactory) -> BrokerCore:
    return await make_core()
