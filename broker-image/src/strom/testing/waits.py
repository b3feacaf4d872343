"""Bounded waits on a condition, for tests: instead of ``sleep(x)`` and hoping ``x`` was enough,
poll what the test is really waiting for and fail, naming it, when it does not come in time.

A fixed sleep is either too long (slow suite) or, on a loaded machine, too short (flaky test);
a condition wait is as short as it can be and its timeout can be generous.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["async_wait_until", "wait_until"]


def wait_until(condition: Callable[[], object], timeout_s: float = 10.0, *,
               what: str = "the condition", interval_s: float = 0.01) -> float:
    """Poll ``condition`` until it is true; the seconds it took, AssertionError naming ``what``
    after ``timeout_s``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)
    return time.monotonic() - started


async def async_wait_until(condition: Callable[[], object], timeout_s: float = 10.0, *,
                           what: str = "the condition", interval_s: float = 0.001) -> float:
    """:func:`wait_until` on an event loop: other tasks run between the polls."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(interval_s)
    return time.monotonic() - started
