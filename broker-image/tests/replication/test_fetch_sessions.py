"""Fetch sessions (KIP-227) between followers and leaders: after one full fetch a follower names
only partitions whose position changed and gets back only partitions with news, so the cost of
a fetch does not grow with the partitions followed (issue 21 item 7). Before sessions every
ReplicaFetch named, and every answer carried, every partition."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.fetch_session import FetcherSession
from strom.protocol.records import encode_batch
from strom.protocol.replica_fetch import Response
from strom.protocol.v1 import replica_pb2
from strom.replication.manager import ReplicaManager
from strom.replication.sessions import SessionCache, Wanted
from strom.replication.state import PartitionView
from strom.replication.waiters import AppendWaiters
from strom.storage.config import LogConfig

from .harness import Cluster, wait_until

PARTITIONS = 100


@dataclasses.dataclass
class _Seen:
    session_epoch: int
    named: int
    forgotten: int
    answered: int
    error: int


def _record(manager: ReplicaManager, seen: list[_Seen]) -> None:
    """Wrap ``manager.replica_fetch`` to note each request's and answer's size."""
    inner: Callable[[replica_pb2.ReplicaFetchRequest], Any] = manager.replica_fetch

    async def replica_fetch(request: replica_pb2.ReplicaFetchRequest) -> Response:
        head, answers = await inner(request)
        seen.append(_Seen(request.session_epoch, len(request.partitions),
                          len(request.forgotten), len(answers), head.error_code))
        return head, answers

    manager.replica_fetch = replica_fetch  # type: ignore[method-assign]


def _views(n: int) -> list[PartitionView]:
    return [PartitionView("t", p, 0, 0, 0, (0, 1), (0, 1)) for p in range(n)]


async def test_incremental_fetches_name_and_answer_only_what_changed(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, (0, 1))
    seen: list[_Seen] = []
    try:
        await cluster.start(0)
        _record(cluster.nodes[0].m, seen)
        await cluster.start(1)
        for view in _views(PARTITIONS):
            cluster.set_view(view)
        leader = cluster.nodes[0].m
        await wait_until(lambda: leader.fetch_sessions() == 1 and len(seen) >= 3,
                         what="a session and a few incremental fetches")
        # one full fetch named every partition; the idle ones after it name none
        full = [s for s in seen if s.session_epoch == 0]
        assert full and full[-1].named == PARTITIONS and full[-1].answered == PARTITIONS
        mark = len(seen)
        for i, p in enumerate((3, 50, 97)):
            await leader.append("t", p, encode_batch([(b"k", b"v%d" % i)]), -1, LogConfig(),
                                5000)
        for p in (3, 50, 97):
            await wait_until(lambda p=p: cluster.nodes[1].log("t", p).log_end_offset == 1,
                             what=f"t-{p} replicated")
        later = seen[mark:]
        assert later and all(s.session_epoch > 0 for s in later), later
        # each fetch names at most the partitions that moved and answers only those
        assert max(s.named for s in later) <= 3, later
        assert max(s.answered for s in later) <= 3, later
        assert sum(s.answered for s in later) >= 3
    finally:
        await cluster.close()


async def test_leader_restart_makes_the_follower_start_over_with_a_full_fetch(
        tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, (0, 1))
    seen: list[_Seen] = []
    try:
        await cluster.start(0)
        await cluster.start(1)
        for view in _views(20):
            cluster.set_view(view)
        leader = cluster.nodes[0].m
        await wait_until(lambda: leader.fetch_sessions() == 1, what="a session")
        await cluster.stop(0)  # the new manager knows no session: FETCH_SESSION_ID_NOT_FOUND
        await cluster.start(0)
        _record(cluster.nodes[0].m, seen)
        leader = cluster.nodes[0].m
        await leader.append("t", 5, encode_batch([(b"k", b"after")]), -1, LogConfig(), 5000)
        assert cluster.nodes[1].log("t", 5).log_end_offset == 1
        assert any(s.session_epoch == 0 and s.named == 20 for s in seen), seen
    finally:
        await cluster.close()


async def test_partitions_moving_in_during_a_long_poll_do_not_cost_a_full_fetch(
        tmp_path: Path) -> None:
    """A partition added to a follower's fetcher interrupts its long-poll (failover speed); the
    next request retries the interrupted one in the session instead of naming every partition
    again, and nothing appended meanwhile is left behind."""
    cluster = Cluster(tmp_path, (0, 1), fetch_wait_max_ms=1000)
    seen: list[_Seen] = []
    try:
        await cluster.start(0)
        _record(cluster.nodes[0].m, seen)
        await cluster.start(1)
        for view in _views(50):
            cluster.set_view(view)
        leader = cluster.nodes[0].m
        await wait_until(lambda: any(s.session_epoch > 0 for s in seen),
                         what="the first incremental fetch")
        mark = len(seen)
        for i in range(5):
            await leader.append("t", i, encode_batch([(b"k", b"before")]), 1, LogConfig(), 1000)
            cluster.set_view(PartitionView("u", i, 0, 0, 0, (0, 1), (0, 1)))
            await leader.append("u", i, encode_batch([(b"k", b"new")]), 1, LogConfig(), 1000)
        for i in range(5):
            for topic in ("t", "u"):
                await wait_until(lambda t=topic, i=i: cluster.nodes[1].log(t, i).log_end_offset
                                 == 1, timeout_s=4, what=f"{topic}-{i} replicated")
        assert all(s.session_epoch > 0 for s in seen[mark:]), seen
    finally:
        await cluster.close()


async def test_an_append_after_a_long_idle_spell_does_not_drop_the_follower(
        tmp_path: Path) -> None:
    """An idle partition is not looked at by incremental fetches, so its follower's caught-up
    time is not refreshed by them (Kafka's leader refreshes it on every fetch); the leader
    records it when it appends. Without that, an ISR check between the append and the
    follower's next fetch dropped a follower that had been caught up all along."""
    cluster = Cluster(tmp_path, (0, 1), isr_check_interval_ms=60_000)
    try:
        await cluster.start(0)
        await cluster.start(1)
        cluster.set_view(PartitionView("t", 0, 0, 0, 0, (0, 1), (0, 1)))
        leader = cluster.nodes[0].m
        await leader.append("t", 0, encode_batch([(b"k", b"1")]), -1, LogConfig(), 5000)
        lag_s = cluster.nodes[0].settings.replica_lag_time_max_ms / 1000
        calls = cluster.alter_calls
        await asyncio.sleep(lag_s * 2)  # idle for longer than the lag time, fetching
        await leader.append("t", 0, encode_batch([(b"k", b"2")]), 1, LogConfig(), 5000)
        leader.check_isr()  # before the follower fetched the new batch
        await asyncio.sleep(0.05)
        assert cluster.alter_calls == calls and cluster.view().isr == (0, 1)
    finally:
        await cluster.close()


async def test_an_idle_follower_rejoins_the_isr_after_a_shrink(tmp_path: Path) -> None:
    """A follower dropped from the ISR (it lagged while the brokers were busy) and caught up
    since rejoins it although its partition stays idle: the leader looks at the partition again
    once its pending ISR change is done (seen at 10,000 partitions: thousands of idle
    partitions kept ISRs of one, refusing acks=all writes, with every broker up)."""
    cluster = Cluster(tmp_path, (0, 1))
    try:
        await cluster.start(0)
        await cluster.start(1)
        cluster.set_view(PartitionView("t", 0, 0, 0, 0, (0, 1), (0, 1)))
        leader = cluster.nodes[0].m
        await leader.append("t", 0, encode_batch([(b"k", b"1")]), -1, LogConfig(), 5000)
        alter = leader._alter_isr

        async def applied_then_late(topic: str, partition: int, isr: tuple[int, ...],
                                    epoch: int) -> None:
            await alter(topic, partition, isr, epoch)  # applied (and published) here
            await asyncio.sleep(0.05)  # the caller hears of it later, as through the broker

        leader._alter_isr = applied_then_late  # type: ignore[method-assign]
        part = leader._partitions[("t", 0)]
        leader._propose_isr(part, (0,), expand=False)  # as if broker 1 had lagged
        await wait_until(lambda: cluster.view().isr == (0,), what="the shrink")
        await wait_until(lambda: cluster.view().isr == (0, 1), timeout_s=5,
                         what="broker 1 back in the ISR")
    finally:
        await cluster.close()


# -- the pure parts ----------------------------------------------------------------------------

def _wanted(offset: int = 0) -> Wanted:
    return Wanted(offset, -1, 0, 1 << 20)


def test_session_rules() -> None:
    waiters = AppendWaiters()
    cache = SessionCache(waiters, seed=1)
    a, b = ("t", 0), ("t", 1)
    plan = cache.plan(1, 0, 0, [(a, _wanted()), (b, _wanted())], [])
    assert plan.session is not None and plan.full and plan.cached
    sid = plan.session.session_id
    assert sid and plan.todo == (a, b)
    # an incremental fetch looks at what it names and at what changed here since
    waiters.notify(b)
    plan2 = cache.plan(1, sid, 1, [(a, _wanted(5))], [])
    assert plan2.session is plan.session and not plan2.full and plan2.todo == (b, a)
    assert plan.session.partitions[a].fetch_offset == 5
    # the latest epoch again is a retry: what its answer told is told again
    assert plan.session.news(a, 10, 0, 10)
    plan.session.answering.add(a)
    retry = cache.plan(1, sid, 1, [], [])
    assert retry.error is None and retry.todo == (a,) and plan.session.news(a, 10, 0, 10)
    # wrong epoch, unknown id, another broker's id: start over
    assert cache.plan(1, sid, 3, [], []).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert cache.plan(1, sid + 1, 2, [], []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.plan(2, sid, 2, [], []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # forgotten partitions are no longer watched
    plan3 = cache.plan(1, sid, 2, [], [a])
    assert plan3.todo == () and a not in plan.session.partitions
    waiters.notify(a)
    assert not plan.session.dirty
    # a new full fetch of the same broker replaces its session: one per follower broker
    plan4 = cache.plan(1, 0, 0, [(a, _wanted())], [])
    assert len(cache) == 1 and cache.get(sid) is None and plan4.session is not None
    waiters.notify(b)  # the old session's partition is not watched any more
    assert not plan.session.dirty
    # sessionless: answered, not kept
    plan5 = cache.plan(2, 0, -1, [(a, _wanted())], [])
    assert plan5.session is not None and not plan5.cached and len(cache) == 1


def test_follower_session_names_only_changed_partitions() -> None:
    session = FetcherSession()
    keys = {("t", p): (0, -1, 0) for p in range(5)}
    named, forgotten = session.request(keys, keys.get)
    assert len(named) == 5 and not forgotten and session.full
    session.answered(42, 0)
    assert (session.session_id, session.epoch) == (42, 1)
    keys[("t", 2)] = (7, 0, 0)
    for tp in keys:
        session.touch(tp)
    named, forgotten = session.request(keys, keys.get)
    assert named == [(("t", 2), (7, 0, 0))] and not forgotten
    session.answered(42, 0)
    assert session.epoch == 2
    del keys[("t", 4)]  # delayed or no longer followed
    session.touch(("t", 4))
    named, forgotten = session.request(keys, keys.get)
    assert named == [] and forgotten == [("t", 4)]
    # an interrupted request is retried with the same epoch, naming and forgetting again
    session.interrupted()
    named, forgotten = session.request(keys, keys.get)
    assert named == [] and forgotten == [("t", 4)] and session.epoch == 2
    keys[("t", 1)] = (3, 0, 0)
    session.touch(("t", 1))
    named, _ = session.request(keys, keys.get)
    session.interrupted()
    assert session.request(keys, keys.get) == (named, []) and session.epoch == 2
    session.answered(0, int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND))
    assert session.full and session.session_id == 0
    named, _ = session.request(keys, keys.get)
    assert len(named) == 4


async def test_a_full_fetch_is_answered_without_waiting(tmp_path: Path) -> None:
    """A full fetch that names partitions is answered after one pass even with nothing to
    send (the follower does not interrupt it, so the partitions added meanwhile wait for its
    answer); an incremental one with nothing new still long-polls."""
    cluster = Cluster(tmp_path, (0,))
    try:
        await cluster.start(0)
        for view in _views(3):
            cluster.set_view(view)
        leader = cluster.nodes[0].m

        def request(session_id: int, epoch: int, partitions: list[int], wait_ms: int
                    ) -> replica_pb2.ReplicaFetchRequest:
            return replica_pb2.ReplicaFetchRequest(
                replica_id=1, max_wait_ms=wait_ms, min_bytes=1, max_bytes=1 << 20,
                session_id=session_id, session_epoch=epoch, partitions=[
                    replica_pb2.ReplicaFetchPartition(
                        topic="t", partition=p, fetch_offset=0, last_fetched_epoch=-1,
                        current_leader_epoch=0, partition_max_bytes=1 << 20)
                    for p in partitions])

        loop = asyncio.get_running_loop()
        started = loop.time()
        head, answers = await leader.replica_fetch(request(0, 0, [0, 1], 20_000))
        assert loop.time() - started < 10.0  # not the 20 s long-poll
        assert len(answers) == 2 and head.session_id
        started = loop.time()
        _, answers = await leader.replica_fetch(request(head.session_id, 1, [], 300))
        assert loop.time() - started >= 0.25 and not answers  # nothing new: a long-poll
    finally:
        await cluster.close()
