"""A restarting broker is unfenced as soon as its publisher catches up, not a heartbeat later.

Issue 21: publishing 10,000 partitions at a restart outlasts the broker's first heartbeat, so
the controller only learnt that the broker had caught up at the next one, up to
``broker.heartbeat.interval.ms`` later. Now the broker heart-beats at once when its publisher
reaches its registration while it is fenced (Kafka's broker does so once ready to unfence).
"""

from __future__ import annotations

import time
from pathlib import Path

from strom.broker.config import BrokerConfig
from strom.broker.core import BrokerCore
from strom.testing.process import free_port

#: Long enough that "unfenced within half of it" leaves room for a slow start: the start took
#: 0.4 s on a quiet machine and 1.1-1.8 s beside busy loops in half a CPU (the bound was 2 s);
#: without the early heartbeat it is unfenced a whole interval after the start.
INTERVAL_MS = 10_000


async def _core(data: Path, slow_publish: bool = False) -> tuple[BrokerCore, float]:
    """A started core and the seconds its start took (until unfenced)."""
    core = BrokerCore.create(BrokerConfig.from_mapping({
        "log.dirs": str(data), "broker.heartbeat.interval.ms": INTERVAL_MS,
        "broker.session.timeout.ms": 3 * INTERVAL_MS}), port=free_port())
    core.load()
    if slow_publish:  # one partition per slice, 10 ms each: the first heartbeat comes first
        core.publisher.slice_s = 0.0
        publish_one = core.publisher._publish_one

        def slowly(*args: object) -> None:
            time.sleep(0.01)
            publish_one(*args)  # type: ignore[arg-type]

        core.publisher._publish_one = slowly  # type: ignore[method-assign]
    started = time.monotonic()
    await core.start()
    return core, time.monotonic() - started


async def test_a_broker_is_unfenced_once_its_publisher_catches_up(tmp_path: Path) -> None:
    core, _ = await _core(tmp_path / "data")
    try:
        await core.topics.create_topic("t", 40)
    finally:
        await core.stop()
    again, took = await _core(tmp_path / "data", slow_publish=True)
    try:
        assert again.link.unfenced.is_set()
        assert again.publisher.offset >= again.link.broker_epoch
        assert took < INTERVAL_MS / 1000 / 2, (
            f"unfenced {took:.1f} s after the start: at a heartbeat after the publish")
        assert all(again.replicas.is_leader("t", p) for p in range(40))
    finally:
        await again.stop()


