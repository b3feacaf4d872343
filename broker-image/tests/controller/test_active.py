"""``ActiveController`` on a real one-voter ``QuorumDriver`` (in-memory log) with a fake clock.

Brokers are simulated by their registrations, heartbeats and the ISR changes their partition
leaders would propose; the controller must unfence caught-up brokers, fence silent ones and move
their leaderships, give preferred leaders their leadership back, carry out controlled shutdowns,
complete reassignments and elect leaders for leaderless partitions (unclean only when allowed).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any

import pytest

from strom.controller.active import LOG_EACH_CHANGE, ActiveController, ControllerSettings
from strom.controller.decisions import fence_changes, reassignment_start
from strom.controller.driver import NotControllerError, QuorumDriver
from strom.controller.messages import Message
from strom.controller.metadata import (
    NO_LEADER,
    AlterConfigs,
    Batch,
    ChangePartition,
    Command,
    CreateTopic,
    Endpoint,
    MetadataImage,
    RegisterBroker,
    encode_command,
)
from strom.controller.quorum_server import QuorumService
from strom.controller.raft import RaftConfig
from strom.controller.raftlog import MemoryRaftLog
from strom.controller.transport import OnReply
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import quorum_pb2
from strom.testing.waits import async_wait_until

SESSION_MS = 1000
REBALANCE_MS = 5000


class NoPeers:
    def send(self, to: int, message: Message, on_reply: OnReply) -> None:
        raise AssertionError("a single voter sends nothing")

    def update_addresses(self, addresses: Mapping[int, str]) -> None:
        pass

    async def close(self) -> None:
        pass


class Ports:
    """A fake ``liveness.connection_refused``: which (host, port) refuse, and who was asked."""

    def __init__(self) -> None:
        self.refusing: set[int] = set()
        self.asked: list[int] = []

    async def __call__(self, host: str, port: int) -> bool:
        self.asked.append(port)
        return port in self.refusing


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Cluster:
    def __init__(self, raft_log: MemoryRaftLog, clock: Clock, *,
                 probe: Callable[[str, int], Coroutine[Any, Any, bool]] | None = None,
                 **settings: object) -> None:
        self.clock = clock
        self.driver = QuorumDriver(
            RaftConfig(0, frozenset({0}), election_timeout_ms=50, heartbeat_interval_ms=10),
            raft_log,
            NoPeers(),
        )
        config = ControllerSettings(
            session_timeout_ms=SESSION_MS,
            leader_imbalance_check_ms=REBALANCE_MS,
            tick_ms=5,
            ready_wait_s=5.0,
            **settings,  # type: ignore[arg-type]
        )
        # every port listens unless a test says otherwise (no real connection is made)
        self.active = ActiveController(self.driver, config, clock=clock,
                                       probe=probe or Ports())
        self.epochs: dict[int, int] = {}
        self.incarnations: dict[int, str] = {}
        self.ticking = True
        """The controller's own background ticker runs (else only the test's ``run_once``)."""

    async def start(self, *, ticker: bool = True) -> None:
        """``ticker=False``: the controller ticks only when the test calls ``run_once`` (or
        :meth:`until`), so nothing is decided between two steps of the test."""
        self.ticking = ticker
        await self.driver.start()
        if ticker:
            await self.active.start()
        await self.until(lambda i: self.active.active, "the controller to become active")

    async def stop(self) -> None:
        await self.active.stop()
        await self.driver.stop()

    @property
    def image(self) -> MetadataImage:
        return self.driver.image

    async def propose(self, command: Command) -> int:
        return await self.driver.propose(encode_command(command))

    async def register(self, broker: int, incarnation: str | None = None) -> None:
        incarnation = incarnation or f"inc-{broker}"
        endpoint = Endpoint("PLAINTEXT", "127.0.0.1", 9092 + broker)
        self.epochs[broker] = await self.propose(RegisterBroker(broker, incarnation, (endpoint,)))
        self.incarnations[broker] = incarnation

    async def heartbeat(
        self, broker: int, offset: int | None = None, shutdown: bool = False
    ) -> tuple[bool, bool]:
        r = await self.active.heartbeat(
            broker,
            self.incarnations[broker],
            self.epochs[broker],
            self.image.offset if offset is None else offset,
            shutdown,
        )
        return r.fenced, r.shutdown_ready

    async def live(self, *brokers: int) -> None:
        for b in brokers:
            await self.register(b)
            assert await self.heartbeat(b) == (False, False)

    async def advance(self, seconds: float, heartbeating: tuple[int, ...] = ()) -> None:
        """Move the clock in steps of a tenth of a session, the given brokers heartbeating."""
        step = SESSION_MS / 10_000
        left = seconds
        while left > 1e-9:
            self.clock.now += min(step, left)
            left -= step
            for b in heartbeating:
                await self.heartbeat(b)
            await self.active.run_once()
            await asyncio.sleep(0)  # background work (liveness probes) runs between ticks

    async def until(
        self, predicate: Callable[[MetadataImage], bool], what: str, timeout: float = 5.0
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate(self.image):
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            if not self.ticking:
                await self.active.run_once()
            await asyncio.sleep(0.01)

    def leader(self, topic: str, partition: int = 0) -> int:
        return self.image.partition(topic, partition).leader

    def isr(self, topic: str, partition: int = 0) -> list[int]:
        return self.image.partition(topic, partition).isr


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    c = Cluster(MemoryRaftLog(), Clock(), cluster_id="test-cluster")
    await c.start()
    yield c
    await c.stop()


async def test_registration_then_heartbeat_unfences(cluster: Cluster) -> None:
    assert cluster.image.cluster_id == "test-cluster"
    await cluster.register(0)
    assert cluster.image.brokers[0].fenced
    # not caught up with its own registration yet: stays fenced
    assert await cluster.heartbeat(0, offset=cluster.epochs[0] - 1) == (True, False)
    assert cluster.image.brokers[0].fenced
    assert await cluster.heartbeat(0) == (False, False)
    assert not cluster.image.brokers[0].fenced


async def test_an_unfencing_outlives_a_heartbeat_that_gave_up(cluster: Cluster) -> None:
    """A heartbeat whose RPC deadline passed while the controller was slow to take its
    UnfenceBroker (a backlog in the driver) is cancelled; the proposal goes on and the broker
    is unfenced (before: withdrawn with the heartbeat, every time under load: a live broker
    fenced once at 10,000 partitions stayed fenced)."""
    await cluster.register(0)
    backlog = asyncio.Event()
    propose = cluster.driver.propose

    async def slow_propose(command: bytes) -> int:
        await backlog.wait()
        return await propose(command)

    cluster.driver.propose = slow_propose  # type: ignore[method-assign]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(cluster.heartbeat(0), 0.05)
    backlog.set()
    await cluster.until(lambda i: not i.brokers[0].fenced, "broker 0 unfenced", timeout=2.0)


async def test_stale_heartbeats_are_refused(cluster: Cluster) -> None:
    await cluster.live(0)
    for incarnation, epoch in (("other", cluster.epochs[0]), ("inc-0", cluster.epochs[0] + 1)):
        with pytest.raises(StromError) as info:
            await cluster.active.heartbeat(0, incarnation, epoch, cluster.image.offset, False)
        assert info.value.code is ErrorCode.STALE_BROKER_EPOCH
        assert "register again" in info.value.message
    with pytest.raises(StromError) as info:
        await cluster.active.heartbeat(7, "x", 1, 1, False)
    assert info.value.code is ErrorCode.STALE_BROKER_EPOCH


async def test_missing_heartbeats_fence_and_move_leadership_then_rebalance(
    cluster: Cluster,
) -> None:
    await cluster.live(0, 1, 2)
    await cluster.propose(CreateTopic("t", "tid", ((0, 1, 2), (1, 2, 0))))
    assert cluster.leader("t") == 0
    await cluster.advance(0.9, heartbeating=(0, 1, 2))
    assert not cluster.image.brokers[0].fenced
    await cluster.advance(1.2, heartbeating=(1, 2))
    await cluster.until(lambda i: i.brokers[0].fenced, "broker 0 to be fenced")
    assert not cluster.image.brokers[1].fenced and not cluster.image.brokers[2].fenced
    assert cluster.leader("t", 0) == 1 and cluster.isr("t", 0) == [1, 2]
    assert cluster.leader("t", 1) == 1 and cluster.isr("t", 1) == [1, 2]

    # broker 0 restarts: a new registration, fenced until it has caught up with it
    await cluster.register(0, "inc-0b")
    assert await cluster.heartbeat(0, offset=cluster.epochs[0] - 1) == (True, False)
    assert await cluster.heartbeat(0) == (False, False)
    # it rejoins the ISR of t-0 (its leader, broker 1, would propose this)
    p = cluster.image.partition("t", 0)
    await cluster.propose(
        ChangePartition("t", 0, isr=(1, 2, 0), expected_partition_epoch=p.partition_epoch)
    )
    assert cluster.leader("t", 0) == 1
    await cluster.advance(REBALANCE_MS / 1000, heartbeating=(0, 1, 2))
    await cluster.until(lambda i: i.partition("t", 0).leader == 0, "the preferred leader back")
    assert cluster.leader("t", 1) == 1  # 0 is not in t-1's ISR: no election there


async def test_fencing_a_broker_in_thousands_of_isrs_moves_every_partition(
    cluster: Cluster,
) -> None:
    """A tick proposes a bounded number of commands; the fenced broker's remaining partition
    changes follow on the next ticks (they used to be dropped: with 3 brokers and 10,000
    partitions at RF 3, every partition after the first ~2,000 kept its dead leader)."""
    await cluster.live(0, 1, 2)
    n = 5000
    await cluster.propose(CreateTopic("t", "tid", tuple(
        tuple((p + k) % 3 for k in range(3)) for p in range(n))))
    assert sum(cluster.leader("t", p) == 0 for p in range(n)) > n // 4
    await cluster.advance(1.2, heartbeating=(1, 2))
    await cluster.until(lambda i: i.brokers[0].fenced, "broker 0 to be fenced")
    for _ in range(20):
        await cluster.advance(0.01, heartbeating=(1, 2))
    led = [p for p in range(n) if cluster.leader("t", p) in (0, NO_LEADER)]
    stale = [p for p in range(n) if 0 in cluster.isr("t", p)]
    assert not led and not stale, (f"{len(led)} partitions still led by broker 0, "
                                   f"{len(stale)} with it in their ISR")


async def test_a_fencing_moves_every_leadership_in_the_tick_that_fences_pipelined() -> None:
    """Fencing a broker that leads 4,100 partitions (and is in 12,300 ISRs) moves all of its
    leaderships, and drops it from every ISR, in the one tick that fences it, with the Batches
    in flight together rather than each waiting for the previous one's commit (before: 2,000
    commands a step, two steps a tick, one Batch at a time; at 10,000 partitions its
    leaderships took 6.9 s)."""
    c = Cluster(MemoryRaftLog(), Clock(), cluster_id="test-cluster")
    await c.start(ticker=False)
    try:
        await c.live(0, 1, 2)
        n = 12_300
        await c.propose(CreateTopic("t", "tid", tuple(
            tuple((p + k) % 3 for k in range(3)) for p in range(n))))
        led = [p for p in range(n) if c.leader("t", p) == 0]
        assert len(led) == n // 3
        in_flight: list[int] = []
        outstanding: set[asyncio.Future[int]] = set()
        submit = c.driver.submit

        def counting_submit(command: bytes) -> asyncio.Future[int]:
            future = submit(command)
            outstanding.add(future)
            future.add_done_callback(outstanding.discard)
            in_flight.append(len(outstanding))
            return future

        c.driver.submit = counting_submit  # type: ignore[method-assign]
        ticks = 0
        while not c.image.brokers[0].fenced:
            ticks += 1
            assert ticks < 100, "broker 0 was never fenced"
            c.clock.now += SESSION_MS / 10_000
            for b in (1, 2):
                await c.heartbeat(b)
            await c.active.run_once()
        still = [p for p in led if c.leader("t", p) in (0, NO_LEADER)]
        stale = [p for p in range(n) if 0 in c.isr("t", p)]
        assert not still and not stale, (f"after the fencing tick {len(still)} partitions are "
                                         f"still led by broker 0, {len(stale)} have it in "
                                         f"their ISR")
        assert max(in_flight) > 1, f"Batches proposed one at a time: {in_flight}"
    finally:
        await c.stop()


async def test_a_new_controller_finishes_a_fencing_its_predecessor_left_half_done() -> None:
    """The previous active controller fenced broker 0 and proposed only part of its partition
    changes before it lost leadership; the next one, knowing only the image, finishes them.
    Broker 1 meanwhile restarted (fenced by its new registration, never by a controller): its
    partitions stay its own."""
    c = Cluster(MemoryRaftLog(), Clock(), cluster_id="test-cluster")
    await c.start(ticker=False)
    try:
        await c.live(0, 1, 2)
        n = 3000
        await c.propose(CreateTopic("t", "tid", tuple(
            tuple((p + k) % 3 for k in range(3)) for p in range(n))))
        led0 = [p for p in range(n) if c.leader("t", p) == 0]
        led1 = [p for p in range(n) if c.leader("t", p) == 1]
        await c.propose(Batch(tuple(fence_changes(c.image, 0)[:301])))  # the predecessor's part
        assert sum(c.leader("t", p) == 0 for p in led0) == len(led0) - 300
        await c.register(1, "inc-1b")  # a restart: fenced until it catches up
        assert c.image.brokers[1].fenced
        c.active = ActiveController(c.driver, ControllerSettings(
            session_timeout_ms=SESSION_MS, leader_imbalance_check_ms=REBALANCE_MS, tick_ms=5,
            ready_wait_s=5.0, cluster_id="test-cluster"), clock=c.clock, probe=Ports())
        for _ in range(3):
            await c.active.run_once()
            await c.heartbeat(2)
        still = [p for p in led0 if c.leader("t", p) == 0]
        stale = [p for p in range(n) if 0 in c.isr("t", p)]
        assert not still and not stale, (f"{len(still)} partitions still led by fenced broker "
                                         f"0, {len(stale)} with it in their ISR")
        assert all(c.leader("t", p) == 1 for p in led1), "the restarted broker lost partitions"
        assert all(1 in c.isr("t", p) for p in range(n))
        assert not c.image.brokers[2].fenced
    finally:
        await c.stop()


async def test_thousands_of_elections_in_a_tick_log_one_line(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Past LOG_EACH_CHANGE changes a tick logs their count per reason, not a line each (at
    10,000 partitions writing thousands of lines per tick on the event loop was most of the
    controller's late turns); each change is still logged at DEBUG."""
    n = LOG_EACH_CHANGE + 10
    await cluster.live(0, 1)
    await cluster.propose(CreateTopic("t", "tid", tuple((0, 1) for _ in range(n))))
    await cluster.advance(1.5, heartbeating=(1,))
    await cluster.until(lambda i: all(i.partition("t", p).leader == 1 for p in range(n)),
                        "every leadership moved to 1")
    await cluster.register(0, "inc-0b")
    await cluster.heartbeat(0)
    await cluster.propose(Batch(tuple(
        ChangePartition("t", p, isr=(1, 0),
                        expected_partition_epoch=cluster.image.partition("t", p).partition_epoch)
        for p in range(n))))
    with caplog.at_level(logging.DEBUG, logger="strom.controller.active"):
        await cluster.advance(REBALANCE_MS / 1000, heartbeating=(0, 1))
        await cluster.until(lambda i: all(i.partition("t", p).leader == 0 for p in range(n)),
                            "the preferred leaders back")
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert f"changing leadership or ISR of {n} partitions: {n} x preferred replica " \
           "leadership rebalance" in info, info
    assert not [m for m in info if m.startswith("electing broker")], info
    assert len([m for m in debug if m.startswith("electing broker 0 leader of t-")]) == n


async def test_no_rebalance_when_disabled() -> None:
    c = Cluster(MemoryRaftLog(), Clock(), auto_leader_rebalance=False)
    await c.start()
    try:
        assert len(c.image.cluster_id) == 32  # generated
        await c.live(0, 1)
        await c.propose(CreateTopic("t", "tid", ((0, 1),)))
        await c.advance(1.5, heartbeating=(1,))
        await c.until(lambda i: i.partition("t", 0).leader == 1, "leadership to move to 1")
        await c.heartbeat(0)
        assert not c.image.brokers[0].fenced
        p = c.image.partition("t", 0)
        await c.propose(
            ChangePartition("t", 0, isr=(1, 0), expected_partition_epoch=p.partition_epoch)
        )
        await c.advance(2 * REBALANCE_MS / 1000, heartbeating=(0, 1))
        assert c.leader("t") == 1
    finally:
        await c.stop()


async def test_controlled_shutdown(cluster: Cluster) -> None:
    await cluster.live(0, 1, 2)
    await cluster.propose(CreateTopic("t", "tid", ((0, 1), (1, 0), (0,))))
    fenced, ready = await cluster.heartbeat(0, shutdown=True)
    assert not fenced and not ready  # it still leads t-0, which broker 1 can take over
    await cluster.until(lambda i: i.partition("t", 0).leader == 1, "t-0 to move to broker 1")
    await cluster.until(lambda i: i.brokers[0].fenced, "broker 0 to be fenced after shutdown")
    assert cluster.isr("t", 0) == [1] and cluster.isr("t", 1) == [1]
    assert cluster.leader("t", 1) == 1
    # t-2 has no other replica: it stays with broker 0 until 0 is fenced, then has no leader
    assert cluster.leader("t", 2) == NO_LEADER and cluster.isr("t", 2) == [0]
    assert await cluster.heartbeat(0, shutdown=True) == (True, True)
    await cluster.advance(0.5, heartbeating=(1, 2))
    assert await cluster.heartbeat(0, shutdown=True) == (True, True)
    assert cluster.image.brokers[0].fenced  # not unfenced while it still wants to shut down
    # the preferred leader of t-0 is in controlled shutdown: no rebalance back to it
    assert cluster.leader("t", 0) == 1


async def test_a_late_heartbeat_does_not_withdraw_a_controlled_shutdown(cluster: Cluster) -> None:
    """A periodic heartbeat sent before the shutdown began may arrive after the fencing; it
    must not unfence the stopping broker (it did: a stopped broker stayed 'alive (unfenced)'
    until its session ran out, and unregistering it was refused)."""
    await cluster.live(0, 1)
    await cluster.propose(CreateTopic("t", "tid", ((1, 0),)))
    assert await cluster.heartbeat(0, shutdown=True) == (False, True)
    await cluster.until(lambda i: i.brokers[0].fenced, "broker 0 to be fenced")
    assert await cluster.heartbeat(0, shutdown=False) == (True, True)
    await cluster.advance(0.2, heartbeating=(1,))
    assert cluster.image.brokers[0].fenced


async def test_shutdown_ready_at_once_when_it_leads_nothing_movable(cluster: Cluster) -> None:
    await cluster.live(0, 1)
    await cluster.propose(CreateTopic("t", "tid", ((1, 0), (0,))))
    assert await cluster.heartbeat(0, shutdown=True) == (False, True)
    await cluster.until(lambda i: i.brokers[0].fenced, "broker 0 to be fenced")
    assert cluster.isr("t", 0) == [1] and cluster.leader("t", 0) == 1


async def test_reassignment_completes_once_adding_replicas_are_in_sync(cluster: Cluster) -> None:
    await cluster.live(0, 1, 2, 3)
    await cluster.propose(CreateTopic("t", "tid", ((0, 1),)))
    await cluster.propose(reassignment_start(cluster.image, "t", 0, [2, 3]))
    assert cluster.image.partition("t", 0).replicas == [2, 3, 0, 1]
    for isr in ((0, 1, 2), (0, 1, 2, 3)):
        await cluster.active.run_once()
        assert cluster.image.partition("t", 0).adding_replicas == [2, 3]
        epoch = cluster.image.partition("t", 0).partition_epoch
        await cluster.propose(ChangePartition("t", 0, isr=isr, expected_partition_epoch=epoch))
    await cluster.until(lambda i: not i.partition("t", 0).adding_replicas, "the completion")
    p = cluster.image.partition("t", 0)
    assert (p.replicas, p.isr, p.leader, p.removing_replicas) == ([2, 3], [2, 3], 2, [])


async def test_leaderless_partitions_unclean_only_when_allowed(cluster: Cluster) -> None:
    await cluster.live(0, 1)
    await cluster.propose(
        CreateTopic("a", "ida", ((0, 1),), (("unclean.leader.election.enable", "true"),))
    )
    await cluster.propose(CreateTopic("b", "idb", ((0, 1),)))
    await cluster.advance(1.2, heartbeating=(0,))
    await cluster.until(lambda i: i.brokers[1].fenced, "broker 1 to be fenced")
    await cluster.advance(1.2)
    await cluster.until(lambda i: i.brokers[0].fenced, "broker 0 to be fenced")
    for t in ("a", "b"):
        assert cluster.leader(t) == NO_LEADER and cluster.isr(t) == [0]
    # broker 1 (not in sync) comes back: only topic a may elect it
    assert await cluster.heartbeat(1) == (False, False)
    await cluster.until(lambda i: i.partition("a", 0).leader == 1, "the unclean election of a")
    assert cluster.isr("a") == [1]
    await cluster.advance(0.3, heartbeating=(1,))
    assert cluster.leader("b") == NO_LEADER
    await cluster.propose(
        AlterConfigs("broker", "", set=(("unclean.leader.election.enable", "true"),))
    )
    await cluster.until(lambda i: i.partition("b", 0).leader == 1, "the cluster default to apply")
    # broker 0 (in sync for nothing now) comes back: a clean leader exists everywhere
    await cluster.heartbeat(0)
    assert cluster.leader("a") == 1 and cluster.leader("b") == 1


async def test_leaderless_partition_elects_a_clean_leader_when_it_returns(
    cluster: Cluster,
) -> None:
    await cluster.live(0, 1)
    await cluster.propose(CreateTopic("t", "tid", ((1, 0),)))
    await cluster.advance(1.2, heartbeating=(0,))
    await cluster.until(lambda i: i.brokers[1].fenced, "broker 1 to be fenced")
    await cluster.advance(1.2)
    await cluster.until(lambda i: i.brokers[0].fenced, "broker 0 to be fenced")
    assert cluster.leader("t") == NO_LEADER and cluster.isr("t") == [0]
    await cluster.heartbeat(1)
    await cluster.advance(0.3, heartbeating=(1,))
    assert cluster.leader("t") == NO_LEADER  # 1 is out of sync and unclean is off
    await cluster.heartbeat(0)
    await cluster.until(lambda i: i.partition("t", 0).leader == 0, "the clean election")


async def test_a_new_leader_gives_every_unfenced_broker_a_fresh_session() -> None:
    raft_log, clock = MemoryRaftLog(), Clock()
    first = Cluster(raft_log, clock)
    await first.start()
    await first.live(0, 1)
    cluster_id = first.image.cluster_id
    await first.stop()
    clock.now += 60  # long past every session while no controller ran
    second = Cluster(raft_log, clock)
    await second.start()
    try:
        assert second.image.cluster_id == cluster_id
        await second.advance(0.8)
        assert not second.image.brokers[0].fenced and not second.image.brokers[1].fenced
        await second.advance(0.4)
        await second.until(
            lambda i: i.brokers[0].fenced and i.brokers[1].fenced, "both sessions to expire"
        )
    finally:
        await second.stop()


async def test_heartbeat_to_a_node_that_does_not_lead() -> None:
    c = Cluster(MemoryRaftLog(), Clock())
    await c.driver.start()  # no election has happened yet
    try:
        with pytest.raises(NotControllerError):
            await c.active.heartbeat(0, "x", 1, 1, False)
    finally:
        await c.driver.stop()


async def test_quorum_service_broker_heartbeat(cluster: Cluster) -> None:
    await cluster.register(0)
    service = QuorumService(cluster.driver, {0: "127.0.0.1:1"}, active=cluster.active)
    context: Any = None  # the handler does not use it

    def request(incarnation: str, offset: int) -> quorum_pb2.BrokerHeartbeatRequest:
        return quorum_pb2.BrokerHeartbeatRequest(
            broker_id=0,
            incarnation_id=incarnation,
            broker_epoch=cluster.epochs[0],
            metadata_offset=offset,
        )

    r = await service.BrokerHeartbeat(request("inc-0", cluster.epochs[0] - 1), context)
    assert not r.HasField("error") and r.fenced and r.leader_hint == 0
    r = await service.BrokerHeartbeat(request("inc-0", cluster.epochs[0]), context)
    assert not r.HasField("error") and not r.fenced and not r.shutdown_ready
    r = await service.BrokerHeartbeat(request("inc-x", cluster.epochs[0]), context)
    assert ErrorCode(r.error.code) is ErrorCode.STALE_BROKER_EPOCH and r.fenced
    passive = QuorumService(cluster.driver, {0: "127.0.0.1:1"})
    r = await passive.BrokerHeartbeat(request("inc-0", cluster.epochs[0]), context)
    assert ErrorCode(r.error.code) is ErrorCode.NOT_CONTROLLER


async def test_a_late_broker_whose_port_refuses_is_fenced_before_its_session_ends() -> None:
    ports = Ports()
    c = Cluster(MemoryRaftLog(), Clock(), probe=ports, probe_after_ms=SESSION_MS // 4)
    await c.start()
    try:
        await c.live(0, 1, 2)
        await c.propose(CreateTopic("t", "tid", ((0, 1, 2),)))
        # late but listening (hung, slow or partitioned): probed, not fenced before the session
        await c.advance(0.9, heartbeating=(1, 2))
        assert 9092 in ports.asked and not c.image.brokers[0].fenced
        await c.advance(0.3, heartbeating=(1, 2))
        await c.until(lambda i: i.brokers[0].fenced, "broker 0 fenced by its session timeout")
        # broker 1's process is gone: its port refuses, fenced a quarter session after its
        # last heartbeat instead of a whole one
        ports.refusing.add(9093)
        await c.advance(0.2, heartbeating=(2,))
        assert not c.image.brokers[1].fenced, "on time: not probed"
        await c.advance(0.2, heartbeating=(2,))
        await c.until(lambda i: i.brokers[1].fenced, "broker 1 fenced on the refusal")
        assert not c.image.brokers[2].fenced and 9094 not in ports.asked
        assert c.leader("t") == 2 and c.isr("t") == [2]
    finally:
        await c.stop()


async def test_a_heartbeat_after_the_probe_began_cancels_its_verdict() -> None:
    ports = Ports()
    ports.refusing.add(9092)
    c = Cluster(MemoryRaftLog(), Clock(), probe=ports, probe_after_ms=SESSION_MS // 4)
    # no background ticker: a tick between the probe's end and the heartbeat would read its
    # verdict and fence (and the heartbeat would unfence again, hiding a broken cancel)
    await c.start(ticker=False)
    try:
        await c.live(0)
        c.clock.now += 0.3
        await c.active.run_once()  # the probe starts in the background
        await async_wait_until(lambda: ports.asked == [9092], 5.0, what="the probe of 9092")
        # its verdict, "refused", is ready for the next tick ...
        assert await c.heartbeat(0) == (False, False)  # ... but the broker heart-beats first
        c.clock.now += 0.3  # and is late again by that tick: due for a probe, a new one
        await c.active.run_once()
        assert not c.image.brokers[0].fenced, "fenced on a verdict older than its heartbeat"
        await async_wait_until(lambda: ports.asked == [9092, 9092], 5.0,
                               what="a second probe of 9092")
        await c.until(lambda i: i.brokers[0].fenced, "broker 0 fenced on the new verdict")
    finally:
        await c.stop()


async def test_a_probe_is_read_although_the_loop_wakes_late_on_every_tick() -> None:
    """Issues 21 items 3, 7: a real loop wakes every tick's sleep a little late, and the
    controller moves every session by that lateness (``_forgive_stall``). The probe was told
    apart by the session's time, so each late tick dropped it and began another, none was
    ever read, and a killed broker was fenced by its session (3.0-3.1 s at 10,000 partitions,
    also by a controller that had just taken over). Here the background ticker runs (every
    tick late), broker 1 heartbeats, broker 0's port refuses: fenced a little after the
    probe is due, well before its session ends (on the code before: at its session's end)."""
    ports = Ports()
    c = Cluster(MemoryRaftLog(), Clock(), probe=ports, probe_after_ms=SESSION_MS // 4)
    await c.start()
    try:
        await c.live(0, 1)
        ports.refusing.add(9092)
        start = c.clock.now
        while not c.image.brokers[0].fenced and c.clock.now - start < 2 * SESSION_MS / 1000:
            c.clock.now += SESSION_MS / 20_000
            await c.heartbeat(1)
            await asyncio.sleep(0.02)  # the ticker ticks a few times, each late
        assert c.image.brokers[0].fenced, "broker 0 not fenced at all"
        silent_s = c.clock.now - start
        assert silent_s < 0.6 * SESSION_MS / 1000, f"fenced after {silent_s:.2f} s: by the session"
        assert not c.image.brokers[1].fenced
    finally:
        await c.stop()


async def test_a_new_controller_probes_every_broker_at_once() -> None:
    """The broker that died may have been the controller: its successor probes everyone as it
    takes over, rather than granting the dead a whole fresh session."""
    raft_log, clock = MemoryRaftLog(), Clock()
    first = Cluster(raft_log, clock)
    await first.start()
    await first.live(0, 1)
    await first.stop()
    ports = Ports()
    ports.refusing.add(9092)
    second = Cluster(raft_log, clock, probe=ports)
    await second.start()
    try:
        await second.advance(0.05)
        await second.until(lambda i: i.brokers[0].fenced, "broker 0 fenced on the refusal")
        assert sorted(set(ports.asked)) == [9092, 9093]
        assert not second.image.brokers[1].fenced, "listening: keeps its fresh session"
    finally:
        await second.stop()


async def test_a_controller_that_did_not_run_does_not_fence_for_its_own_stall(
    cluster: Cluster,
) -> None:
    await cluster.live(0, 1)
    await cluster.advance(0.5, heartbeating=(0, 1))
    # the controller's loop was busy for two sessions: nothing was heard, nothing is proven
    cluster.clock.now += 2 * SESSION_MS / 1000
    await cluster.active.run_once()
    await cluster.advance(0.5)
    assert not cluster.image.brokers[0].fenced and not cluster.image.brokers[1].fenced
    # the sessions still run out once the controller runs again and hears nothing
    await cluster.advance(0.7, heartbeating=(1,))
    await cluster.until(lambda i: i.brokers[0].fenced, "broker 0 to be fenced")
    assert not cluster.image.brokers[1].fenced


async def test_a_controller_whose_loop_runs_late_counts_that_time_against_no_session(
    cluster: Cluster,
) -> None:
    """Issue 21 item 3: at 10,000 new partitions the loop turned every 100-300 ms for tens of
    seconds (no single stall reaching half a session, which was already forgiven) and live
    brokers were fenced. Here the loop is busy 0.3 s at a time (a session is 1 s) while the
    clock moves as much, eight times, and nobody heartbeats: the tick's sleep wakes late by
    that much and no session counts it (on the code before, both brokers were fenced)."""
    await cluster.live(0, 1)
    for _ in range(8):
        time.sleep(0.3)  # the point: the event loop is held, as by busy work
        cluster.clock.now += 0.3
        await asyncio.sleep(0.05)  # the controller's ticks run, late
    assert not cluster.image.brokers[0].fenced and not cluster.image.brokers[1].fenced
    # once the loop is on time again, silence counts: broker 0 is fenced, 1 heartbeats
    for _ in range(30):
        await cluster.advance(1.0, heartbeating=(1,))
        if cluster.image.brokers[0].fenced:
            break
    assert cluster.image.brokers[0].fenced and not cluster.image.brokers[1].fenced


async def test_a_step_that_times_out_reads_every_outcome() -> None:
    """A step whose Batches did not all commit raises REQUEST_TIMED_OUT and still reads the
    outcome of those that failed (a lost leadership at 10,000 partitions logged "Future
    exception was never retrieved" three times)."""
    c = Cluster(MemoryRaftLog(), Clock(), cluster_id="test-cluster", propose_timeout_s=0.05)
    await c.start(ticker=False)
    loop = asyncio.get_running_loop()
    reports: list[str] = []
    loop.set_exception_handler(lambda _, context: reports.append(str(context.get("message"))))
    try:
        made: list[asyncio.Future[int]] = []

        def submit(command: bytes) -> asyncio.Future[int]:
            future: asyncio.Future[int] = loop.create_future()
            if not made:
                future.set_exception(NotControllerError(None))
            made.append(future)
            return future

        c.driver.submit = submit  # type: ignore[method-assign]
        changes = [ChangePartition("t", p, leader=1) for p in range(3000)]
        with pytest.raises(StromError) as info:
            await c.active._propose_all(changes)
        assert info.value.code is ErrorCode.REQUEST_TIMED_OUT
        del info
        made.clear()
        gc.collect()
        assert not [r for r in reports if "never retrieved" in r], reports
    finally:
        loop.set_exception_handler(None)
        await c.stop()
