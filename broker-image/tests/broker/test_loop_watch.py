"""The loop watch (``STROM_LOOP_WATCH_MS``) names what held the event loop while it was late."""

from __future__ import annotations

import asyncio
import logging
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
