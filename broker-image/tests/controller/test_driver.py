"""``QuorumDriver`` in one event loop: three drivers over an in-memory loopback transport.

Checks the driver's side of the Raft contract without sockets: a reply leaves a node only after
what it promises is persisted (a granted vote after the vote, an append acknowledgement after the
entries); proposals resolve with their index once applied, fail with NOT_CONTROLLER (with a
leader hint) on followers, and fail with NOT_CONTROLLER when an isolated leader's entry is
replaced; compaction snapshots the image into the log.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from strom.controller import driver as driver_module
from strom.controller.driver import NotControllerError, QuorumDriver, sends_before_applies
from strom.controller.messages import (
    AppendEntries,
    AppendEntriesResponse,
    LogEntry,
    Message,
    VoteResponse,
)
from strom.controller.metadata import (
    CreateTopic,
    Endpoint,
    MetadataImage,
    RegisterBroker,
    encode_command,
)
from strom.controller.raft import (
    Action,
    Apply,
    Persist,
    RaftConfig,
    RestoreSnapshot,
    Role,
    Send,
    Snapshot,
)
from strom.controller.raftlog import MemoryRaftLog
from strom.controller.transport import OnReply
from strom.protocol.errors import ErrorCode, StromError
from strom.ratelimit import RateLimitedLog


class Loopback:
    """Delivers to the other drivers of the same ``Net``; drops traffic of isolated nodes."""

    def __init__(self, net: Net, me: int) -> None:
        self.net, self.me = net, me
        self.tasks: set[asyncio.Task[None]] = set()
        self.held: list[Callable[[], None]] = []
        """Replies on their way in while ``hold_replies`` (released by the test)."""
        self.hold_replies = False

    def send(self, to: int, message: Message, on_reply: OnReply) -> None:
        task = asyncio.create_task(self._call(to, message, on_reply))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _call(self, to: int, message: Message, on_reply: OnReply) -> None:
        if self.net.cut(self.me, to):
            return
        reply = await self.net.drivers[to].receive(message)
        if reply is None or self.net.cut(self.me, to):
            return
        self.net.check_durable(to, self.me, reply)
        if self.hold_replies:
            self.held.append(lambda: on_reply(reply))
            return
        on_reply(reply)

    def update_addresses(self, addresses: object) -> None:
        pass

    async def close(self) -> None:
        for t in list(self.tasks):
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


class Net:
    def __init__(self, n: int, compact_every: int = 1000, *, election_timeout_ms: int = 150,
                 heartbeat_interval_ms: int = 20, apply_slice_s: float = 0.02) -> None:
        self.isolated: set[int] = set()
        self.logs = {i: MemoryRaftLog() for i in range(n)}
        self.violations: list[str] = []
        voters = frozenset(range(n))
        self.drivers = {
            i: QuorumDriver(
                RaftConfig(i, voters, election_timeout_ms=election_timeout_ms,
                           heartbeat_interval_ms=heartbeat_interval_ms),
                self.logs[i],
                Loopback(self, i),
                compact_every=compact_every,
                apply_slice_s=apply_slice_s,
                rng=random.Random(i),
            )
            for i in range(n)
        }

    def cut(self, a: int, b: int) -> bool:
        return a in self.isolated or b in self.isolated

    def check_durable(self, node: int, candidate: int, reply: Message) -> None:
        """What the reply promises is already in the node's persisted log."""
        log = self.logs[node]
        vote = isinstance(reply, VoteResponse) and reply.granted and not reply.pre_vote
        if vote and (
            log.term < reply.term or (log.term == reply.term and log.voted_for != candidate)
        ):
            self.violations.append(f"vote by {node} sent before persisted: {reply}")
        if isinstance(reply, AppendEntriesResponse) and reply.success:
            last = log.entries[-1].index if log.entries else log.snapshot.index
            if last < reply.match_index:
                self.violations.append(f"ack by {node} of {reply.match_index} > persisted {last}")

    async def start(self) -> None:
        for d in self.drivers.values():
            await d.start()

    async def stop(self) -> None:
        for d in self.drivers.values():
            await d.stop()

    async def leader(self, among: set[int] | None = None, timeout: float = 5.0) -> int:
        among = among if among is not None else set(self.drivers)
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            claims = {self.drivers[i].leader_id for i in among}
            if len(claims) == 1:
                (leader,) = claims
                if leader in among and self.drivers[leader].node.is_leader:
                    return leader
            await asyncio.sleep(0.01)
        raise AssertionError("no leader agreed on")


def _register(b: int) -> bytes:
    return encode_command(RegisterBroker(b, uuid.uuid4().hex, (Endpoint("P", "h", 1),)))


def _topic(name: str) -> bytes:
    return encode_command(CreateTopic(name, uuid.uuid4().hex, ((0,),)))


async def test_three_drivers_commit_and_apply_alike() -> None:
    net = Net(3, compact_every=3)
    await net.start()
    try:
        leader = await net.leader()
        d = net.drivers[leader]
        first = await d.propose(_register(0))
        indexes = [await d.propose(_topic(f"t{k}")) for k in range(6)]
        assert indexes == list(range(first + 1, first + 7))
        with pytest.raises(Exception) as info:
            await d.propose(_topic("t0"))
        assert getattr(info.value, "code", None) is ErrorCode.TOPIC_ALREADY_EXISTS

        follower = next(i for i in net.drivers if i != leader)
        with pytest.raises(NotControllerError) as nc:
            await net.drivers[follower].propose(_topic("x"))
        assert nc.value.leader_hint == leader

        async with asyncio.timeout(5):
            while len({dr.image.to_snapshot() for dr in net.drivers.values()}) != 1:
                await asyncio.sleep(0.01)
        assert sorted(net.drivers[follower].image.topics) == [f"t{k}" for k in range(6)]
        assert net.logs[leader].snapshot.index > 0  # compacted every 3 applied entries
        assert d.status().match_index[follower] > 0
        assert not net.violations, net.violations
    finally:
        await net.stop()


async def test_isolated_leader_loses_its_uncommitted_proposal() -> None:
    net = Net(3)
    await net.start()
    try:
        old = await net.leader()
        await net.drivers[old].propose(_register(0))
        net.isolated.add(old)
        stranded = asyncio.create_task(net.drivers[old].propose(_topic("lost")))
        rest = set(net.drivers) - {old}
        new = await net.leader(rest)
        assert new != old
        await net.drivers[new].propose(_topic("kept"))
        net.isolated.clear()
        async with asyncio.timeout(5):
            with pytest.raises(NotControllerError):
                await stranded
            while "kept" not in net.drivers[old].image.topics:
                await asyncio.sleep(0.01)
        assert "lost" not in net.drivers[old].image.topics
        assert await net.leader() == new
        assert not net.violations, net.violations
    finally:
        await net.stop()


async def test_single_driver_leads_alone() -> None:
    net = Net(1)
    await net.start()
    try:
        assert await net.leader() == 0
        assert await net.drivers[0].propose(_register(0)) == 2  # after the no-op at 1
        with pytest.raises(Exception) as info:
            await net.drivers[0].propose(b"")
        assert getattr(info.value, "code", None) is ErrorCode.INVALID_REQUEST
    finally:
        await net.stop()


async def test_idle_drivers_wake_only_when_a_tick_is_due() -> None:
    """Three idle drivers (heartbeat 20 ms, election timeout 150 ms) over 0.6 s: the leader is
    ticked about once per heartbeat, the followers once per quarter election timeout, and
    leadership and commits carry on. Before, every node was ticked every few ms whatever was
    due (a fixed 10 ms ticker: 60 ticks per node here, 100 a second on an idle cluster)."""
    net = Net(3)
    await net.start()
    try:
        leader = await net.leader()
        await net.drivers[leader].propose(_register(0))
        ticks = dict.fromkeys(net.drivers, 0)
        for i, d in net.drivers.items():
            real = d.node.tick

            def counted(now_ms: int, i: int = i, real: Callable[[int], list[Action]] = real
                        ) -> list[Action]:
                ticks[i] += 1
                return real(now_ms)

            d.node.tick = counted  # type: ignore[method-assign]
        await asyncio.sleep(0.6)
        assert await net.leader() == leader
        assert await net.drivers[leader].propose(_topic("still")) > 0
        followers = [i for i in net.drivers if i != leader]
        # 0.6 s / 20 ms = 30 heartbeats and 4 check-quorums at most, fewer when the loop is slow
        assert 5 <= ticks[leader] <= 40, ticks
        # one wake-up per quarter of an election timeout (37 ms here; 250 ms at the defaults)
        assert all(ticks[f] <= 20 for f in followers), ticks
        assert not net.violations, net.violations
    finally:
        await net.stop()


async def test_followers_learn_a_commit_without_a_heartbeat() -> None:
    """With every node's clock stopped (no heartbeat, no election), a proposal still reaches
    the followers' images: the leader tells caught-up peers of a commit as soon as its inbox
    is empty (``commit_notices``), not at its next heartbeat. Before, the followers applied an
    entry only when the next heartbeat carried its commit index (here: never)."""
    net = Net(3)
    await net.start()
    try:
        leader = await net.leader()
        await net.drivers[leader].propose(_register(0))
        for d in net.drivers.values():
            d.node.tick = lambda now_ms: []  # type: ignore[method-assign]
        await net.drivers[leader].propose(_topic("told"))
        async with asyncio.timeout(10):
            while not all("told" in d.image.topics for d in net.drivers.values()):
                await asyncio.sleep(0.01)
        assert not net.violations, net.violations
    finally:
        await net.stop()


async def test_until_leading_returns_only_on_the_leader() -> None:
    """``until_leading`` (what the active controller waits on instead of ticking while it
    does not lead) returns on the leader and keeps waiting on a follower."""
    net = Net(3)
    await net.start()
    try:
        leader = await net.leader()
        async with asyncio.timeout(10):
            await net.drivers[leader].until_leading()
        follower = next(i for i in net.drivers if i != leader)
        waiting = asyncio.create_task(net.drivers[follower].until_leading())
        await asyncio.sleep(0)
        assert not waiting.done()
        waiting.cancel()
    finally:
        await net.stop()


async def test_a_long_apply_keeps_leadership(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 21 item 3: 40 pipelined entries whose applying blocks 15 ms each on every node
    (1.8 s of applying in all, six election timeouts of 300 ms) commit and apply everywhere
    while the leader keeps its leadership and nobody starts a term: the drivers handle Raft
    messages and ticks between slices of applying. Before, a driver applied a whole ``Apply``
    without looking at its inbox: the leader sent no heartbeat and counted no acknowledgement
    for as long, and lost its leadership (the failover at 10,000 partitions)."""
    net = Net(3, election_timeout_ms=300, heartbeat_interval_ms=30, apply_slice_s=0.0)
    await net.start()
    try:
        leader = await net.leader()
        await net.drivers[leader].propose(_register(0))
        term = net.drivers[leader].node.term
        real_apply = MetadataImage.apply

        def slow_apply(image: MetadataImage, offset: int, command: Any) -> None:
            time.sleep(0.015)  # blocking work, as decoding and applying thousands of changes
            real_apply(image, offset, command)

        monkeypatch.setattr(MetadataImage, "apply", slow_apply)
        results = [net.drivers[leader].submit(_topic(f"t{k}")) for k in range(40)]
        async with asyncio.timeout(30):
            await asyncio.gather(*results)
            while any(len(d.image.topics) < 40 for d in net.drivers.values()):
                await asyncio.sleep(0.01)
        assert {d.node.term for d in net.drivers.values()} == {term}
        assert all(d.leader_id == leader for d in net.drivers.values())
        assert net.drivers[leader].node.is_leader
        assert not net.violations, net.violations
    finally:
        await net.stop()


async def test_a_tick_waits_for_the_messages_received_before_it() -> None:
    """A tick that finds messages already in the inbox goes behind them (once): a leader whose
    loop was busy counts the acknowledgements that arrived meanwhile before its check-quorum,
    a follower the heartbeats before its election deadline. Before, the tick was handled in
    arrival order, ahead of replies that were only waiting for the loop."""
    driver = QuorumDriver(
        RaftConfig(0, frozenset({0, 1}), election_timeout_ms=60_000, heartbeat_interval_ms=20),
        MemoryRaftLog(), _Silent())
    await driver.start()
    try:
        order: list[str] = []
        node = driver.node
        real_tick, real_receive = node.tick, node.receive

        def tick(now_ms: int) -> list[Action]:
            order.append("tick")
            return real_tick(now_ms)

        def receive(message: Message, now_ms: int | None = None) -> list[Action]:
            order.append("message")
            return real_receive(message, now_ms)

        node.tick = tick  # type: ignore[method-assign]
        node.receive = receive  # type: ignore[method-assign]
        await asyncio.sleep(0.01)
        order.clear()
        driver._due()  # the timer fires while a reply is on its way in
        driver.deliver(AppendEntriesResponse(1, node.term, False, 0, 0))
        async with asyncio.timeout(5):
            while len(order) < 2:
                await asyncio.sleep(0.001)
        assert order == ["message", "tick"]
    finally:
        await driver.stop()


async def test_a_stall_of_the_event_loop_is_not_counted_on_the_raft_clock() -> None:
    """A follower hears its leader every 30 ms; three times the loop is blocked for 0.7 s
    (longer than any election deadline drawn from [300, 600) ms: a broker's loop building a
    10,000-partition answer on a loaded machine) and the next heartbeat comes 20 ms after.
    The follower's timer fires late and the stall is not counted on its clock: it never
    campaigns. Before, the late tick found the
    deadline passed and the follower left its leader (pre-vote) before the heartbeat that
    was on its way."""
    driver = QuorumDriver(
        RaftConfig(0, frozenset({0, 1}), election_timeout_ms=300, heartbeat_interval_ms=50),
        MemoryRaftLog(), _Silent())
    await driver.start()
    roles: list[Role] = []
    real_tick = driver.node.tick

    def tick(now_ms: int) -> list[Action]:
        actions = real_tick(now_ms)
        roles.append(driver.node.role)
        return actions

    driver.node.tick = tick  # type: ignore[method-assign]
    try:
        heartbeat = AppendEntries(1, 1, 0, 0, (), 0)
        for beat in range(40):
            await driver.receive(heartbeat)
            if beat % 10 == 9:
                time.sleep(0.7)  # blocks the loop, as a long callback does
                await asyncio.sleep(0.02)
            else:
                await asyncio.sleep(0.03)
        assert driver.leader_id == 1
        assert set(roles) == {Role.FOLLOWER}, roles
        assert driver.stalls_forgiven >= 3
    finally:
        await driver.stop()


async def test_a_leader_whose_loop_stalled_waits_a_window_for_the_acknowledgements() -> None:
    """Issue 21 items 3/7: the leader's acknowledgements stay on their way in (as in sockets
    behind a busy loop) for eight stalls of the event loop of 0.2 s with 0.1 s between them
    (0.8 s of the Raft clock: more than two check-quorum windows of 0.3 s), then arrive. The
    driver tells the node of each stall (``RaftNode.listened_late``), so check-quorum waits and
    the leader keeps its term. Before, the first check after the pre-stall acknowledgements
    were counted found none and the leader stepped down (at 10,000 partitions RF 3 under an
    acks=all produce, at the first tick after its loop was 1.5-1.9 s late)."""
    net = Net(3, election_timeout_ms=300, heartbeat_interval_ms=30)
    await net.start()
    try:
        leader = await net.leader()
        await net.drivers[leader].propose(_register(0))
        term = net.drivers[leader].node.term
        transport = net.drivers[leader]._transport
        assert isinstance(transport, Loopback)
        stalls = net.drivers[leader].stalls_forgiven
        transport.hold_replies = True
        for _ in range(8):
            await asyncio.sleep(0.1)
            time.sleep(0.2)  # blocks the loop, as a long callback does
        await _deliver_held(transport)
        assert net.drivers[leader].stalls_forgiven >= stalls + 4  # most stalls seen by a timer
        assert net.drivers[leader].node.is_leader
        assert {d.node.term for d in net.drivers.values()} == {term}
        assert not net.violations, net.violations
    finally:
        await net.stop()


async def _deliver_held(transport: Loopback) -> None:
    """The followers' held acknowledgements arrive at last; half a second to act on them."""
    await asyncio.sleep(0.02)
    transport.hold_replies = False
    assert transport.held, "the followers did answer"
    for deliver in transport.held:
        deliver()
    await asyncio.sleep(0.5)


def _clocks_given(driver: QuorumDriver) -> list[int]:
    """Every time ``driver`` hands its node (its ``tick`` and ``receive``), in order, from now
    on: a list the caller reads."""
    given: list[int] = []
    real_tick, real_receive = driver.node.tick, driver.node.receive

    def tick(now_ms: int) -> list[Action]:
        given.append(now_ms)
        return real_tick(now_ms)

    def receive(message: Any, now_ms: int) -> list[Action]:
        given.append(now_ms)
        return real_receive(message, now_ms)

    driver.node.tick = tick  # type: ignore[method-assign]
    driver.node.receive = receive  # type: ignore[method-assign]
    return given


async def test_a_stall_right_after_the_timer_fired_is_forgiven_too() -> None:
    """The race behind ci18's chance failure of the test above, made certain: the leader's
    timer fires (a tick queued, not handled yet) and in the same turn of the loop a callback
    blocks it for 0.2 s, four times, while the followers' acknowledgements are held. No timer
    is late (none is armed while a tick waits), so only the tick's wait in the inbox shows the
    stall. Before, the node was handed the stalled 0.8 s on its clock, check-quorum found no
    acknowledgement and the leader stepped down."""
    net = Net(3, election_timeout_ms=300, heartbeat_interval_ms=30)
    await net.start()
    try:
        leader = await net.leader()
        driver = net.drivers[leader]
        await driver.propose(_register(0))
        term = driver.node.term
        transport = driver._transport
        assert isinstance(transport, Loopback)
        stalls = driver.stalls_forgiven
        given = _clocks_given(driver)  # it must never go back
        transport.hold_replies = True
        for _ in range(4):
            await asyncio.sleep(0.05)
            driver._disarm()
            driver._due()  # the timer fires: a tick is queued, not on time to be late ...
            time.sleep(0.2)  # ... and the loop blocks before the driver's task runs
        await _deliver_held(transport)
        assert driver.stalls_forgiven >= stalls + 4
        assert driver.node.is_leader
        assert {d.node.term for d in net.drivers.values()} == {term}
        assert not net.violations, net.violations
        assert len(given) > 10 and given == sorted(given), given
    finally:
        await net.stop()


async def test_a_late_timer_forgives_only_what_the_node_was_not_given() -> None:
    """The loop stalls 0.2 s with the follower's timer due; after the stall the driver first
    hands the node a heartbeat (its clock then includes the stall), and only then does the
    timer fire, 0.2 s late. The tick forgives only the time since the node's clock was last
    read: the clock the node is given never goes back. Before, the late timer forgave the whole
    0.2 s already given, and the node's clock stopped until it caught up (a leader's heartbeats
    held back as long as the stall)."""
    driver = QuorumDriver(
        RaftConfig(0, frozenset({0, 1}), election_timeout_ms=3000, heartbeat_interval_ms=30),
        MemoryRaftLog(), _Silent())
    await driver.start()
    given = _clocks_given(driver)
    heartbeat = AppendEntries(1, 1, 0, 0, (), 0)
    try:
        async with asyncio.timeout(10):
            await driver.receive(heartbeat)  # node 1 leads term 1
            due = driver._clock_ms()  # the timer's due time: now
            time.sleep(0.2)  # the loop blocks, as a long callback does
            await driver.receive(heartbeat)  # handled first, on a clock past the stall
            seen = len(given)
            driver._disarm()
            driver._timer_due_ms = due
            driver._due()  # ... then the timer fires, 0.2 s late
            while len(given) < seen + 1:  # the tick
                await asyncio.sleep(0.01)
        assert given == sorted(given), given
    finally:
        await driver.stop()


class _SlowDisk(MemoryRaftLog):
    def append(self, entries: tuple[LogEntry, ...]) -> None:
        time.sleep(0.15)  # an fsync behind the files of thousands of new partitions
        super().append(entries)


async def test_time_the_node_was_given_is_not_forgiven_again() -> None:
    """A follower's tick waits in the inbox behind three appends, each persisted in 0.15 s
    (``_SlowDisk``), the node handed its clock as each is handled. Only the time since the last
    of those may be forgiven: the clock the node is given never goes back. A first version of
    the tick-wait rule forgave the whole 0.45 s wait, took the clock back below times the node
    had seen, and so stopped it until it caught up (on a leader: heartbeats held back)."""
    driver = QuorumDriver(
        RaftConfig(0, frozenset({0, 1}), election_timeout_ms=3000, heartbeat_interval_ms=30),
        _SlowDisk(), _Silent())
    await driver.start()
    given = _clocks_given(driver)
    try:
        async with asyncio.timeout(10):
            await driver.receive(AppendEntries(1, 1, 0, 0, (), 0))  # node 1 leads term 1
            appends = [asyncio.ensure_future(driver.receive(AppendEntries(
                1, 1, i, 1 if i else 0, (LogEntry(1, i + 1, _register(i + 1)),), 0)))
                for i in range(3)]
            await asyncio.sleep(0)  # the three are in the inbox (the first being handled)
            seen = len(given)
            driver._disarm()
            driver._due()  # the timer fires: the tick queues behind them
            await asyncio.gather(*appends)
            while len(given) < seen + 3:  # the last two appends and the tick
                await asyncio.sleep(0.01)
        assert given == sorted(given), given
    finally:
        await driver.stop()


async def test_a_slow_persist_is_logged(monkeypatch: pytest.MonkeyPatch,
                                        caplog: pytest.LogCaptureFixture) -> None:
    """The driver handles nothing while a persist runs, so a slow one is named in the log."""
    monkeypatch.setattr(driver_module, "SLOW_PERSIST_S", 0.1)
    config = RaftConfig(0, frozenset({0}), election_timeout_ms=50, heartbeat_interval_ms=10)
    driver = QuorumDriver(config, _SlowDisk(), _Silent())
    await driver.start()
    try:
        with caplog.at_level(logging.WARNING, logger="strom.controller"):
            async with asyncio.timeout(10):
                while not driver.node.is_leader:
                    await asyncio.sleep(0.01)
                await driver.propose(_register(0))
    finally:
        await driver.stop()
    assert any("persisting the metadata log took" in r.message for r in caplog.records)


class _ThreadsSeen(MemoryRaftLog):
    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()

    def load(self) -> Any:
        self.threads.add(threading.current_thread().name)
        return super().load()

    def append(self, entries: tuple[LogEntry, ...]) -> None:
        self.threads.add(threading.current_thread().name)
        super().append(entries)


async def test_the_metadata_log_is_written_in_a_thread_of_its_own() -> None:
    """Issue 21 items 3/7: with the loop's default executor busy (it formats ``/metrics``
    scrapes, up to a second at 10,000 partitions, and resolves host names) the driver still
    loads its log, is elected and commits a proposal. Before, its persists waited in that
    executor's queue."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(1))
    release = threading.Event()
    busy = loop.run_in_executor(None, release.wait, 30)
    disk = _ThreadsSeen()
    config = RaftConfig(0, frozenset({0}), election_timeout_ms=50, heartbeat_interval_ms=10)
    driver = QuorumDriver(config, disk, _Silent())
    try:
        async with asyncio.timeout(10):
            await driver.start()
            while not driver.node.is_leader:
                await asyncio.sleep(0.01)
            await driver.propose(_register(0))
        assert not busy.done()
        assert disk.threads and all(t.startswith("raft-persist") for t in disk.threads), (
            disk.threads)
    finally:
        release.set()
        await busy
        await driver.stop()


class _HeldLoopDisk(MemoryRaftLog):
    """A quick disk, while the event loop is held meanwhile (as by the data path)."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: asyncio.AbstractEventLoop | None = None

    def append(self, entries: tuple[LogEntry, ...]) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(time.sleep, 0.3)
        super().append(entries)


async def test_a_slow_persist_names_the_wait_for_the_loop_apart_from_the_disk(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A persist whose own write was quick but whose driver resumed late says so: at 10,000
    partitions the time was the loop's, and the log read as a slow fsync sent the diagnosis
    to the disk (issue 21 items 3, 7)."""
    monkeypatch.setattr(driver_module, "SLOW_PERSIST_S", 0.1)
    monkeypatch.setattr(driver_module, "_slow", RateLimitedLog(driver_module.log))
    disk = _HeldLoopDisk()
    config = RaftConfig(0, frozenset({0}), election_timeout_ms=50, heartbeat_interval_ms=10)
    driver = QuorumDriver(config, disk, _Silent())
    await driver.start()
    try:
        async with asyncio.timeout(10):
            while not driver.node.is_leader:
                await asyncio.sleep(0.01)
        disk.loop = asyncio.get_running_loop()
        with caplog.at_level(logging.WARNING, logger="strom.controller"):
            async with asyncio.timeout(10):
                await driver.propose(_register(0))
    finally:
        disk.loop = None
        await driver.stop()
    [line] = [r.getMessage() for r in caplog.records if "persisting the metadata" in r.message]
    wrote, waited = (int(x) for x in re.findall(r"(\d+) ms (?:writing|waiting)", line))
    assert wrote < 100 <= waited, line


def test_a_follower_acknowledges_new_entries_before_applying_committed_ones() -> None:
    """A Send moves ahead of the Apply actions just before it, never ahead of a Persist or a
    RestoreSnapshot, and Apply keeps its place among the others."""
    e = (LogEntry(1, 1, b"x"),)
    persist, apply = Persist(1, None, entries=e), Apply(e)
    ack = Send(1, AppendEntriesResponse(0, 1, True, 1, 0))
    restore = RestoreSnapshot(Snapshot(1, 1, b""))
    assert sends_before_applies([persist, apply, ack]) == [persist, ack, apply]
    assert sends_before_applies([apply, persist, ack]) == [apply, persist, ack]
    assert sends_before_applies([apply, restore, ack]) == [apply, restore, ack]
    assert sends_before_applies([apply, apply, ack, ack]) == [ack, ack, apply, apply]


async def test_applying_many_committed_entries_yields_to_the_event_loop() -> None:
    """A follower told that 20 entries committed applies them in slices: a task running
    meanwhile sees the image part-way, and the owner is told of each slice in log order
    (before: the whole Apply ran without yielding, and was published once)."""
    published: list[int] = []
    driver = QuorumDriver(
        RaftConfig(0, frozenset({0, 1}), election_timeout_ms=60_000, heartbeat_interval_ms=20),
        MemoryRaftLog(), _Silent(), apply_slice_s=0.0,
        on_apply=lambda image: published.append(image.offset))
    await driver.start()
    seen: set[int] = set()
    stop = asyncio.Event()

    async def watch() -> None:
        while not stop.is_set():
            seen.add(driver.image.offset)
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    try:
        n = 20
        entries = tuple(LogEntry(1, i, _register(i)) for i in range(1, n + 1))
        reply = await driver.receive(AppendEntries(1, 1, 0, 0, entries, n))
        assert isinstance(reply, AppendEntriesResponse) and reply.success
        for _ in range(100):
            if driver.image.offset == n:
                break
            await asyncio.sleep(0.01)
        assert driver.image.offset == n
        assert seen & set(range(1, n)), f"only offsets {sorted(seen)} were seen"
        assert published == list(range(1, n + 1))
    finally:
        stop.set()
        await watcher
        await driver.stop()


class _Silent:
    def send(self, to: int, message: Message, on_reply: OnReply) -> None:
        pass

    def update_addresses(self, addresses: object) -> None:
        pass

    async def close(self) -> None:
        pass


class _FailingDisk(MemoryRaftLog):
    """A metadata log whose appends fail once ``full`` is set (a full disk)."""

    full = False

    def append(self, entries: tuple[LogEntry, ...]) -> None:
        if self.full:
            raise OSError(28, "No space left on device")
        super().append(entries)


async def test_a_failed_driver_answers_what_waits_for_it() -> None:
    """Once the run task failed (its metadata log could not persist) a peer's request handed
    in meanwhile, one handed in later and a proposal all end with an error at once. Before, the
    peer's AppendEntries waited for a reply no one would give until the server's shutdown
    cancelled it (and gRPC logged the cancelled handler's traceback: a chance CI failure of
    test_metadata_log_faults), and a proposal queued after the failure waited forever."""
    disk = _FailingDisk()
    config = RaftConfig(0, frozenset({0, 1}), election_timeout_ms=60_000,
                        heartbeat_interval_ms=10_000)
    driver = QuorumDriver(config, disk, _Silent())
    await driver.start()
    try:
        disk.full = True
        entries = (LogEntry(1, 1, _register(1)),)
        async with asyncio.timeout(10):
            with pytest.raises(StromError) as waiting:
                await driver.receive(AppendEntries(1, 1, 0, 0, entries, 1))
            assert waiting.value.code is ErrorCode.BROKER_NOT_AVAILABLE
            assert "No space left on device" in waiting.value.message
            assert driver.task is not None and driver.task.done()
            with pytest.raises(StromError) as later:
                await driver.receive(AppendEntries(1, 1, 0, 0, entries, 1))
            assert later.value.code is ErrorCode.BROKER_NOT_AVAILABLE
            with pytest.raises(NotControllerError):
                await driver.propose(_register(2))
    finally:
        await driver.stop()
