"""Graceful stop on SIGTERM / SIGINT for the long-running processes (broker, controller), and
the one way their parts stop background tasks.

Kubernetes stops pods with SIGTERM; every server turns it into one asyncio Event its serve loop
awaits, and must take its handlers away again when it returns (in-process tests run several
servers on one loop, off the main thread, where handlers cannot be installed at all).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterable, Iterator
from typing import Any


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """Set ``stop`` on SIGTERM/SIGINT while inside the block; remove the handlers on exit."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (in-process tests): rely on ``stop`` being set
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel background tasks and wait until each has ended, whatever it ended with.

    Stopping must not fail because a task already failed (its error was logged where it
    happened), and must not return while a task still touches state the caller is about to close.
    """
    pending = list(tasks)
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
