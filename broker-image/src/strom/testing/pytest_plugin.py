"""The ``integration`` marker, given by fixture and checked at run time, and the xdist groups
that keep shared fixtures in one worker (loaded with ``-p strom.testing.pytest_plugin``, in the
root pyproject's pytest ``addopts``).

Every test that starts a process carries the marker, so ``-m "not integration"`` is the fast,
process-free part of the suite. Marking by hand is easy to forget, so:

- at collection, a test that uses a fixture flagged with
  :func:`strom.testing.process.starts_processes` (directly or through other fixtures; those
  made by :func:`strom.testing.broker_fixture` and :func:`strom.testing.kafka.kafka_fixture` are
  flagged) gets the marker;
- at run time, a test during whose set-up or call a :class:`strom.testing.process.ManagedProcess`
  was started (every broker, cluster and Kafka node of ``strom.testing``) fails if it still lacks
  the marker, naming the process, so a missing marker is found the first time the test runs.

Under pytest-xdist (``pytest -n 2``; ``--dist loadgroup`` is in ``addopts``) each worker is its
own process with its own fixture instances: a session-scoped Spark session or Kafka reference
cluster would start once per worker (two Spark JVMs on 2 cores made Python workers fail to
connect back), and tests sharing a module's broker would pay its start-up twice. So every test
that uses a fixture wider than a function (the project's own, or any flagged one) gets an
``xdist_group`` mark; tests that share such a fixture instance, directly or through a chain of
other tests, get the same group (:func:`shared_groups`), and xdist runs a group on one worker.
The group is named by the widest-scoped fixture instance of its chain (e.g.
``session:spark-jobs/tests::spark``), the same in every worker's collection (xdist requires
identical test ids).
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterable, Sequence
from typing import Any

import pytest

from strom.testing.process import started_processes

# grpcio 1.81.1 and later (1.85.1 here) with fork support on restart their event-engine poller
# in a forked child; when the child then closes its inherited descriptors before exec
# (subprocess's close_fds, after a preexec_fn forced fork() instead of vfork) the poller finds
# its epoll fd gone and aborts the child (grpc/grpc#43055, open). pyspark launches its JVM
# gateway so, from a pytest process whose earlier tests left grpc channels: in ci11 every
# Spark test failed with JAVA_GATEWAY_EXITED after "epoll_wait error: Bad file descriptor".
# The test process uses no gRPC in a forked child, so fork support is off before grpc loads
# (the plugin is imported before any test module; processes it starts inherit the setting).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

MARKER = "integration"
GROUP_MARKER = "xdist_group"
_BEFORE = pytest.StashKey[int]()


def _flagged(fixturedefs: Any) -> bool:
    return any(getattr(d.func, "__strom_starts_processes__", False) for d in fixturedefs)


def shared_groups(keys: Sequence[Iterable[str]]) -> list[str | None]:
    """Per item, the name of its group, given each item's shared-fixture instance keys: items
    linked by a common key (directly or through other items) share a group, named by the
    greatest key among them; an item with no key has no group (None). Pure: no pytest."""
    parent: dict[str, str] = {}

    def root(k: str) -> str:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    listed = [sorted(set(ks)) for ks in keys]
    for ks in listed:
        for k in ks:
            parent.setdefault(k, k)
        for k in ks[1:]:
            a, b = root(ks[0]), root(k)
            if a != b:
                parent[min(a, b)] = max(a, b)  # the root is always the greatest key
    return [root(ks[0]) if ks else None for ks in listed]


def _instance_key(item: pytest.Item, fixturedef: Any) -> str | None:
    """Which instance of a fixture wider than a function ``item`` gets, as a string starting
    with its scope (``session`` > ``package`` > ``module`` > ``class`` in string order too, so a
    group is named by its widest fixture), or None for a function-scoped one and for a
    plugin's own fixture that starts nothing (pytest's ``tmp_path_factory``, pytest-asyncio's
    loops): those cost nothing to have twice."""
    scope = fixturedef.scope
    if scope == "function":
        return None
    if not fixturedef.baseid and not getattr(fixturedef.func, "__strom_starts_processes__",
                                             False):
        return None
    name = fixturedef.argname
    if scope in ("session", "package"):
        return f"{scope}:{fixturedef.baseid or '<plugin>'}::{name}"
    node = item.getparent(pytest.Module if scope == "module" else pytest.Class)
    return f"{scope}:{(node or item).nodeid}::{name}"


@pytest.hookimpl(tryfirst=True)  # before xdist's worker adds the group to the test id
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    keys: list[list[str]] = []
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs if info is not None else {}
        if item.get_closest_marker(MARKER) is None and any(_flagged(d) for d in defs.values()):
            item.add_marker(MARKER)
        # the last definition of a name is the one the test gets (a closer override)
        found = (_instance_key(item, d[-1]) for d in defs.values() if d)
        keys.append([k for k in found if k is not None])
    for item, group in zip(items, shared_groups(keys), strict=True):
        if group is not None and item.get_closest_marker(GROUP_MARKER) is None:
            item.add_marker(pytest.mark.xdist_group(group))


class _GroupIds:
    """A second ``pytest_collection_modifyitems``, after xdist's (registered by
    :func:`pytest_configure`: a module has one function per hook name)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        suffix_group_ids(config, items)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_GroupIds(), "strom-xdist-group-ids")


def suffix_group_ids(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker under ``--dist loadgroup``, give each grouped test id its ``@group``
    suffix if xdist could not: the scheduler groups by that suffix, and xdist 3.8 writes it to
    ``item._nodeid``, which pytest 9.2 no longer reads (structured node ids; pytest-xdist issue
    1386, fix pending in PR 1388), so every group would silently be split across workers."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import NodeId  # pytest >= 9.2 only; older ones took xdist's suffix

    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers(GROUP_MARKER)})
        suffix = f"@{'_'.join(names)}"
        if names and not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)


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
