"""AsyncConsumer group membership against the fake coordinator: several members on one loop,
commits and restarts, coroutine rebalance listeners, leaving on close."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from strom.client import AsyncConsumer, Producer, TopicPartition

from .conftest import FakeCluster

FAST: dict[str, Any] = {
    "session_timeout_ms": 3000,
    "heartbeat_interval_ms": 100,
    "max_poll_interval_ms": 5000,
    "fetch_max_wait_ms": 100,
}


def _fill(cluster: FakeCluster, topic: str, partitions: int, per_partition: int) -> None:
    cluster.create_topic(topic, partitions)
    if per_partition:
        with Producer(cluster.bootstrap, linger_ms=0) as p:
            for part in range(partitions):
                for i in range(per_partition):
                    p.send(topic, b"%d-%d" % (part, i), partition=part)
            p.flush(10)


async def _poll_all(consumers: list[AsyncConsumer], done: Callable[[], bool],
                    records: list[Any], timeout: float = 15) -> None:
    """Poll every consumer concurrently (one task each) until ``done()``."""
    deadline = time.monotonic() + timeout

    async def run(c: AsyncConsumer) -> None:
        while not done():
            assert time.monotonic() < deadline, "condition not reached in time"
            records.extend(await c.poll(50))

    await asyncio.gather(*(run(c) for c in consumers))


async def test_three_async_consumers_split_six_partitions_and_read_everything(
        fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 6, 3)
    consumers = [AsyncConsumer(fake_cluster.bootstrap, group_id="g",
                               auto_offset_reset="earliest", **FAST) for _ in range(3)]
    for c in consumers:
        await c.start()
        c.subscribe(["t"])
    records: list[Any] = []
    try:
        await _poll_all(consumers, lambda: len(records) >= 18 and all(
            len(c.assignment()) == 2 for c in consumers), records)
    finally:
        for c in consumers:
            await c.close()
    assert sorted((r.partition, r.offset) for r in records) == [
        (p, o) for p in range(6) for o in range(3)]
    assert fake_cluster.group_coordinator.groups["g"].members == {}


async def test_async_commit_restart_and_coroutine_listener(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 1, 6)
    tp = TopicPartition("t", 0)
    events: list[tuple[str, list[TopicPartition]]] = []

    class Listener:
        async def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
            events.append(("revoked", partitions))

        async def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
            await asyncio.sleep(0)
            events.append(("assigned", partitions))

    async with AsyncConsumer(fake_cluster.bootstrap, group_id="g", auto_offset_reset="earliest",
                             enable_auto_commit=False, max_poll_records=4, **FAST) as c:
        c.subscribe(["t"], listener=Listener())
        got: list[int] = []
        while len(got) < 4:
            got += [r.offset for r in await c.poll(100)]
        await c.commit()
        assert await c.committed([tp]) == {tp: 4}
        done: list[tuple[dict[TopicPartition, int], BaseException | None]] = []
        c.commit_async({tp: 3}, lambda offsets, error: done.append((offsets, error)))
        deadline = time.monotonic() + 10
        while not done and time.monotonic() < deadline:
            await c.poll(50)
        assert done == [({tp: 3}, None)]
    assert events == [("assigned", [tp]), ("revoked", [tp])]
    async with AsyncConsumer(fake_cluster.bootstrap, group_id="g",
                             auto_offset_reset="earliest", **FAST) as c:
        c.subscribe(["t"])
        got = []
        while len(got) < 3:
            got += [r.offset for r in await c.poll(100)]
        assert got == [3, 4, 5]
    assert len([call for call in fake_cluster.calls if call[1] == "LeaveGroup"]) == 2
