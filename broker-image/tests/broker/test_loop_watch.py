"""The loop watch (``STROM_LOOP_WATCH_MS``) names what held the event loop while it was late."""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import time
from collections.abc import Callable

import pytest

from strom.broker import loop_watch


def _hold_the_loop(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))


async def _late_messages(caplog: pytest.LogCaptureFixture, stall: Callable[[], None],
                         logged: Callable[[str], bool]) -> list[str]:
    """Run ``stall`` on the loop under a watch of 40 ms, again after each half second with no
    line that says what ``logged`` looks for, until one does (30 s at most); the late turns
    logged. Not until the first late turn: on a loaded machine a turn late for want of a CPU
    may come before the stall's ("83 ms late; sampled: nothing" in a run beside 4 busy
    loops). And again, not once: the sampling thread needs a CPU during the stall, and in a
    full CI run it got none during a 0.4 s stall ("413 ms late; sampled: nothing"). A watch
    that never names the holder still fails the test."""
    watch = loop_watch.LoopWatch(0.04)
    watch.start()

    def late() -> list[str]:
        return [r.message for r in caplog.records if "late" in r.message]

    try:
        await asyncio.sleep(0.05)
        with caplog.at_level(logging.WARNING, logger="strom.loop_watch"):
            async with asyncio.timeout(30):
                while not any(logged(m) for m in late()):
                    stall()
                    for _ in range(50):
                        await asyncio.sleep(0.01)
                        if any(logged(m) for m in late()):
                            break
    finally:
        watch.stop()
    return late()


async def test_a_stall_is_logged_with_the_code_that_held_the_loop(
        caplog: pytest.LogCaptureFixture) -> None:
    messages = await _late_messages(caplog, lambda: _hold_the_loop(0.4),
                                    lambda m: "_hold_the_loop" in m)
    assert any("_hold_the_loop" in m for m in messages), messages


async def test_a_full_garbage_collection_is_timed(caplog: pytest.LogCaptureFixture) -> None:
    """A collection holds the GIL, so the sampling thread cannot name it: the watch times it."""
    heap: list[list[object]] = [[] for _ in range(300_000)]
    for item in heap:
        item.append(item)  # cycles, so that a full collection has work to do

    def stall() -> None:
        gc.collect()
        _hold_the_loop(0.2)

    pattern = r"garbage collection (\d+) ms of it, longest full collection (\d+) ms"

    def full_collection_timed(message: str) -> bool:
        found = re.search(pattern, message)
        return found is not None and int(found[2]) > 0

    try:
        messages = await _late_messages(caplog, stall, full_collection_timed)
    finally:
        del heap
    timed = [re.search(pattern, m) for m in messages]
    assert all(t is not None for t in timed), messages
    assert any(t is not None and int(t[2]) > 0 and int(t[1]) >= int(t[2]) for t in timed), \
        messages


async def test_a_loop_that_keeps_up_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    watch = loop_watch.LoopWatch(0.5)
    watch.start()
    try:
        with caplog.at_level(logging.WARNING, logger="strom.loop_watch"):
            for _ in range(20):
                await asyncio.sleep(0.01)
    finally:
        watch.stop()
    assert not caplog.records


def test_off_unless_the_environment_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(loop_watch.ENV, raising=False)
    assert loop_watch.from_env() is None
    monkeypatch.setenv(loop_watch.ENV, "nonsense")
    assert loop_watch.from_env() is None
    monkeypatch.setenv(loop_watch.ENV, "250")
    watch = loop_watch.from_env()
    assert watch is not None and watch.threshold_s == 0.25
