"""The asyncio glue: spawned tasks are restarted or escalated as the supervisor decides; loops
that catch their own errors report them with ``failed``; no supervisor means logged, not lost."""

from __future__ import annotations

import asyncio

import pytest

from strom import supervision
from strom.supervision import InjectedFault, RestartPolicy, Supervisor

FAST = RestartPolicy(max_failures=3, window_s=60, initial_backoff_s=0.01, max_backoff_s=0.01)


async def test_restartable_task_is_restarted_until_it_succeeds() -> None:
    fatal: list[str] = []
    sup = Supervisor(lambda name, exc: fatal.append(name), FAST)
    sup.install()
    attempts = []

    async def work() -> None:
        attempts.append(1)
        if len(attempts) < 3:
            raise ValueError("transient")

    await supervision.spawn("worker", work, restartable=True)
    assert len(attempts) == 3 and sup.restarts["worker"] == 2 and fatal == []


async def test_restartable_task_failing_too_often_is_fatal() -> None:
    fatal: list[str] = []
    sup = Supervisor(lambda name, exc: fatal.append(name), FAST)
    sup.install()

    async def work() -> None:
        raise ValueError("always")

    with pytest.raises(ValueError):
        await supervision.spawn("worker", work, restartable=True)
    assert fatal == ["worker"] and sup.fatal is not None


async def test_critical_task_is_fatal_at_first_failure() -> None:
    fatal: list[str] = []
    Supervisor(lambda name, exc: fatal.append(name), FAST).install()

    async def work() -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        await supervision.spawn("raft-driver", work, restartable=False)
    assert fatal == ["raft-driver"]


async def test_a_fatal_error_escalates_at_once_as_one_line(
        caplog: pytest.LogCaptureFixture) -> None:
    fatal: list[str] = []
    Supervisor(lambda name, exc: fatal.append(name), FAST).install()

    async def work() -> None:
        raise supervision.FatalError("the disk failed; repair it")

    with pytest.raises(supervision.FatalError):
        await supervision.spawn("worker", work, restartable=True)
    assert fatal == ["worker"]
    lines = [r for r in caplog.records if r.name == "strom.supervision"]
    assert [r.getMessage() for r in lines] == ["task worker failed: the disk failed; repair it"]
    assert lines[0].exc_info is None


async def test_cancellation_is_not_a_failure() -> None:
    fatal: list[str] = []
    Supervisor(lambda name, exc: fatal.append(name), FAST).install()
    running = asyncio.Event()

    async def sleeper() -> None:
        running.set()
        await asyncio.sleep(60)

    task = supervision.spawn("sleeper", sleeper, restartable=False)
    await asyncio.wait_for(running.wait(), 10)  # cancelled inside the supervised run
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fatal == []


async def test_loops_report_with_failed_and_escalate() -> None:
    fatal: list[str] = []
    Supervisor(lambda name, exc: fatal.append(name), FAST).install()
    for _ in range(2):
        await supervision.failed("loop", RuntimeError("x"))
    with pytest.raises(RuntimeError):
        await supervision.failed("loop", RuntimeError("x"))
    assert fatal == ["loop"]


async def test_injected_fault_after_a_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(supervision.FAULT_ENV, "victim@0.05")
    fatal: list[BaseException] = []
    Supervisor(lambda name, exc: fatal.append(exc), FAST).install()
    with pytest.raises(InjectedFault):
        await supervision.spawn("victim", lambda: asyncio.sleep(60), restartable=False)
    assert isinstance(fatal[0], InjectedFault)


async def test_without_a_supervisor_failures_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def work() -> None:
        raise ValueError("lonely")

    with pytest.raises(ValueError):
        await asyncio.create_task(_no_supervisor(work))
    assert "task lonely-task failed" in caplog.text


async def _no_supervisor(work: object) -> None:
    supervision.tasks._current.set(None)
    await supervision.spawn("lonely-task", work, restartable=False)  # type: ignore[arg-type]
