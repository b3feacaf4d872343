"""The asyncio side of supervision: spawn long-lived tasks, restart them or stop the process.

Every long-lived task of a broker or controller is started with :func:`spawn` (or reports the
unexpected exceptions its own loop catches with :func:`failed`), so none can die silently.
Failures are logged (rate-limited, with a traceback at most once per task and interval) and
counted; the :class:`~strom.supervision.policy.RestartPolicy` decides between restarting after a
backoff and escalating. Escalation calls the :class:`Supervisor`'s ``on_fatal`` - the broker
turns ``/readyz`` to 503 and exits non-zero - and the failed task ends.

The supervisor in charge is found through a context variable: a server sets it with
:meth:`Supervisor.install` before it starts its parts, and every task created from there inherits
it (asyncio copies the context into each new task), so parts need no extra constructor argument
and several servers in one process (in-process tests) each keep their own. With no supervisor
installed (unit tests of one part), a failure is logged and the task ends as before.

Test hook: ``STROM_FAULT_TASK=<task name>[@seconds]`` makes that task fail with
:class:`InjectedFault` once: when it first starts, or after running that many seconds (its work
is cancelled and the failure handled like any other), to exercise the whole path in a real
process.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import time
from collections.abc import Callable, Coroutine
from typing import Any

from strom.ratelimit import RateLimitedLog
from strom.supervision.policy import Escalate, RestartPolicy, TaskHistory

__all__ = ["FAULT_ENV", "FatalError", "InjectedFault", "Supervisor", "current", "failed", "spawn"]

log = logging.getLogger("strom.supervision")
_log = RateLimitedLog(log)

FAULT_ENV = "STROM_FAULT_TASK"

OnFatal = Callable[[str, BaseException], None]


class FatalError(Exception):
    """A failure no restart can cure, whose message says everything (what failed and the fix),
    e.g. the metadata log's disk: it escalates at once, even in a restartable task, and is
    logged as that one line, without a traceback."""


class InjectedFault(RuntimeError):
    """Raised by a task named in ``STROM_FAULT_TASK`` (tests only)."""


class Supervisor:
    """Decides for the tasks spawned under it; ``on_fatal(task, exc)`` stops the process."""

    def __init__(self, on_fatal: OnFatal, policy: RestartPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.on_fatal = on_fatal
        self.policy = policy or RestartPolicy()
        self._clock = clock
        self._histories: dict[str, TaskHistory] = {}
        self.restarts: dict[str, int] = {}
        self.fatal: tuple[str, BaseException] | None = None
        name, _, after = os.environ.get(FAULT_ENV, "").partition("@")
        self._fault: tuple[str, float] | None = (name, float(after or 0)) if name else None

    def install(self) -> None:
        """Make this the supervisor of every task created from the current context on."""
        _current.set(self)

    def decide(self, name: str, exc: BaseException, *, restartable: bool) -> float | None:
        """Log a failure of ``name``; the delay before restarting it, or None once escalated."""
        history = self._histories.setdefault(name, TaskHistory())
        fatal = isinstance(exc, FatalError)
        decision = self.policy.decide(history, self._clock(),
                                      restartable=restartable and not fatal)
        if isinstance(decision, Escalate):
            if fatal:
                log.critical("task %s failed: %s", name, exc)
            else:
                log.critical("task %s failed (%s: %s) and %s: stopping", name,
                             type(exc).__name__, exc, decision.reason, exc_info=exc)
            if self.fatal is None:
                self.fatal = (name, exc)
                self.on_fatal(name, exc)
            return None
        self.restarts[name] = self.restarts.get(name, 0) + 1
        _log.log(logging.ERROR, f"task {name}", "task %s failed (%s: %s); restarting in %.1fs",
                 name, type(exc).__name__, exc, decision.delay_s, exc_info=True)
        return decision.delay_s

    async def run(self, name: str, make: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run one attempt of task ``name`` (with the injected fault, if it names this task)."""
        if self._fault is None or self._fault[0] != name:
            await make()
            return
        after = self._fault[1]
        self._fault = None
        if after > 0:
            work = asyncio.ensure_future(make())
            done, _ = await asyncio.wait({work}, timeout=after)
            if work in done:
                work.result()
                return
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
        raise InjectedFault(f"fault injected into task {name} ({FAULT_ENV})")


_current: contextvars.ContextVar[Supervisor | None] = contextvars.ContextVar(
    "strom_supervisor", default=None)


def current() -> Supervisor | None:
    return _current.get()


def spawn(name: str, make: Callable[[], Coroutine[Any, Any, None]], *,
          restartable: bool) -> asyncio.Task[None]:
    """Run ``make()`` as a task named ``name``; on an unexpected exception restart it (a new
    ``make()``) or escalate, as the supervisor decides. Cancellation ends it quietly."""
    return asyncio.create_task(_supervised(name, make, restartable), name=name)


async def _supervised(name: str, make: Callable[[], Coroutine[Any, Any, None]],
                      restartable: bool) -> None:
    while True:
        supervisor = current()
        try:
            if supervisor is None:
                await make()
            else:
                await supervisor.run(name, make)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if supervisor is None:
                log.error("task %s failed", name, exc_info=exc)
                raise
            delay = supervisor.decide(name, exc, restartable=restartable)
            if delay is None:
                raise
            await asyncio.sleep(delay)


async def failed(name: str, exc: BaseException) -> None:
    """A loop that catches its own unexpected exceptions reports each here: it returns after the
    backoff to retry after, or raises the exception again once the supervisor escalated."""
    supervisor = current()
    if supervisor is None:
        _log.log(logging.ERROR, f"task {name}", "task %s failed; retrying", name, exc_info=True)
        await asyncio.sleep(1.0)
        return
    delay = supervisor.decide(name, exc, restartable=True)
    if delay is None:
        raise exc
    await asyncio.sleep(delay)
