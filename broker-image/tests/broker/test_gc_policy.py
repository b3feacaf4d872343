"""The broker's garbage-collection policy (``strom.broker.gc_policy``): full collections visit
what is new; the whole heap again only after the frozen part has grown ``regrow`` times, and
then cyclic garbage that was frozen is reclaimed."""

from __future__ import annotations

import gc
import weakref

from strom.broker.gc_policy import FreezeSurvivors


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic collector frees it


def test_survivors_are_frozen_then_thawed_for_one_whole_pass() -> None:
    policy = FreezeSurvivors(regrow=2.0, floor=10)
    policy.install()
    enabled = gc.isenabled()
    gc.disable()  # only the test's own collections: their order is the point
    try:
        gc.collect()
        assert policy.whole_passes == 1 and not policy.thawed
        baseline = gc.get_freeze_count()
        assert baseline == policy.baseline > 0
        # a cycle that becomes garbage after it was frozen stays while frozen
        node = _Node()
        gc.collect()
        dead = weakref.ref(node)
        del node
        gc.collect()
        assert policy.partial_passes == 2 and dead() is not None
        # the frozen part grows past twice the baseline: thawed for one whole pass
        kept: list[list[object]] = [[] for _ in range(2 * baseline + 1000)]
        gc.collect()
        assert policy.thawed and gc.get_freeze_count() == 0
        gc.collect()  # the whole heap: the frozen cycle is reclaimed, survivors frozen again
        assert dead() is None
        assert policy.whole_passes == 2 and not policy.thawed
        assert gc.get_freeze_count() >= len(kept)
    finally:
        policy.uninstall()
        if enabled:
            gc.enable()
    assert gc.get_freeze_count() == 0 and _on_gc_removed(policy)


def _on_gc_removed(policy: FreezeSurvivors) -> bool:
    return all(getattr(cb, "__self__", None) is not policy for cb in gc.callbacks)
