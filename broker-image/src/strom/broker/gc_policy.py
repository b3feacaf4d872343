"""Full garbage collections that cost what is new, not the whole heap (issue 21 item 3).

Why: CPython's cyclic collector runs a *full* (generation 2) pass whenever the objects promoted
since the last one exceed a quarter of those that survived it, and a full pass visits every
tracked object of the process while holding the GIL. A broker hosting 10,000 partitions holds
millions of long-lived objects (logs, segments, partition state, the metadata image), so each
full pass stalls its one event loop - Raft, heartbeats, replication, every request - for as
long as it takes: with the loop watch timing collections, the 10,000-partition runs at load
20-25 spent 21-46 % of the loop's lateness collecting garbage, 16-26 full passes per broker in
seven minutes, the longest 4.2-19.5 s of wall time, enough to depose a Raft leader or fence a
broker that was alive.

What this does (the ``gc.freeze`` practice of large Python servers): after a full pass, the
objects that survived it are *frozen* (moved to the permanent generation, which collections
skip), so the next full pass visits only what was promoted since. Frozen objects that later
become cyclic garbage are not reclaimed while frozen, so the freeze is not forever: once the
frozen count has grown to ``regrow`` times what it was after the last pass over everything,
everything is thawed and the next full pass visits the whole heap once more (then freezes
again). The heap's long-lived part grows by ``regrow`` (4) between two whole passes, so whole
passes are logarithmic in the heap's growth (a few during a creation of 10,000 partitions,
none while it only serves), and leaked cycles are bounded by the frozen part's growth.
Objects freed by reference counting (almost all) are freed at once, frozen or not. Measured
with a synthetic heap growing to 3.5 million objects (100,000 long-lived and 50,000 cyclic
garbage objects a step, load ~25): 19 full passes of 0.2-9.5 s (14 over a second, ~80 s in
all) without; with a regrowth of 2, 62 passes, 57 of them over the new objects only (mostly
5-200 ms) and 5 whole ones (0.5-7.2 s; ~16 s in all).

Process-wide: installed by the broker's entry point (``strom.broker.server.run``), never by
in-process test brokers.
"""

from __future__ import annotations

import gc
import logging

__all__ = ["FreezeSurvivors"]

log = logging.getLogger(__name__)

#: Below this many frozen objects the regrowth rule does not thaw (a fresh broker's heap).
FLOOR = 200_000


class FreezeSurvivors:
    """Freezes the survivors of each full collection; thaws for one whole pass each time the
    frozen part has grown ``regrow`` times."""

    def __init__(self, regrow: float = 4.0, floor: int = FLOOR) -> None:
        self.regrow = regrow
        self.floor = floor
        self.baseline = 0
        """Frozen objects right after the last pass over the whole heap."""
        self.thawed = True
        """The next full pass visits the whole heap (nothing is frozen)."""
        self.whole_passes = 0
        self.partial_passes = 0

    def install(self) -> None:
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)

    def uninstall(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        gc.unfreeze()

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info.get("generation") == 2:
            self.after_full_pass()

    def after_full_pass(self) -> None:
        """Called when a full collection is done: freeze what survived it, or thaw."""
        gc.freeze()
        frozen = gc.get_freeze_count()
        if self.thawed:
            self.whole_passes += 1
            self.baseline = frozen
            self.thawed = False
            return
        self.partial_passes += 1
        if frozen > self.regrow * max(self.baseline, self.floor):
            gc.unfreeze()  # the next full pass visits everything (and reclaims frozen cycles)
            self.thawed = True
            log.info("%d objects frozen since the last whole collection (%d then): the next "
                     "one visits the whole heap", frozen, self.baseline)
