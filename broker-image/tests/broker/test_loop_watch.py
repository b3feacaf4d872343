"""The loop watch (``STROM_LOOP_WATCH_MS``) names what held the event loop while it was late."""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import time

import pytest

from strom.broker import loop_watch


def _hold_the_loop(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))


async def test_a_stall_is_logged_with_the_code_that_held_the_loop(
        caplog: pytest.LogCaptureFixture) -> None:
    watch = loop_watch.LoopWatch(0.04)
    watch.start()
    try:
        await asyncio.sleep(0.05)
        with caplog.at_level(logging.WARNING, logger="strom.loop_watch"):
            _hold_the_loop(0.4)
            async with asyncio.timeout(5):
                while not any("late" in r.message for r in caplog.records):
                    await asyncio.sleep(0.01)
    finally:
        watch.stop()
    (record,) = [r for r in caplog.records if "late" in r.message]
    assert "_hold_the_loop" in record.message, record.message


async def test_a_full_garbage_collection_is_timed(caplog: pytest.LogCaptureFixture) -> None:
    """A collection holds the GIL, so the sampling thread cannot name it: the watch times it."""
    watch = loop_watch.LoopWatch(0.04)
    watch.start()
    heap = [[] for _ in range(300_000)]
    for item in heap:
        item.append(item)  # cycles, so that a full collection has work to do
    try:
        await asyncio.sleep(0.05)
        with caplog.at_level(logging.WARNING, logger="strom.loop_watch"):
            gc.collect()
            _hold_the_loop(0.2)
            async with asyncio.timeout(5):
                while not any("late" in r.message for r in caplog.records):
                    await asyncio.sleep(0.01)
    finally:
        watch.stop()
        del heap
    (record,) = [r for r in caplog.records if "late" in r.message]
    found = re.search(r"garbage collection (\d+) ms of it, longest full collection (\d+) ms",
                      record.message)
    assert found is not None, record.message
    assert int(found[2]) > 0 and int(found[1]) >= int(found[2]), record.message


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
