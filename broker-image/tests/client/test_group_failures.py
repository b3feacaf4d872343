"""Consumer groups when things go wrong: poll timeouts, fencing, coordinator moves and errors."""

from __future__ import annotations

import time
from typing import Any

import pytest

from strom.client import (
    Consumer,
    ConsumerRebalanceListener,
    ErrorCode,
    StromError,
    TopicPartition,
)

from .conftest import FakeCluster
from .test_group_membership import FAST, Recorder, _consumer, _fill, _poll_until


def test_poll_interval_exceeded_leaves_then_rejoins_with_partitions_lost(
        fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 2, 0)
    listener = Recorder()
    with _consumer(fake_cluster, max_poll_interval_ms=600) as c:
        c.subscribe(["t"], listener=listener)
        deadline = time.monotonic() + 15
        while True:  # poll until both partitions are owned, then stop polling
            # taken before the call: the consumer notes the poll inside it (or at the end of a
            # join it runs), never earlier. A time taken after the last poll returned, as this
            # test did, trails that note by the poll's own wait and whatever delays the test
            # thread: a 0.2 s delay there failed 'not before max_poll_interval_ms' (0.43 s).
            last_poll = time.monotonic()
            c.poll(100)
            if len(c.assignment()) == 2:
                break
            assert time.monotonic() < deadline, "both partitions not assigned in 15 s"

        def leaves() -> list[Any]:
            return [call for call in fake_cluster.calls if call[1] == "LeaveGroup"]

        while not leaves():  # the application stopped polling: the heartbeat task leaves
            assert time.monotonic() - last_poll < 10, "no LeaveGroup after the poll timeout"
            time.sleep(0.05)
        assert time.monotonic() - last_poll >= 0.6  # not before max_poll_interval_ms
        assert len(leaves()) == 1
        assert fake_cluster.group_coordinator.groups["g"].members == {}
        _poll_until(c, lambda: len(listener.events) >= 3 and len(c.assignment()) == 2)
    everything = [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert listener.events[:3] == [("assigned", everything), ("lost", everything),
                                   ("assigned", everything)]


def test_lost_defaults_to_revoked(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 1, 0)
    revoked: list[list[TopicPartition]] = []

    class OnlyRevoked(ConsumerRebalanceListener):
        def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
            revoked.append(partitions)

    with _consumer(fake_cluster) as c:
        c.subscribe(["t"], listener=OnlyRevoked())
        _poll_until(c, lambda: bool(c.assignment()))
        # the coordinator forgets the member (e.g. its session expired)
        fake_cluster.group_coordinator.faults["Heartbeat"].append(ErrorCode.UNKNOWN_MEMBER_ID)
        _poll_until(c, lambda: len(revoked) == 1 and bool(c.assignment()))
    assert revoked[0] == [TopicPartition("t", 0)]


def test_second_instance_with_the_same_static_id_fences_the_first(
        fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 1, 0)
    a = _consumer(fake_cluster, group_instance_id="same")
    b = _consumer(fake_cluster, group_instance_id="same")
    try:
        a.subscribe(["t"])
        _poll_until(a, lambda: bool(a.assignment()))
        b.subscribe(["t"])
        _poll_until(b, lambda: bool(b.assignment()))
        with pytest.raises(StromError, match="group_instance_id") as info:
            _poll_until(a, lambda: False, 5)
        assert info.value.code is ErrorCode.FENCED_INSTANCE_ID
    finally:
        a.close()
        b.close()


def test_coordinator_moves_and_is_found_again(fake_cluster2: FakeCluster) -> None:
    cluster = fake_cluster2
    _fill(cluster, "t", 1, 0)
    tp = TopicPartition("t", 0)
    with _consumer(cluster, enable_auto_commit=False) as c:
        c.subscribe(["t"])
        _poll_until(c, lambda: bool(c.assignment()))
        cluster.group_coordinator.coordinator_id = 2
        cluster.calls.clear()
        c.commit({tp: 1})
        assert c.committed([tp]) == {tp: 1}
        commits = [(broker, rpc) for broker, rpc, _ in cluster.calls if rpc == "OffsetCommit"]
        assert commits[-1] == (2, "OffsetCommit")
        # the old coordinator answered NOT_COORDINATOR (to a heartbeat or the commit) and the
        # client asked FindCoordinator again
        assert any(rpc == "FindCoordinator" for _, rpc, _ in cluster.calls)


def test_retriable_coordinator_errors_on_join_are_retried(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 1, 0)
    faults = fake_cluster.group_coordinator.faults
    faults["FindCoordinator"].append(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    faults["JoinGroup"].append(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    faults["SyncGroup"].append(ErrorCode.REBALANCE_IN_PROGRESS)
    with _consumer(fake_cluster) as c:
        c.subscribe(["t"])
        _poll_until(c, lambda: bool(c.assignment()))
    assert not any(faults.values())


def test_no_group_options_keep_manual_consumers_unchanged(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 1, 2)
    options: dict[str, Any] = {k: v for k, v in FAST.items() if k == "fetch_max_wait_ms"}
    with Consumer(fake_cluster.bootstrap, auto_offset_reset="earliest", **options) as c:
        c.assign([TopicPartition("t", 0)])
        records = _poll_until(c, lambda: c.position(TopicPartition("t", 0)) == 2)
        assert [r.offset for r in records] == [0, 1]
        with pytest.raises(StromError, match="group_id"):
            c.commit()
    assert not [call for call in fake_cluster.calls if call[1] == "FindCoordinator"]


def test_manual_assignment_with_group_commits_outside_generations(
        fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 1, 2)
    tp = TopicPartition("t", 0)
    with _consumer(fake_cluster, auto_offset_reset="earliest") as c:
        c.assign([tp])
        _poll_until(c, lambda: c.position(tp) == 2)
    # auto-commit on close, as a simple (generation -1) commit
    assert fake_cluster.group_coordinator.offsets[("g", "t", 0)] == 2


def test_leader_rebalances_when_a_subscribed_topic_appears(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 1, 0)
    with _consumer(fake_cluster, metadata_max_age_ms=200) as c:
        c.subscribe(["t", "later"])
        _poll_until(c, lambda: c.assignment() == {TopicPartition("t", 0)})
        generation = fake_cluster.group_coordinator.groups["g"].generation
        _fill(fake_cluster, "later", 2, 0)
        _poll_until(c, lambda: len(c.assignment()) == 3)
        assert fake_cluster.group_coordinator.groups["g"].generation > generation


def test_session_timeout_outside_the_brokers_bounds_is_reported(
        fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 1, 0)
    with _consumer(fake_cluster, session_timeout_ms=50, heartbeat_interval_ms=10) as c:
        c.subscribe(["t"])
        with pytest.raises(StromError, match="session_timeout_ms=50") as info:
            _poll_until(c, lambda: False, 10)
        assert info.value.code is ErrorCode.INVALID_SESSION_TIMEOUT
