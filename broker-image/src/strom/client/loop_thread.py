"""A private asyncio event loop on a daemon thread, for the synchronous clients.

The sync ``Producer``, ``Consumer`` and ``Admin`` share their protocol code with the asyncio
clients: the async core runs on this loop, and the sync front either calls into it
(``run``, for control calls) or, on the hot paths, shares lock-protected state with it directly.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._started.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        self.loop.run_forever()
        # drain what close() left scheduled, then close the loop
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result from the calling thread."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a sync Strom client was called from its own callback thread")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            raise

    def call_soon(self, fn: Any, *args: Any) -> None:
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn, *args)

    @property
    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self, timeout: float | None = 10.0) -> None:
        if self._thread.is_alive():
            self.call_soon(self.loop.stop)
            self._thread.join(timeout)
