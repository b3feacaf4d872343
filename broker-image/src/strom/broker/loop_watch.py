"""A diagnostic: what the event loop runs while it is late (``STROM_LOOP_WATCH_MS``).

Why: everything of a broker - Raft, heartbeats, Metadata answers, publishing - shares one
asyncio loop; when a controller loses its Raft leadership under load, what matters is what kept
the loop from its Raft messages. asyncio's debug mode logs slow callbacks, but costs on every
coroutine and misses a loop that is late because of many medium callbacks in a row. This
watch measures the loop's lag (a task that sleeps ``interval`` and notes when it woke) and,
from a thread of its own, samples the loop thread's Python stack while the loop is late by more
than the threshold: a few samples per stall show where the time goes. The cyclic garbage
collector's passes are timed too (``gc.callbacks``): a collection holds the GIL, so the sampling
thread cannot see it, and at 10,000 partitions a full (generation 2) pass over the broker's heap
is itself a long turn. Off unless the
environment variable is set (a thread that wakes every ``threshold / 4`` is not free on an idle
broker); benchmarks set it for the brokers they start.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import threading
import time
import traceback
from collections import Counter

__all__ = ["ENV", "LoopWatch", "from_env"]

ENV = "STROM_LOOP_WATCH_MS"

log = logging.getLogger("strom.loop_watch")


class LoopWatch:
    """Samples the loop thread's stack while the loop is more than ``threshold_s`` late."""

    def __init__(self, threshold_s: float) -> None:
        self.threshold_s = threshold_s
        self._interval_s = threshold_s / 4
        self._last_beat = time.monotonic()
        self._stop = threading.Event()
        self._loop_thread = threading.get_ident()
        self._samples: Counter[str] = Counter()
        self._gc_started = 0.0
        self._gc_s = 0.0
        """Seconds the loop thread spent collecting garbage since the last beat."""
        self._gc_full_s = 0.0
        """The longest full (generation 2) collection among them."""
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """From the loop's thread, inside the running loop."""
        self._loop_thread = threading.get_ident()
        self._last_beat = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._beat(), name="loop-watch")
        self._thread = threading.Thread(target=self._watch, name="loop-watch", daemon=True)
        self._thread.start()
        gc.callbacks.append(self._on_gc)

    def stop(self) -> None:
        self._stop.set()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._task is not None:
            self._task.cancel()

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if threading.get_ident() != self._loop_thread:
            return
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        took = time.perf_counter() - self._gc_started
        self._gc_s += took
        if info.get("generation") == 2:
            self._gc_full_s = max(self._gc_full_s, took)

    async def _beat(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(self._interval_s)
            now = time.monotonic()
            self._last_beat = now
            late = now - before - self._interval_s
            if late > self.threshold_s:
                top = ", ".join(f"{n} x {where}" for where, n in self._samples.most_common(3))
                log.warning("the event loop was %d ms late (garbage collection %d ms of it, "
                            "longest full collection %d ms); sampled: %s", int(late * 1000),
                            int(self._gc_s * 1000), int(self._gc_full_s * 1000),
                            top or "nothing (a stall shorter than a sample)")
            self._samples.clear()
            self._gc_s = self._gc_full_s = 0.0

    def _watch(self) -> None:
        while not self._stop.wait(self._interval_s):
            if time.monotonic() - self._last_beat < self.threshold_s:
                continue
            frame = sys._current_frames().get(self._loop_thread)
            if frame is None:
                continue
            self._samples[_where(frame)] += 1


def _where(frame: object) -> str:
    """The innermost frames of the stack that are Strom's (the callers that own the time)."""
    stack = traceback.extract_stack(frame)  # type: ignore[arg-type]
    ours = [f for f in stack if "/strom/" in f.filename]
    picked = (ours or stack)[-3:]
    inner = stack[-1]
    parts = [f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in picked]
    if picked and picked[-1] is not inner:
        parts.append(f"... {os.path.basename(inner.filename)}:{inner.lineno} {inner.name}")
    return " < ".join(reversed(parts))


def from_env() -> LoopWatch | None:
    """A watch with the threshold the environment asks for, or None (the default)."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return None
    try:
        ms = float(value)
    except ValueError:
        log.warning("%s=%r is not a number of milliseconds; the loop watch is off", ENV, value)
        return None
    return LoopWatch(ms / 1000) if ms > 0 else None
