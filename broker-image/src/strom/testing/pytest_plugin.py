"""The ``integration`` marker, given by fixture and checked at run time (loaded with
``-p strom.testing.pytest_plugin``, in the root pyproject's pytest ``addopts``).

Every test that starts a process carries the marker, so ``-m "not integration"`` is the fast,
process-free part of the suite. Marking by hand is easy to forget, so:

- at collection, a test that uses a fixture flagged with
  :func:`strom.testing.process.starts_processes` (directly or through other fixtures; those
  made by :func:`strom.testing.broker_fixture` and :func:`strom.testing.kafka.kafka_fixture` are
  flagged) gets the marker;
- at run time, a test during whose set-up or call a :class:`strom.testing.process.ManagedProcess`
  was started (every broker, cluster and Kafka node of ``strom.testing``) fails if it still lacks
  the marker, naming the process, so a missing marker is found the first time the test runs.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from strom.testing.process import started_processes

MARKER = "integration"
_BEFORE = pytest.StashKey[int]()


def _flagged(fixturedefs: Any) -> bool:
    return any(getattr(d.func, "__strom_starts_processes__", False) for d in fixturedefs)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None or item.get_closest_marker(MARKER) is not None:
            continue
        if any(_flagged(defs) for defs in info.name2fixturedefs.values()):
            item.add_marker(MARKER)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_BEFORE] = len(started_processes())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    result = yield
    before = item.stash.get(_BEFORE, None)
    started = started_processes()[before:] if before is not None else ()
    if started and item.get_closest_marker(MARKER) is None:
        pytest.fail(f"{item.nodeid} started {', '.join(started)} but is not marked "
                    f"'{MARKER}': add pytestmark = pytest.mark.{MARKER}, or flag the fixture "
                    f"that starts it with strom.testing.process.starts_processes",
                    pytrace=False)
    return result
