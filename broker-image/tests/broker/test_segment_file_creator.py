"""The background creator of new partitions' segment files waits while the metadata publisher
still has partitions to publish (a topic's creation is answered only once they are), then
creates them in slices until none remain (strom.broker.segment_files; issue 21 item 2)."""

from __future__ import annotations

import asyncio

from strom.broker.segment_files import create_ahead


async def _until(check: object, timeout_s: float = 5.0) -> None:
    assert callable(check)
    async with asyncio.timeout(timeout_s):
        while not check():
            await asyncio.sleep(0.001)


async def test_no_slice_runs_while_the_publisher_is_busy() -> None:
    wanted = asyncio.Event()
    publishing = True
    turns: list[bool] = []  # the publisher's state at each turn of the creator
    slices: list[bool] = []  # the publisher's state at each slice the creator ran
    left = 3

    def busy() -> bool:
        turns.append(publishing)
        return publishing

    def create(budget_s: float) -> bool:
        nonlocal left
        assert budget_s > 0
        slices.append(publishing)
        left -= 1
        return left > 0

    task = asyncio.create_task(create_ahead(wanted, create, busy, slice_s=0.01, pause_s=0.001))
    try:
        wanted.set()
        await _until(lambda: len(turns) >= 5)  # several turns while publishing
        assert slices == []
        publishing = False
        await _until(lambda: left == 0)
        assert slices == [False, False, False]  # then every file, slice after slice
        turns.clear()
        await asyncio.sleep(0.02)
        assert turns == []  # nothing left: it sleeps until told again
        left = 1
        wanted.set()
        await _until(lambda: left == 0)
        assert slices == [False] * 4
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
