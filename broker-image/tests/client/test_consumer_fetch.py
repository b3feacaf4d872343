"""The sync Consumer against the fake cluster: positions, seeks, long-poll, prefetch, resets."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from strom.client import (
    OFFSET_BEGINNING,
    Consumer,
    ErrorCode,
    Producer,
    StromError,
    TopicPartition,
)
from strom.testing.waits import wait_until

from .conftest import FakeCluster

TP = TopicPartition("t", 0)


def _fill(cluster: FakeCluster, n: int, topic: str = "t", partitions: int = 1,
          batch_size: int = 4096) -> None:
    cluster.create_topic(topic, partitions)
    with Producer(cluster.bootstrap, batch_size=batch_size, linger_ms=0) as p:
        for i in range(n):
            p.send(topic, b"v%d" % i, partition=i % partitions, timestamp_ms=1000 + i)
        p.flush(10)


def _drain(c: Consumer, n: int, timeout: float = 10) -> list[int]:
    offsets: list[int] = []
    deadline = time.monotonic() + timeout
    while len(offsets) < n and time.monotonic() < deadline:
        offsets += [r.offset for r in c.poll(200)]
    return offsets


def test_reads_everything_in_order(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, 5000)
    with Consumer(fake_cluster.bootstrap, auto_offset_reset="earliest",
                  max_partition_fetch_bytes=8192, max_poll_records=700) as c:
        c.assign([TP])
        offsets = _drain(c, 5000)
        assert offsets == list(range(5000))
        assert c.position(TP) == 5000
        assert c.poll(50) == []


def test_latest_reset_then_new_records(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, 10)
    with Consumer(fake_cluster.bootstrap, fetch_max_wait_ms=2000) as c:
        c.assign([TP])
        assert c.position(TP) == 10
        with Producer(fake_cluster.bootstrap, linger_ms=0) as p:
            threading.Timer(0.2, lambda: p.send("t", b"late")).start()
            start = time.monotonic()
            records = c.poll(5000)
            waited = time.monotonic() - start
            p.flush(5)
        assert [(r.offset, r.value) for r in records] == [(10, b"late")]
        assert waited < 1.9  # the long-poll returned when data arrived, not at max_wait


def test_seek_and_seek_to_beginning_drop_prefetched(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, 300)
    with Consumer(fake_cluster.bootstrap, auto_offset_reset="earliest",
                  max_poll_records=10) as c:
        c.assign([TP])
        assert [r.offset for r in c.poll(2000)] == list(range(10))
        wait_until(lambda: _fetched_ahead(c), 10, what="the prefetch to run ahead")
        c.seek(TP, 250)
        assert c.poll(2000)[0].offset == 250
        c.seek_to_beginning(TP)
        assert c.position(TP) == 0
        assert c.poll(2000)[0].offset == 0
        c.seek(TP, OFFSET_BEGINNING)
        assert c.poll(2000)[0].offset == 0


def test_seek_to_end_and_offset_lookups(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, 100, partitions=2)
    tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
    with Consumer(fake_cluster.bootstrap) as c:
        c.assign(tps)
        c.seek_to_end(*tps)
        assert [c.position(tp) for tp in tps] == [50, 50]
        assert c.beginning_offsets(tps) == {tps[0]: 0, tps[1]: 0}
        assert c.end_offsets(tps) == {tps[0]: 50, tps[1]: 50}
        # partition 0 holds records i = 0, 2, 4, ... with timestamp 1000 + i
        found = c.offsets_for_times({tps[0]: 1010, tps[1]: 99_999})
        hit = found[tps[0]]
        assert hit is not None and hit[0] == 5
        assert found[tps[1]] is None
        assert c.assignment() == set(tps)


def test_out_of_range_resets_by_policy(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, 20)
    with Consumer(fake_cluster.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TP])
        c.seek(TP, 1000)
        assert _drain(c, 20) == list(range(20))


def test_out_of_range_with_reset_none_raises(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, 5)
    with Consumer(fake_cluster.bootstrap, auto_offset_reset="none") as c:
        c.assign([TP])
        with pytest.raises(StromError):
            c.position(TP)
        c.seek(TP, 1000)
        with pytest.raises(StromError) as info:
            for _ in range(20):
                c.poll(200)
        assert info.value.code is ErrorCode.OFFSET_OUT_OF_RANGE


def test_fetch_retries_after_not_leader(fake_cluster2: FakeCluster) -> None:
    fake_cluster2.create_topic("t", 1, leaders=[1])
    with Producer(fake_cluster2.bootstrap) as p:
        for i in range(10):
            p.send("t", b"%d" % i)
    fake_cluster2.faults[("Fetch", "t", 0)] = [ErrorCode.NOT_LEADER_OR_FOLLOWER]
    with Consumer(fake_cluster2.bootstrap, auto_offset_reset="earliest",
                  retry_backoff_ms=10) as c:
        c.assign([TP])
        assert _drain(c, 10) == list(range(10))
        fake_cluster2.set_leader("t", 0, 2)
        with Producer(fake_cluster2.bootstrap) as p:
            p.send("t", b"after move").result(10)
        records = [r for _ in range(20) for r in c.poll(200)][:1]
        assert records and records[0].value == b"after move"
    fetch_brokers = {b for b, rpc, _ in fake_cluster2.calls if rpc == "Fetch"}
    assert fetch_brokers == {1, 2}


def _fetched_ahead(c: Consumer) -> bool:
    """The consumer has fetched (or is fetching) past its position in TP."""
    with c._core.subs.lock:
        st = c._core.subs.states[TP]
        return st.fetch_offset is not None and st.position is not None \
            and st.fetch_offset > st.position


def _fetch_offsets(cluster: FakeCluster) -> set[int]:
    return {r.partitions[0].fetch_offset for _, rpc, r in cluster.calls if rpc == "Fetch"}


def test_prefetch_keeps_a_fetch_in_flight(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, 2000)
    with Consumer(fake_cluster.bootstrap, auto_offset_reset="earliest",
                  max_partition_fetch_bytes=4096, max_poll_records=50) as c:
        c.assign([TP])
        first = [r.offset for r in c.poll(2000)]
        assert first
        # the app "works"; the fetcher fills its prefetch buffer meanwhile
        wait_until(lambda: _fetched_ahead(c) and len(_fetch_offsets(fake_cluster)) >= 2, 10,
                   what="a fetch ahead of the position")
        fetches = [r for _, rpc, r in fake_cluster.calls if rpc == "Fetch"]
        offsets = [r.partitions[0].fetch_offset for r in fetches]
        assert len(set(offsets)) >= 2  # fetched ahead of the position
        with c._core.subs.lock:
            st = c._core.subs.states[TP]
            assert st.fetch_offset is not None and st.position is not None
            assert st.fetch_offset > st.position
        assert first + _drain(c, 2000 - len(first)) == list(range(2000))


def test_iterator(fake_cluster: FakeCluster) -> None:
    _fill(fake_cluster, 30)
    with Consumer(fake_cluster.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TP])
        got = []
        for record in c:
            got.append(record.value)
            if len(got) == 30:
                break
    assert got == [b"v%d" % i for i in range(30)]


def test_seek_right_after_position_never_stalls(fake_cluster: FakeCluster) -> None:
    # regression: a fetch cancelled by seek() before it first ran left its partition
    # marked "in flight" forever
    _fill(fake_cluster, 100)
    for _ in range(15):
        with Consumer(fake_cluster.bootstrap, fetch_max_wait_ms=500) as c:
            c.assign([TP])
            assert c.position(TP) == 100
            c.seek(TP, 90)
            got: list[int] = []
            deadline = time.monotonic() + 0.9  # well under the 1 s safety re-check
            while len(got) < 10 and time.monotonic() < deadline:
                got += [r.offset for r in c.poll(100)]
            assert got == list(range(90, 100))


def test_a_fetch_asks_at_most_fetch_request_bytes(fake_cluster: FakeCluster) -> None:
    """A catch-up over many partitions comes as several answers of at most
    ``FETCH_REQUEST_BYTES``, whatever ``fetch_max_bytes`` allows, so one is decoded while the
    next is built and sent (issue 21: over 1,000 partitions one Fetch carried 24.7 MB)."""
    from strom.client.fetcher import FETCH_REQUEST_BYTES

    _fill(fake_cluster, 200, partitions=20)
    with Consumer(fake_cluster.bootstrap, auto_offset_reset="earliest",
                  fetch_max_bytes=64 << 20) as c:
        c.assign([TopicPartition("t", p) for p in range(20)])
        assert len(_drain(c, 200)) == 200
    sizes = [request.max_bytes for _, name, request in fake_cluster.calls if name == "Fetch"]
    assert sizes and max(sizes) == FETCH_REQUEST_BYTES == 4 << 20  # 20 MiB before


def test_a_seek_does_not_wait_for_the_assignments_reset(fake_cluster: FakeCluster) -> None:
    """assign() starts resetting the new partitions (auto_offset_reset, here latest); a
    seek_to_beginning() right after must not wait for that ListOffsets answer, which is for
    the old generation and ignored: its partitions' earliest offsets go out at once, in one
    request (issue 21: over 1,000 partitions the catch-up waited for a whole ListOffsets of
    every partition, then split the seeks in two waves)."""
    _fill(fake_cluster, 100, partitions=4)

    async def gate() -> asyncio.Event:
        return asyncio.Event()

    held = fake_cluster.latest_offsets_gate = fake_cluster.run(gate())
    tps = [TopicPartition("t", p) for p in range(4)]

    def asked(timestamp: int) -> list[set[int]]:
        return [{p.partition for p in request.partitions}
                for _, name, request in list(fake_cluster.calls)
                if name == "ListOffsets" and request.partitions[0].timestamp == timestamp]

    try:
        with Consumer(fake_cluster.bootstrap) as c:
            c.assign(tps)
            assert c.poll(0) == []  # positions are looked up from the first poll on
            wait_until(lambda: asked(-1), 10, what="the assignment's reset on the network")
            c.seek_to_beginning(*tps)
            assert sorted(_drain(c, 100, timeout=5)) == sorted(
                off for p in range(4) for off in range(25))  # before: none (held)
            assert asked(-2) == [{0, 1, 2, 3}]
    finally:
        fake_cluster.loop.call_soon_threadsafe(held.set)


def test_the_next_fetch_leaves_before_the_poll_side_hears_of_an_answer(
        fake_cluster: FakeCluster) -> None:
    """When a Fetch answer is in, the next Fetch to that broker is created from the answered
    fetch's own task, before ``on_data`` wakes the poll thread (issue 21: through the done
    callback and the fetcher's wake-up it left four or five event-loop turns later, each
    giving the GIL to a poll thread busy decoding: 8-31 ms between answer and request)."""
    _fill(fake_cluster, 2000)
    with Consumer(fake_cluster.bootstrap, auto_offset_reset="earliest",
                  max_partition_fetch_bytes=4096, max_poll_records=100) as c:
        core = c._core
        told = core.on_data
        seen: list[bool] = []

        def on_data() -> None:
            task = asyncio.current_task() if threading.current_thread() is c._thread._thread \
                else None
            if task is not None and task.get_coro().__qualname__ == "ConsumerCore._fetch":
                pending = [t for t in core._fetches.values() if not t.done()]
                with core.subs.lock:
                    full = core.subs.states[TP].buffered >= core.subs.max_buffered_fetches
                seen.append(full or (bool(pending) and task not in pending))
            told()

        core.on_data = on_data
        c.assign([TP])
        assert sorted(_drain(c, 2000)) == list(range(2000))
    assert len(seen) >= 5
    assert all(seen), seen  # a partition with room in its prefetch buffer was asked for again


def test_an_assignment_alone_looks_up_no_offsets(fake_cluster: FakeCluster) -> None:
    """As in Kafka's consumer, assign() sends no ListOffsets: positions are looked up by the
    next poll(), position() or seek. assign() then seek_to_beginning() asks once, for the
    earliest offsets (issue 21: the assignment's auto_offset_reset lookup of every partition
    often went out first, for nothing: two ListOffsets of 1,000 partitions before the first
    Fetch)."""
    _fill(fake_cluster, 100, partitions=4)
    tps = [TopicPartition("t", p) for p in range(4)]

    def lookups() -> list[set[int]]:
        return [{p.timestamp for p in request.partitions}
                for _, name, request in list(fake_cluster.calls) if name == "ListOffsets"]

    with Consumer(fake_cluster.bootstrap, auto_offset_reset="earliest") as c:
        c.assign(tps)
        time.sleep(0.3)  # the fetcher wakes meanwhile (metadata is due every 50 ms)
        assert lookups() == []
        c.seek_to_beginning(*tps)
        assert len(_drain(c, 100)) == 100
        assert lookups() == [{-2}]
    fake_cluster.calls.clear()
    with Consumer(fake_cluster.bootstrap, auto_offset_reset="earliest") as c:
        c.assign(tps)
        time.sleep(0.3)
        assert lookups() == []
        assert len(_drain(c, 100)) == 100  # the first poll looks them up
        assert lookups() == [{-2}]
    fake_cluster.calls.clear()
    with Consumer(fake_cluster.bootstrap) as c:
        c.assign(tps)
        assert c.position(tps[1]) == 25  # latest
        assert lookups() == [{-1}]


def test_a_freed_prefetch_slot_does_not_wait_for_a_long_poll(fake_cluster: FakeCluster) -> None:
    """A Fetch that names only caught-up partitions long-polls; when a partition held back by
    its full prefetch buffer frees a slot and the last answer said it has more records, the
    long-poll is given up and a new Fetch asks for them (issue 21: the last ~6,000 records of a
    10-partition catch-up waited out fetch_max_wait_ms, 500 ms)."""
    fake_cluster.create_topic("t", 2)
    with Producer(fake_cluster.bootstrap, batch_size=1024, linger_ms=0) as p:
        for i in range(3000):
            p.send("t", b"v%05d" % i, partition=0)
        p.send("t", b"one", partition=1)
        p.flush(10)
    tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
    with Consumer(fake_cluster.bootstrap, auto_offset_reset="earliest",
                  max_partition_fetch_bytes=2048, max_poll_records=50,
                  fetch_max_wait_ms=30_000) as c:
        c.assign(tps)
        assert c.poll(5000)  # started; then partition 0's buffer fills, partition 1 is caught up
        wait_until(lambda: _fetched_ahead(c), 10, what="the prefetch to run ahead")
        time.sleep(0.3)
        start = time.monotonic()
        got = _drain(c, 3001 - 50, timeout=20)
        assert len(got) >= 3001 - 50
        assert time.monotonic() - start < 15  # before: stuck behind the 30 s long-poll


def test_a_fetch_session_error_starts_over_at_once(fake_cluster: FakeCluster) -> None:
    """FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH (the broker restarted or
    evicted the session) are answered with a full fetch at once, not after a retry back-off,
    as Kafka's consumer does."""
    _fill(fake_cluster, 10)
    fake_cluster.call_faults["Fetch"] = [ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                                         ErrorCode.INVALID_FETCH_SESSION_EPOCH]
    with Consumer(fake_cluster.bootstrap, auto_offset_reset="earliest",
                  retry_backoff_ms=60_000, retry_backoff_max_ms=60_000) as c:
        c.assign([TP])
        assert sorted(_drain(c, 10)) == list(range(10))  # before: none in 10 s (backed off)
    fetches = [r for _, name, r in fake_cluster.calls if name == "Fetch"]
    assert fetches[2].session_epoch == 0 and len(fetches[2].partitions) == 1
