"""Every kind of long-lived broker task, failed on purpose in a started broker: critical ones
(the Raft driver, which also runs the ticks its loop timer queues, the active controller, the
metadata publisher) stop the broker -
not ready, stop requested, exit status 1 - and restartable ones (heartbeats, the ISR checker, the
group coordinator's housekeeping) are restarted while the broker stays ready. Replica fetchers
are covered with two brokers in ``tests/robustness/test_cluster_faults.py``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from strom import supervision
from strom.broker.config import BrokerConfig
from strom.broker.server import BrokerFailed, BrokerServer, _start_unless_stopped
from strom.controller.metadata import MetadataImage
from strom.testing import free_port


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[BrokerServer]:
    # port 0 for the Kafka listener: its default, 19092, is one fixed port for every test run
    # on the machine (a second xdist worker, another checkout, `strom dev up`)
    config = BrokerConfig.from_mapping({
        "log.dirs": str(tmp_path / "data"), "port": free_port(), "metrics.port": 0,
        "listeners": "PLAINTEXT://127.0.0.1:0", "shutdown.timeout.ms": 1000})
    srv = BrokerServer(config)
    srv.stop_event = asyncio.Event()
    yield srv
    await srv.stop()


async def _start(server: BrokerServer) -> None:
    assert server.stop_event is not None
    with contextlib.suppress(BrokerFailed):  # a critical task may fail while starting
        await _start_unless_stopped(server, server.stop_event)


async def _wait(predicate: object, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():  # type: ignore[operator]
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("task", ["raft-driver", "active-controller"])
async def test_critical_task_failure_stops_the_broker(
        task: str, server: BrokerServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(supervision.FAULT_ENV, f"{task}@1.0")
    server.supervisor = supervision.Supervisor(server._fatal)
    await _start(server)
    await _wait(lambda: server.failure is not None)
    assert server.failure is not None and task in server.failure
    assert not server.ready
    assert server.stop_event is not None and server.stop_event.is_set()


@pytest.mark.parametrize("task", ["broker-heartbeats", "isr-checker", "group-coordinator"])
async def test_restartable_task_failure_is_restarted(
        task: str, server: BrokerServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(supervision.FAULT_ENV, f"{task}@1.0")
    server.supervisor = supervision.Supervisor(server._fatal)
    await _start(server)
    assert server.ready
    await _wait(lambda: server.supervisor.restarts.get(task) == 1)
    await asyncio.sleep(0.3)  # not a synchronisation: the window in which nothing may go wrong
    assert server.ready and server.failure is None


async def test_metadata_publisher_failure_stops_the_broker(server: BrokerServer) -> None:
    await _start(server)
    assert server.ready and server.core is not None
    core = server.core

    def broken(image: MetadataImage) -> None:
        raise RuntimeError("publisher bug")

    core.publisher.publish = broken  # type: ignore[method-assign]
    with contextlib.suppress(Exception):  # committed, or failed as the driver stopped
        await asyncio.wait_for(core.topics.create_topic("t", 1, 1), 5)
    await _wait(lambda: server.failure is not None)
    assert "raft-driver" in (server.failure or "") and not server.ready


class _StubbornStart:
    """A server whose start swallows the first cancellation and carries on waiting, as a start
    awaiting ``asyncio.wait_for`` can on Python 3.11 when the awaited future completes in the
    same turn (CPython gh-86296)."""

    failure: str | None = None

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self.cancellations = 0

    async def start(self) -> None:
        try:
            self.failure = "task raft-driver failed: injected"
            self.stop.set()  # a critical task fails while starting
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancellations += 1  # swallowed
        try:
            await asyncio.sleep(30)  # e.g. a registration waiting out its own timeout
        except asyncio.CancelledError:
            self.cancellations += 1
            raise


async def test_a_start_that_swallows_its_cancellation_is_cancelled_again() -> None:
    """ci23: a broker whose metadata log failed while starting logged the failure, then hung
    until it was killed (its start carried on after being cancelled once). The start is
    cancelled again until it ends: the broker stops and exits with status 1 at once."""
    stop = asyncio.Event()
    server = _StubbornStart(stop)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(20):
        with pytest.raises(BrokerFailed, match="raft-driver"):
            await _start_unless_stopped(server, stop)  # type: ignore[arg-type]
    assert server.cancellations == 2
    assert loop.time() - started < 2  # before: the start's own 30 s wait
