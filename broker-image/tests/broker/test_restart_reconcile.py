"""At start the logs on disk are made to match the metadata log (crashes between the two)."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Awaitable, Callable

from strom.broker.cluster import RAFT_DIR
from strom.broker.core import BrokerCore
from strom.protocol.records import decode_batches, encode_batch
from strom.storage.config import LogConfig
from strom.storage.partition_metadata import read_topic_id

MakeCore = Callable[..., Awaitable[BrokerCore]]


async def test_stray_logs_are_set_aside_and_missing_logs_created(make_core: MakeCore) -> None:
    core = await make_core()
    await core.topics.create_topic("kept", 2, configs={"retention.ms": "777"})
    core.logs.create("deleted-topic", 0, LogConfig())  # as if a delete crashed half-way
    kept1 = core.replicas.get("kept", 1)
    assert kept1 is not None
    core.logs.delete_partition("kept", 1)  # as if a create crashed half-way
    data = core.config.log_dirs[0]
    await core.stop()

    again = await make_core()
    assert again.logs.get("deleted-topic", 0) is None
    assert [p.name for p in data.iterdir() if p.name.endswith("-stray")] == [
        "deleted-topic-0.unknown-stray"]
    plog = again.replicas.get("kept", 1)
    assert plog is not None and plog.config.retention_ms == 777
    assert again.replicas.get("kept", 0) is not None
    topic_id = again.metadata.topic("kept")
    assert topic_id is not None and read_topic_id(plog.directory) == topic_id.topic_id


async def test_a_recreated_topic_never_reuses_the_old_log(make_core: MakeCore) -> None:
    core = await make_core()
    await core.topics.create_topic("t", 1)
    plog = core.replicas.get("t", 0)
    assert plog is not None
    old_id = read_topic_id(plog.directory)
    await core.topics.delete("t")
    await core.topics.create_topic("t", 1)
    plog = core.replicas.get("t", 0)
    assert plog is not None and read_topic_id(plog.directory) not in (None, old_id)


async def test_logs_without_metadata_are_adopted(make_core: MakeCore) -> None:
    core = await make_core()
    await core.topics.create_topic("orphan", 3)
    raft = core.config.log_dirs[0] / RAFT_DIR
    await core.stop()
    shutil.rmtree(raft)

    again = await make_core()
    record = again.metadata.topic("orphan")
    assert record is not None and record.partitions == 3
    assert again.replicas.get("orphan", 2) is not None


async def test_a_restart_defers_clean_logs_then_reads_them_in_the_background(
        make_core: MakeCore) -> None:
    """Issue 21 item 5: clean logs open from their checkpoint; the broker serves with them
    deferred (offsets known, leadership taken) and reads them in slices once it serves."""
    core = await make_core()
    await core.topics.create_topic("t", 40)
    for p in range(40):
        view = core.replicas.view("t", p)
        plog = core.replicas.get("t", p)
        assert view is not None and plog is not None
        plog.append_as_leader(encode_batch([(b"k", b"v%d" % p)], timestamp_ms=int(
            time.time() * 1000)), view.leader_epoch)
    await core.stop()

    loaded = BrokerCore._load_deferred_logs
    started = asyncio.Event()

    async def held(self: BrokerCore) -> None:
        await started.wait()
        await loaded(self)

    BrokerCore._load_deferred_logs = held  # type: ignore[method-assign]
    try:
        again = await make_core()
        assert len(again.logs.deferred()) == 40  # served (started) without reading them
        for p in range(40):
            assert again.replicas.is_leader("t", p)
            plog = again.replicas.get("t", p)
            assert plog is not None and plog.log_end_offset == 1 and plog.high_watermark == 1
        first = again.replicas.get("t", 7)
        assert first is not None
        assert [r.value for r in decode_batches(first.read(0, 1 << 20).records)] == [b"v7"]
        assert first.loaded and len(again.logs.deferred()) == 39  # read on first use
        started.set()
        deadline = time.monotonic() + 30
        while again.logs.deferred() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert again.logs.deferred() == []  # the background reader did the rest
    finally:
        BrokerCore._load_deferred_logs = loaded  # type: ignore[method-assign]
