"""Consumer groups, client side, against the fake cluster's in-memory coordinator (the real
``strom.groups.membership.Group`` state machine behind a fake Group service): joins, assignment,
offset resets, commits and restarts, rebalance listeners, cooperative rebalancing, patterns,
static membership and leaving."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from strom.client import (
    CommitFailedError,
    Consumer,
    ConsumerRebalanceListener,
    ErrorCode,
    NoOffsetForPartitionError,
    Producer,
    StromError,
    TopicPartition,
)

from .conftest import FakeCluster

FAST: dict[str, Any] = {
    "session_timeout_ms": 3000,
    "heartbeat_interval_ms": 100,
    "max_poll_interval_ms": 5000,
    "fetch_max_wait_ms": 100,
}


def _fill(cluster: FakeCluster, topic: str, partitions: int, per_partition: int) -> None:
    if topic not in cluster.topics:
        cluster.create_topic(topic, partitions)
    if per_partition:
        with Producer(cluster.bootstrap, linger_ms=0) as p:
            for part in range(partitions):
                for i in range(per_partition):
                    p.send(topic, b"%d-%d" % (part, i), partition=part)
            p.flush(10)


def _consumer(cluster: FakeCluster, group: str = "g", **options: Any) -> Consumer:
    return Consumer(cluster.bootstrap, group_id=group, **{**FAST, **options})


def _poll_until(c: Consumer, done: Callable[[], bool], timeout: float = 15) -> list[Any]:
    records: list[Any] = []
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "condition not reached in time"
        records += c.poll(100)
    return records


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, list[TopicPartition]]] = []
        self.threads: set[str] = set()

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        self.events.append(("revoked", partitions))
        self.threads.add(threading.current_thread().name)

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        self.events.append(("assigned", partitions))
        self.threads.add(threading.current_thread().name)

    def on_partitions_lost(self, partitions: list[TopicPartition]) -> None:
        self.events.append(("lost", partitions))
        self.threads.add(threading.current_thread().name)


@contextmanager
def _polling(consumers: list[Consumer]) -> Iterator[Callable[[], None]]:
    """Poll every consumer on a thread of its own (a rebalance needs all members to rejoin)."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def run(c: Consumer) -> None:
        try:
            while not stop.is_set():
                c.poll(50)
        except BaseException as exc:  # surfaced by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in consumers]
    for t in threads:
        t.start()

    def halt() -> None:
        stop.set()
        for t in threads:
            t.join(10)
        assert not errors, errors

    try:
        yield halt
    finally:
        halt()


def _wait(cond: Callable[[], bool], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_one_consumer_gets_every_partition_and_reads_from_earliest(
        fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 3, 5)
    with _consumer(fake_cluster, auto_offset_reset="earliest") as c:
        c.subscribe(["t"])
        assert c.subscription() == {"t"}
        records: list[Any] = []
        deadline = time.monotonic() + 15
        while len(records) < 15 and time.monotonic() < deadline:
            records += c.poll(100)
        assert c.assignment() == {TopicPartition("t", p) for p in range(3)}
        assert sorted((r.partition, r.offset) for r in records) == [
            (p, o) for p in range(3) for o in range(5)]
    members = fake_cluster.group_coordinator.groups["g"].members
    assert members == {}  # close() left the group


def test_three_consumers_six_partitions_two_each(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 6, 0)
    consumers = [_consumer(fake_cluster) for _ in range(3)]
    try:
        for c in consumers:
            c.subscribe(["t"])
        with _polling(consumers):
            _wait(lambda: all(len(c.assignment()) == 2 for c in consumers))
        owned = [c.assignment() for c in consumers]
        assert set().union(*owned) == {TopicPartition("t", p) for p in range(6)}
        # range: contiguous pairs
        assert sorted(sorted(p.partition for p in a) for a in owned) == [[0, 1], [2, 3], [4, 5]]
    finally:
        for c in consumers:
            c.close()


def test_offset_reset_latest_skips_old_records(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 1, 5)
    with _consumer(fake_cluster, auto_offset_reset="latest") as c:
        c.subscribe(["t"])
        _poll_until(c, lambda: bool(c.assignment()))
        assert c.position(TopicPartition("t", 0)) == 5
        _fill(fake_cluster, "t", 1, 1)
        records: list[Any] = []
        deadline = time.monotonic() + 10
        while not records and time.monotonic() < deadline:
            records += c.poll(100)
        assert [r.offset for r in records] == [5]


def test_offset_reset_none_names_the_partition(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 2, 1)
    with _consumer(fake_cluster, auto_offset_reset="none") as c:
        c.subscribe(["t"])
        with pytest.raises(NoOffsetForPartitionError) as info:
            _poll_until(c, lambda: False, 10)
        assert "t-0" in str(info.value) and "auto_offset_reset='none'" in str(info.value)


def test_commit_then_restart_resumes_from_committed(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 1, 10)
    tp = TopicPartition("t", 0)
    with _consumer(fake_cluster, auto_offset_reset="earliest", enable_auto_commit=False,
                   max_poll_records=4) as c:
        c.subscribe(["t"])
        records = _poll_until(c, lambda: bool(c.assignment()) and c.position(tp) > 0)
        got = [r.offset for r in records]
        assert got[0] == 0
        c.commit()
        assert c.committed([tp]) == {tp: got[-1] + 1}
        c.commit({tp: 7})
        assert c.committed([tp]) == {tp: 7}
    with _consumer(fake_cluster, auto_offset_reset="earliest") as c:
        c.subscribe(["t"])
        records = _poll_until(c, lambda: c.assignment() != set() and c.position(tp) >= 10)
        assert [r.offset for r in records] == [7, 8, 9]


def test_auto_commit_on_close_and_interval(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 1, 3)
    tp = TopicPartition("t", 0)
    with _consumer(fake_cluster, auto_offset_reset="earliest", auto_commit_interval_ms=100) as c:
        c.subscribe(["t"])
        _poll_until(c, lambda: bool(c.assignment()) and c.position(tp) == 3)
        _poll_until(c, lambda: fake_cluster.group_coordinator.offsets.get(("g", "t", 0)) == 3)
    assert fake_cluster.group_coordinator.offsets[("g", "t", 0)] == 3


def test_listener_revoked_before_assigned_and_commit_inside(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 2, 2)
    a_listener, b_listener = Recorder(), Recorder()
    a = _consumer(fake_cluster, auto_offset_reset="earliest", enable_auto_commit=False)
    b = _consumer(fake_cluster, auto_offset_reset="earliest", enable_auto_commit=False)
    committed_in_callback: list[dict[TopicPartition, int | None]] = []

    class Committing(Recorder):
        def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
            super().on_partitions_revoked(partitions)
            a.commit()  # the listener runs on the polling thread: commit() is allowed here
            committed_in_callback.append(a.committed(partitions))

    a_listener = Committing()
    try:
        a.subscribe(["t"], listener=a_listener)
        _poll_until(a, lambda: len(a.assignment()) == 2)
        _poll_until(a, lambda: all(a.position(tp) == 2 for tp in a.assignment()))
        b.subscribe(["t"], listener=b_listener)
        with _polling([a, b]):
            _wait(lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1)
        everything = [TopicPartition("t", 0), TopicPartition("t", 1)]
        assert a_listener.events[0] == ("assigned", everything)
        assert a_listener.events[1] == ("revoked", everything)  # eager: all, before rejoining
        assert a_listener.events[2][0] == "assigned" and len(a_listener.events[2][1]) == 1
        assert committed_in_callback == [{tp: 2 for tp in everything}]
        assert [e[0] for e in b_listener.events] == ["assigned"]
        # never on the client's loop thread: on the test thread or the polling threads
        assert a_listener.threads and not any(
            name.startswith("strom-") for name in a_listener.threads | b_listener.threads)
        # b resumes the partition it took over from what a committed: nothing left to read
        tp_b = next(iter(b.assignment()))
        assert b.position(tp_b) == 2
    finally:
        a.close()
        b.close()
    assert a_listener.events[-1][0] == "revoked"  # close() revokes before leaving


def test_cooperative_sticky_keeps_unmoved_partitions(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 4, 0)
    coop = {"partition_assignment_strategy": ["cooperative-sticky"]}
    a_listener, b_listener = Recorder(), Recorder()
    a = _consumer(fake_cluster, **coop)
    b = _consumer(fake_cluster, **coop)
    try:
        a.subscribe(["t"], listener=a_listener)
        _poll_until(a, lambda: len(a.assignment()) == 4)
        positions = {tp: a.position(tp) for tp in a.assignment()}
        b.subscribe(["t"], listener=b_listener)
        with _polling([a, b]):
            _wait(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
        kept = a.assignment()
        moved = set(positions) - kept
        assert a_listener.events[0] == ("assigned", sorted(positions))
        # only the moved partitions were revoked; the kept ones were never given up
        assert a_listener.events[1] == ("revoked", sorted(moved))
        # then the assignment of this and the follow-up generation: nothing new for a
        assert set(map(str, a_listener.events[2:])) == {str(("assigned", []))}
        assert b_listener.events[-1] == ("assigned", sorted(moved))
        assert b.assignment() == moved
    finally:
        a.close()
        b.close()


def test_pattern_subscription_picks_up_a_new_topic(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "orders-eu", 1, 0)
    _fill(fake_cluster, "other", 1, 0)
    with _consumer(fake_cluster, metadata_max_age_ms=200) as c:
        c.subscribe(pattern=r"orders-.*")
        _poll_until(c, lambda: c.assignment() == {TopicPartition("orders-eu", 0)})
        _fill(fake_cluster, "orders-us", 2, 0)
        _poll_until(c, lambda: len(c.assignment()) == 3)
        assert c.subscription() == {"orders-eu", "orders-us"}


def test_static_member_rejoin_keeps_assignment_without_rebalance(
        fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 4, 0)
    a = _consumer(fake_cluster, group_instance_id="a")
    b = _consumer(fake_cluster, group_instance_id="b")
    try:
        for c in (a, b):
            c.subscribe(["t"])
        with _polling([a, b]):
            _wait(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
        before = b.assignment()
        generation = fake_cluster.group_coordinator.groups["g"].generation
        b.close()  # a static member does not leave: no LeaveGroup, no rebalance
        assert not [call for call in fake_cluster.calls if call[1] == "LeaveGroup"]
        b = _consumer(fake_cluster, group_instance_id="b")
        b.subscribe(["t"])
        _poll_until(b, lambda: bool(b.assignment()))
        assert b.assignment() == before
        assert fake_cluster.group_coordinator.groups["g"].generation == generation
    finally:
        a.close()
        b.close()


def test_close_sends_leave_group_and_the_rest_take_over(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 2, 0)
    a, b = _consumer(fake_cluster), _consumer(fake_cluster)
    try:
        for c in (a, b):
            c.subscribe(["t"])
        with _polling([a, b]):
            _wait(lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1)
        b_member = b._group.member_id if b._group else ""
        b.close()
        leaves = [call[2] for call in fake_cluster.calls if call[1] == "LeaveGroup"]
        assert [[m.member_id for m in leave.members] for leave in leaves] == [[b_member]]
        assert b_member not in fake_cluster.group_coordinator.groups["g"].members
        _poll_until(a, lambda: len(a.assignment()) == 2)
    finally:
        a.close()
        b.close()


def test_subscribe_errors_name_the_fix(fake_cluster: FakeCluster) -> None:
    with Consumer(fake_cluster.bootstrap) as c, pytest.raises(StromError, match="group_id"):
        c.subscribe(["t"])
    with _consumer(fake_cluster) as c:
        c.assign([TopicPartition("t", 0)])
        with pytest.raises(StromError, match="unsubscribe"):
            c.subscribe(["t"])
        c.unsubscribe()
        c.subscribe(["t"])
        with pytest.raises(StromError, match="unsubscribe"):
            c.assign([TopicPartition("t", 0)])
        with pytest.raises(StromError, match="exactly one"):
            c.subscribe(["t"], pattern="t.*")


@pytest.mark.parametrize(("options", "fragment"), [
    ({"enable_auto_commit": True}, "group_id"),
    ({"group_id": "g", "heartbeat_interval_ms": 5000, "session_timeout_ms": 5000},
     "heartbeat_interval_ms"),
    ({"group_id": "g", "partition_assignment_strategy": ["fancy"]},
     "partition_assignment_strategy"),
    ({"group_instance_id": "x"}, "group_id"),
])
def test_option_validation(options: dict[str, Any], fragment: str) -> None:
    with pytest.raises(StromError, match=fragment) as info:
        Consumer("127.0.0.1:1", **options)
    assert info.value.code is ErrorCode.INVALID_CONFIG


def test_commit_after_being_dropped_is_commit_failed(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, "t", 1, 0)
    with _consumer(fake_cluster, enable_auto_commit=False) as c:
        c.subscribe(["t"])
        _poll_until(c, lambda: bool(c.assignment()))
        fake_cluster.group_coordinator.faults["OffsetCommit"].append(ErrorCode.ILLEGAL_GENERATION)
        with pytest.raises(CommitFailedError, match="rebalanced") as info:
            c.commit({TopicPartition("t", 0): 0})
        assert info.value.code is ErrorCode.ILLEGAL_GENERATION
