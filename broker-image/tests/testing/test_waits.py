"""Bounded condition waits return as soon as the condition holds and fail, naming it, after
their timeout."""

from __future__ import annotations

import asyncio
import time

import pytest

from strom.testing.waits import async_wait_until, wait_until


def test_returns_once_the_condition_holds() -> None:
    ready_at = time.monotonic() + 0.05
    took = wait_until(lambda: time.monotonic() >= ready_at, 5, what="the moment")
    assert 0.04 <= took < 2


def test_fails_naming_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match=r"after 0.05 s waiting for the impossible"):
        wait_until(lambda: False, 0.05, what="the impossible")


async def test_the_async_wait_lets_other_tasks_run() -> None:
    done: list[int] = []

    async def later() -> None:
        await asyncio.sleep(0.02)
        done.append(1)

    task = asyncio.create_task(later())
    await async_wait_until(lambda: done, 5, what="the other task")
    await task
    with pytest.raises(AssertionError, match="waiting for nothing"):
        await async_wait_until(lambda: False, 0.02, what="nothing")
