"""A broker acts on metadata changes by delta, in slices, and stays alive while it does (issue 21).

An in-process broker (a cluster of one: its own controller, heartbeats in the same event loop)
must visit only the partitions an entry touched, not every partition it hosts, and must keep
its event loop turning while it publishes a large change, so heartbeats flow and it is never
fenced for being busy.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import pytest

from strom.broker.core import BrokerCore
from strom.controller.metadata import CreateTopic
from strom.replication.state import PartitionView
from strom.storage.config import LogConfig

from .conftest import CoreFactory


async def test_publisher_visits_only_the_partitions_that_changed(make_core: CoreFactory) -> None:
    core = await make_core()
    await core.topics.create_topic("big", 300, 1)
    assert core.replicas.get("big", 299) is not None
    before = core.publisher.partitions_visited
    await core.topics.create_topic("small", 1, 1)
    assert core.replicas.get("small", 0) is not None
    assert core.publisher.partitions_visited - before == 1
    await core.topics.create_topic("two", 2, 1)
    assert core.publisher.partitions_visited - before == 3
    assert core.publisher.offset == core.link.image.offset


async def test_a_deleted_topic_and_a_config_change_reach_only_their_partitions(
        make_core: CoreFactory) -> None:
    core = await make_core()
    await core.topics.create_topic("big", 100, 1)
    await core.topics.create_topic("t", 3, 1)
    before = core.publisher.partitions_visited
    await core.topics.delete("t")
    assert core.publisher.partitions_visited - before == 3
    assert core.replicas.get("t", 0) is None and core.logs.get("t", 2) is None
    assert core.replicas.get("big", 99) is not None


def _slow(core: BrokerCore, seconds_per_partition: float) -> None:
    """Make every partition the publisher applies cost ``seconds_per_partition`` of blocking
    work (a slow disk): a large change then takes seconds of event-loop time in all."""
    apply = core.replicas.apply_partition

    def slow_apply(view: PartitionView, config: LogConfig) -> None:
        time.sleep(seconds_per_partition)
        apply(view, config)

    core.replicas.apply_partition = slow_apply  # type: ignore[method-assign]


async def test_a_long_metadata_change_keeps_the_loop_turning_and_the_broker_unfenced(
        make_core: CoreFactory, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="strom.controller.active")
    core = await make_core(**{"broker.session.timeout.ms": 1000,
                              "broker.heartbeat.interval.ms": 100})
    assert await core.link.wait_unfenced(5)
    _slow(core, 0.01)
    gaps: list[float] = []
    stop = asyncio.Event()

    async def watch() -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    watcher = asyncio.create_task(watch())
    started = time.monotonic()
    try:
        await core.topics.create_topic("wide", 300, 1)
    finally:
        stop.set()
        await watcher
    took = time.monotonic() - started
    assert took >= 3.0  # three session timeouts of publishing work
    assert core.replicas.get("wide", 299) is not None
    assert max(gaps) < 1.0, f"the event loop stalled for {max(gaps):.2f}s"
    assert not core.link.image.brokers[core.config.broker_id].fenced
    fenced: list[Any] = [r for r in caplog.records if r.getMessage().startswith("fencing broker")]
    assert not fenced, fenced[0].getMessage()


async def test_a_committed_change_is_answered_while_publishing_it_takes_longer(
        make_core: CoreFactory) -> None:
    """CreateTopics of thousands of partitions: committed and in the image, the answer does not
    wait for every log to open (it timed out at 10,000 partitions); they serve once published."""
    core = await make_core()
    _slow(core, 0.01)
    started = time.monotonic()
    index = await core.link.propose(
        CreateTopic("wide", str(uuid.uuid4()), tuple((0,) for _ in range(300))), timeout_s=1.0)
    assert time.monotonic() - started < 2.5
    assert core.link.image.offset >= index and core.publisher.busy
    assert core.replicas.get("wide", 299) is None
    await core.link.wait_applied(index, 30)
    assert core.replicas.get("wide", 299) is not None
