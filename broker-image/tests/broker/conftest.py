"""Fixtures for the broker tests: an in-process BrokerCore (no network) and gRPC stubs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.broker.config import BrokerConfig
from strom.broker.core import BrokerCore

CoreFactory = Callable[..., BrokerCore]


@pytest.fixture
def make_core(tmp_path: Path) -> Iterator[CoreFactory]:
    """``make_core(**config)`` -> a loaded BrokerCore on tmp_path; all are closed at teardown."""
    made: list[BrokerCore] = []

    def make(**settings: Any) -> BrokerCore:
        raw: dict[str, object] = {"log.dirs": str(tmp_path / "data")}
        raw.update({k.replace("_", "."): v for k, v in settings.items()})
        core = BrokerCore.create(BrokerConfig.from_mapping(raw), port=9092)
        core.load()
        made.append(core)
        return core

    yield make
    for core in made:
        core.close()


@pytest.fixture
def core(make_core: CoreFactory) -> BrokerCore:
    return make_core()

