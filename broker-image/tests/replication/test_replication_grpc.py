"""Two or three ReplicaManagers replicating over real gRPC on 127.0.0.1 (fake controller)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import encode_batch
from strom.replication.state import NO_LEADER, PartitionView
from strom.storage.config import LogConfig

from .harness import Cluster, all_batches, wait_until

MIN2 = LogConfig(min_insync_replicas=2)


def _batch(i: int, size: int = 100) -> bytes:
    return encode_batch([(f"k{i}".encode(), bytes([i % 256]) * size)])


def _view(leader: int, epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...],
          partition_epoch: int = 0, adding: tuple[int, ...] = (), topic: str = "t"
          ) -> PartitionView:
    return PartitionView(topic, 0, leader, epoch, partition_epoch, replicas, isr, adding)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path, (0, 1, 2))
    try:
        yield c
    finally:
        await c.close()


async def _started(c: Cluster, *ids: int) -> None:
    for i in ids:
        await c.start(i)


async def test_follower_catches_up_and_joins_the_isr(cluster: Cluster) -> None:
    await _started(cluster, 0, 1)
    cluster.set_view(_view(0, 0, (0, 1), (0,)))
    leader = cluster.nodes[0]
    for i in range(20):
        await leader.m.append("t", 0, _batch(i), 1, LogConfig(), 1000)
    follower = cluster.nodes[1]
    await wait_until(lambda: cluster.view().isr == (0, 1), what="ISR expansion")
    assert follower.log().log_end_offset == 20
    assert all_batches(follower.log()) == all_batches(leader.log())
    assert leader.m.isr_expands == 1
    assert leader.m.replica_progress("t", 0) == {0: 20, 1: 20}
    await wait_until(lambda: follower.log().high_watermark == 20, what="follower HW")
    assert leader.m.replication_bytes_out == follower.m.replication_bytes_in > 0
    assert follower.m.replica_progress("t", 0) is None
    with pytest.raises(StromError) as err:
        follower.m.read("t", 0, 0, 1000)
    assert err.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_acks_all_completes_only_once_the_follower_has_the_batch(cluster: Cluster) -> None:
    await _started(cluster, 0, 1, 2)
    cluster.set_view(_view(0, 0, (0, 1, 2), (0, 1, 2)))
    for i in range(5):
        result = await cluster.nodes[0].m.append("t", 0, _batch(i), -1, MIN2, 5000)
        for follower in (1, 2):
            assert cluster.nodes[follower].log().log_end_offset > result.last_offset
        assert cluster.nodes[0].log().high_watermark > result.last_offset
    assert cluster.view().isr == (0, 1, 2)


async def test_consumers_only_see_records_below_the_high_watermark(cluster: Cluster) -> None:
    await _started(cluster, 0)  # the follower is down: nothing gets committed
    cluster.set_view(_view(0, 0, (0, 1), (0, 1)))
    leader = cluster.nodes[0].m
    await leader.append("t", 0, _batch(1), 1, LogConfig(), 1000)
    assert leader.read("t", 0, 0, 1000).records == b""
    assert cluster.nodes[0].log().high_watermark == 0
    await cluster.start(1)
    await wait_until(lambda: cluster.nodes[0].log().high_watermark == 1, what="HW")
    assert leader.read("t", 0, 0, 1000).records


async def test_stopped_follower_times_out_acks_all_then_leaves_the_isr(cluster: Cluster) -> None:
    await _started(cluster, 0, 1)
    cluster.set_view(_view(0, 0, (0, 1), (0, 1)))
    leader = cluster.nodes[0].m
    await leader.append("t", 0, _batch(0), -1, LogConfig(), 5000)
    await cluster.stop(1)
    with pytest.raises(StromError) as err:
        await leader.append("t", 0, _batch(1), -1, LogConfig(), 150)
    assert err.value.code == ErrorCode.REQUEST_TIMED_OUT
    await wait_until(lambda: cluster.view().isr == (0,), timeout_s=5, what="ISR shrink")
    assert leader.isr_shrinks == 1 and leader.under_replicated_count() == 1
    result = await leader.append("t", 0, _batch(2), -1, LogConfig(), 1000)
    assert cluster.nodes[0].log().high_watermark > result.last_offset
    with pytest.raises(StromError) as err:
        await leader.append("t", 0, _batch(3), -1, MIN2, 1000)
    assert err.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert cluster.nodes[0].log().log_end_offset == 3  # nothing appended on that failure
    # The follower comes back, catches up and rejoins; min.insync=2 works again.
    await cluster.start(1)
    await wait_until(lambda: cluster.view().isr == (0, 1), timeout_s=5, what="ISR expand")
    await leader.append("t", 0, _batch(4), -1, MIN2, 5000)
    assert leader.under_replicated_count() == 0


async def test_isr_shrink_during_acks_all_fails_after_append(cluster: Cluster) -> None:
    await _started(cluster, 0, 1)
    cluster.set_view(_view(0, 0, (0, 1), (0, 1)), MIN2)
    leader = cluster.nodes[0].m
    await leader.append("t", 0, _batch(0), -1, MIN2, 5000)
    await cluster.stop(1)
    with pytest.raises(StromError) as err:
        await leader.append("t", 0, _batch(1), -1, MIN2, 5000)  # shrink happens within 5 s
    assert err.value.code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


async def test_leadership_loss_fails_waiting_acks_all(cluster: Cluster) -> None:
    await _started(cluster, 0)
    cluster.set_view(_view(0, 0, (0, 1), (0, 1)))
    leader = cluster.nodes[0].m
    waiting = asyncio.create_task(leader.append("t", 0, _batch(0), -1, LogConfig(), 5000))
    await wait_until(lambda: len(leader._acks) == 1, what="the append waiting for acks=all")
    assert not waiting.done()
    cluster.set_view(_view(1, 1, (0, 1), (1,), partition_epoch=1))
    with pytest.raises(StromError) as err:
        await waiting
    assert err.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    cluster.set_view(_view(NO_LEADER, 2, (0, 1), (1,), partition_epoch=2))
    with pytest.raises(StromError) as err:
        await leader.append("t", 0, _batch(1), 1, LogConfig(), 1000)
    assert err.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert leader.offline_count() == 1  # broker 0 is the preferred replica


async def test_leader_change_truncates_a_divergent_follower_tail(cluster: Cluster) -> None:
    await _started(cluster, 0, 1)
    cluster.set_view(_view(0, 0, (0, 1), (0, 1)))
    for i in range(5):
        await cluster.nodes[0].m.append("t", 0, _batch(i), -1, LogConfig(), 5000)
    await cluster.stop(1)
    for i in range(5, 8):  # acks=1: only broker 0 gets these
        await cluster.nodes[0].m.append("t", 0, _batch(i), 1, LogConfig(), 1000)
    await cluster.stop(0)
    # The controller elects broker 1 (still in the ISR) in epoch 1; broker 0's tail is lost.
    cluster.views[("t", 0)] = _view(1, 1, (0, 1), (1,), partition_epoch=5)
    await cluster.start(1)
    for i in range(100, 102):
        await cluster.nodes[1].m.append("t", 0, _batch(i, 300), 1, LogConfig(), 1000)
    assert cluster.nodes[0].log().log_end_offset == 8
    await cluster.start(0)
    new_leader, old = cluster.nodes[1], cluster.nodes[0]
    await wait_until(lambda: all_batches(old.log()) == all_batches(new_leader.log()),
                     what="identical logs")
    assert old.log().log_end_offset == 7
    assert old.m.truncations >= 1
    assert old.log().epochs == new_leader.log().epochs == [(0, 0), (1, 5)]
    await wait_until(lambda: cluster.view().isr == (1, 0), what="old leader rejoins")


async def test_follower_behind_leader_log_start_restarts_there(cluster: Cluster) -> None:
    await _started(cluster, 0)
    cluster.set_view(_view(0, 0, (0, 1), (0,)))
    leader = cluster.nodes[0]
    for i in range(6):
        await leader.m.append("t", 0, _batch(i), 1, LogConfig(), 1000)
    leader.log().advance_log_start_offset(4)
    await cluster.start(1)
    follower = cluster.nodes[1]
    await wait_until(lambda: follower.log().log_end_offset == 6, what="catch-up")
    assert follower.log().log_start_offset == 4
    assert all_batches(follower.log()) == all_batches(leader.log())


async def test_throttled_reassignment_catch_up_is_slower(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, (0, 1), fetch_max_bytes=8192)
    try:
        await _started(cluster, 0, 1)
        for topic in ("fast", "slow"):
            cluster.set_view(_view(0, 0, (0,), (0,), topic=topic))
            for i in range(30):
                await cluster.nodes[0].m.append(topic, 0, _batch(i, 4000), 1, LogConfig(), 1000)
        leader = cluster.nodes[0]
        size = leader.log("slow").size_bytes
        cluster.set_view(_view(0, 0, (0, 1), (0,), 1, adding=(1,), topic="fast"))
        fast = await wait_until(
            lambda: cluster.nodes[1].log("fast").log_end_offset == 30, what="unthrottled")
        leader.m.throttle_bytes_per_sec = size // 3   # ~3 s worth, minus the 1 s burst
        cluster.set_view(_view(0, 0, (0, 1), (0,), 1, adding=(1,), topic="slow"))
        slow = await wait_until(
            lambda: cluster.nodes[1].log("slow").log_end_offset == 30, timeout_s=15,
            what="throttled")
        assert slow >= 1.5, (fast, slow)
        assert fast < slow / 2, (fast, slow)
        assert all_batches(cluster.nodes[1].log("slow")) == all_batches(leader.log("slow"))
    finally:
        await cluster.close()


async def test_follower_side_throttle_slows_its_catch_up(tmp_path: Path) -> None:
    """Kafka's follower.replication.throttled.rate: the throttle set on the receiving broker
    alone (its leader unthrottled) caps what it fetches for its replicas being added."""
    cluster = Cluster(tmp_path, (0, 1), fetch_max_bytes=8192)
    try:
        await _started(cluster, 0, 1)
        cluster.set_view(_view(0, 0, (0,), (0,), topic="slow"))
        for i in range(30):
            await cluster.nodes[0].m.append("slow", 0, _batch(i, 4000), 1, LogConfig(), 1000)
        leader, follower = cluster.nodes[0], cluster.nodes[1]
        size = leader.log("slow").size_bytes
        follower.m.throttle_bytes_per_sec = size // 3   # ~3 s worth, minus the 1 s burst
        assert leader.m.throttle_bytes_per_sec == -1
        cluster.set_view(_view(0, 0, (0, 1), (0,), 1, adding=(1,), topic="slow"))
        slow = await wait_until(
            lambda: follower.log("slow").log_end_offset == 30, timeout_s=15, what="throttled")
        assert slow >= 1.5, slow
        assert all_batches(follower.log("slow")) == all_batches(leader.log("slow"))
    finally:
        await cluster.close()


async def test_removed_partition_stops_fetching_and_deletes(cluster: Cluster) -> None:
    await _started(cluster, 0, 1)
    cluster.set_view(_view(0, 0, (0, 1), (0, 1)))
    await cluster.nodes[0].m.append("t", 0, _batch(0), -1, LogConfig(), 5000)
    follower = cluster.nodes[1].m
    directory = cluster.nodes[1].log().directory
    follower.remove_partition("t", 0, delete=True)
    assert follower.get("t", 0) is None and len(follower) == 0
    assert not directory.exists()
    assert follower.fetch_position(("t", 0)) is None


async def test_unknown_leader_address_backs_off_then_catches_up(cluster: Cluster) -> None:
    await _started(cluster, 1)  # broker 0 (the leader) is not up: its address is unknown
    cluster.set_view(_view(0, 0, (0, 1), (0, 1)))
    fetcher = cluster.nodes[1].m._fetchers[0]
    await wait_until(lambda: fetcher.failures >= 3, what="failed attempts")
    await cluster.start(0)
    await cluster.nodes[0].m.append("t", 0, _batch(0), 1, LogConfig(), 1000)
    await wait_until(lambda: cluster.nodes[1].log().log_end_offset == 1, timeout_s=5,
                     what="catch-up after the leader appeared")
    assert fetcher.failures == 0


async def test_new_epoch_same_leader_keeps_waiting_acks_all(cluster: Cluster) -> None:
    await _started(cluster, 0)
    cluster.set_view(_view(0, 0, (0, 1), (0, 1)))
    waiting = asyncio.create_task(
        cluster.nodes[0].m.append("t", 0, _batch(0), -1, LogConfig(), 5000))
    await wait_until(lambda: len(cluster.nodes[0].m._acks) == 1,
                     what="the append waiting for acks=all")
    cluster.set_view(_view(0, 1, (0, 1), (0, 1), partition_epoch=1))
    await cluster.start(1)
    result = await waiting
    assert cluster.nodes[1].log().log_end_offset > result.last_offset
    assert cluster.nodes[0].log().epochs == [(0, 0)]


async def test_partition_added_to_a_busy_fetcher_does_not_wait_out_the_long_poll(
        tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, (0, 1), fetch_wait_max_ms=5000)
    try:
        await _started(cluster, 0, 1)
        cluster.set_view(_view(0, 0, (0, 1), (0, 1), topic="a"))
        cluster.set_view(_view(0, 0, (0,), (0,), topic="b"))
        await cluster.nodes[0].m.append("b", 0, _batch(0), 1, LogConfig(), 1000)
        # broker 1's fetcher is parked in a 5 s long-poll on "a" (the leader holds its fetch)
        await wait_until(lambda: cluster.nodes[0].m.fetch_sessions() >= 1,
                         what="broker 1's fetch session opened on the leader")
        cluster.set_view(_view(0, 0, (0, 1), (0,), 1, topic="b"))
        took = await wait_until(lambda: cluster.nodes[1].log("b").log_end_offset == 1,
                                timeout_s=4, what="b fetched")
        assert took < 2.0
    finally:
        await cluster.close()
