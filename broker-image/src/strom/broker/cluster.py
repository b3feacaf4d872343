"""A broker's link to the controller quorum: its Raft member, registration, heartbeats, proposals.

Why it exists: in Strom (as in KRaft) the metadata log is the one source of truth about brokers,
topics, leaders and ISRs. Every broker holds a member of the Raft group - a voter when it is one of
``controller.quorum.voters`` (combined mode), an observer otherwise - so it receives every
committed metadata change by push and applies it to its own :class:`MetadataImage`. This module
owns that member and the broker's life in the cluster:

- start: replay the local metadata log (``<first log dir>/__raft``), register
  (``RegisterBroker`` with a fresh incarnation id; the entry's offset is the broker epoch), wait
  until the local image has caught up to the registration, then heart-beat; the active controller
  unfences a broker that heart-beats with ``metadata_offset >= broker_epoch`` (Kafka's rule).
- proposals (topic creation, ISR changes, reassignments, producer id blocks) go to the leader:
  directly to the local driver when this broker is the Raft leader, else through
  :class:`QuorumClient`; a proposal returns once the entry is applied HERE, so a caller that
  created a topic sees it in its next metadata read.
- stop: controlled shutdown (heart-beat ``want_shutdown`` until the controller moved leadership
  away, bounded), then stop the Raft member.

A broker with no ``controller.quorum.voters`` is a cluster of one: it is the only voter, on its
own gRPC port, with a short election timeout so start-up is not delayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from strom.broker.config import BrokerConfig
from strom.broker.listeners import GRPC_LISTENER
from strom.controller.active import ActiveController, ControllerSettings
from strom.controller.driver import NotControllerError, QuorumDriver
from strom.controller.metadata import (
    Command,
    Endpoint,
    MetadataError,
    MetadataImage,
    RegisterBroker,
    encode_command,
)
from strom.controller.quorum_client import QuorumClient
from strom.controller.quorum_server import QuorumService
from strom.controller.raft import RaftConfig
from strom.controller.raftlog import DiskRaftLog
from strom.controller.transport import GrpcTransport, request_timeout_s
from strom.protocol.errors import ErrorCode, StromError, error_code_from_int
from strom.shutdown import cancel_and_wait
from strom.supervision import failed, spawn

log = logging.getLogger("strom.broker.cluster")

RAFT_DIR = "__raft"
PROPOSE_TIMEOUT_S = 15.0
HEARTBEATS_IN_FLIGHT = 4
"""Heartbeats outstanding at once (``ClusterLink._heartbeats``)."""
SOLO_ELECTION_TIMEOUT_MS = 50
SOLO_HEARTBEAT_MS = 20


class ClusterLink:
    """One broker's Raft member, registration and heartbeats. ``await start()``/``stop()``."""

    def __init__(self, config: BrokerConfig, port: int,
                 on_image: Callable[[MetadataImage], None],
                 listeners: tuple[Endpoint, ...] = ()) -> None:
        self.config = config
        self.listeners = listeners
        """Advertised endpoints besides gRPC (the Kafka listener), registered with the broker."""
        self.broker_id = config.broker_id
        self.address = f"{config.advertised_host}:{port}"
        self.port = port
        configured = config.quorum_voters
        self.solo = not configured
        self.voters: dict[int, str] = configured or {self.broker_id: self.address}
        self.is_voter = self.broker_id in self.voters
        self.incarnation_id = uuid.uuid4().hex
        self.broker_epoch = -1
        """The offset of this incarnation's RegisterBroker entry (-1 until registered)."""
        self.caught_up = asyncio.Event()
        self.unfenced = asyncio.Event()
        self._on_image = on_image
        self.published_offset: Callable[[], int] | None = None
        """Once set (by the broker, when its metadata publisher starts), how far the broker has
        acted on the image: proposals wait for it as well and heartbeats report it."""
        self._applied_event = asyncio.Event()
        self._heartbeat_now = asyncio.Event()
        """Set to send the next heartbeat at once (see :meth:`notify_published`)."""
        self._stopping = False
        self._want_shutdown = False
        """Set once the controlled shutdown began: every heartbeat after it says so (Kafka's
        broker does the same), so a periodic one cannot ask to be unfenced again."""
        self._tasks: list[asyncio.Task[None]] = []
        self._registering = False
        """A heartbeat answered STALE_BROKER_EPOCH is registering this broker again."""
        raft_dir = Path(config.log_dirs[0]) / RAFT_DIR
        self.fresh = not raft_dir.exists()
        """True when this start created the metadata log (no earlier cluster state here)."""
        peers = {n: a for n, a in self.voters.items() if n != self.broker_id}
        election_ms = int(config.get("controller.election.timeout.ms"))
        heartbeat_ms = int(config.get("controller.heartbeat.interval.ms"))
        if self.solo:
            election_ms, heartbeat_ms = SOLO_ELECTION_TIMEOUT_MS, SOLO_HEARTBEAT_MS
        raft_config = RaftConfig(
            node_id=self.broker_id,
            voters=frozenset(self.voters),
            observers=frozenset() if self.is_voter else frozenset({self.broker_id}),
            election_timeout_ms=election_ms,
            heartbeat_interval_ms=heartbeat_ms,
        )
        self.driver = QuorumDriver(
            raft_config, DiskRaftLog(raft_dir),
            GrpcTransport(peers, timeout_s=request_timeout_s(election_ms),
                          cluster_id=lambda: self.driver.image.cluster_id),
            compact_every=int(config.get("metadata.compact.every")),
            on_apply=self._applied_image, manage_observers=True,
        )
        self.on_registered: Callable[[], None] | None = None
        """Called after this broker registered again (a new broker epoch)."""
        self.before_heartbeats: Callable[[], Awaitable[None]] | None = None
        """Awaited at start between catching up and the first heartbeat (which unfences)."""
        self.active: ActiveController | None = None
        if config.is_controller and self.is_voter:
            unclean = config.get("unclean.leader.election.enable")
            self.active = ActiveController(self.driver, ControllerSettings(
                session_timeout_ms=int(config.get("broker.session.timeout.ms")),
                probe_after_ms=2 * int(config.get("broker.heartbeat.interval.ms")),
                leader_imbalance_check_ms=int(config.get("leader.imbalance.check.interval.ms")),
                auto_leader_rebalance=bool(config.get("auto.leader.rebalance.enable")),
                cluster_id=config.cluster_id,
                unclean_default=bool(unclean),
            ))
        self.client = QuorumClient(self.voters)
        self.service = QuorumService(self.driver, self.voters, active=self.active,
                                     cluster_id=lambda: self.driver.image.cluster_id)

    # -- reads --------------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self.driver.image

    @property
    def applied_offset(self) -> int:
        """The metadata offset this broker has applied and acted on (published)."""
        offset = self.image.offset
        return offset if self.published_offset is None else min(offset, self.published_offset())

    def notify_published(self) -> None:
        """The publisher advanced: wake whoever waits in :meth:`wait_applied`; a fenced broker
        whose publisher just reached its registration heart-beats at once, so the controller
        unfences it now rather than at the next heartbeat (up to
        ``broker.heartbeat.interval.ms`` later), as Kafka's broker does once ready to unfence
        (issue 21: publishing 10,000 partitions outlasts the first heartbeat)."""
        event, self._applied_event = self._applied_event, asyncio.Event()
        event.set()
        if (not self.unfenced.is_set() and self.broker_epoch >= 0
                and self.applied_offset >= self.broker_epoch):
            self._heartbeat_now.set()

    @property
    def controller_id(self) -> int:
        leader = self.driver.leader_id
        return -1 if leader is None else leader

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self, timeout_s: float = 60.0) -> None:
        """Join the cluster: replay, register, catch up. Does not wait to be unfenced."""
        await self.driver.start()
        if self.active is not None:
            await self.active.start()
        await self._register(timeout_s)
        await self._wait_caught_up(timeout_s)
        self._check_cluster_id()
        if self.before_heartbeats is not None:
            await self.before_heartbeats()
        self._tasks.append(spawn("broker-heartbeats", self._heartbeats, restartable=True))

    async def wait_unfenced(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self.unfenced.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def controlled_shutdown(self, timeout_s: float) -> None:
        """Ask the controller to move leadership away; bounded by ``timeout_s``."""
        if not self.solo and self.broker_epoch >= 0 and self.unfenced.is_set() and timeout_s > 0:
            await self._controlled_shutdown(timeout_s)

    async def stop(self) -> None:
        self._stopping = True
        await cancel_and_wait(self._tasks)
        self._tasks = []
        if self.active is not None:
            await self.active.stop()
        await self.driver.stop()
        await self.client.close()
        self._applied_event.set()

    # -- proposals ----------------------------------------------------------------------------

    async def propose(self, command: Command, timeout_s: float = PROPOSE_TIMEOUT_S) -> int:
        """Append ``command`` to the metadata log; its offset once applied (and, within the
        timeout, published) on this broker.

        Raises the image's error (e.g. TOPIC_ALREADY_EXISTS) when the command did not apply, or
        NOT_CONTROLLER / REQUEST_TIMED_OUT when no leader took it in time.
        """
        data = encode_command(command)
        deadline = time.monotonic() + timeout_s
        index = -1
        while index < 0:
            if self.driver.node.is_leader:
                try:
                    index = await asyncio.wait_for(self.driver.propose(data),
                                                   max(0.01, deadline - time.monotonic()))
                except TimeoutError:
                    raise StromError(ErrorCode.REQUEST_TIMED_OUT,
                                     "the metadata change did not commit in time; the controller "
                                     "quorum may have lost its majority") from None
                except NotControllerError:
                    if time.monotonic() >= deadline:
                        raise
                    await asyncio.sleep(0.05)
                    continue
            elif self.is_voter and self.driver.leader_id in (None, self.broker_id):
                if time.monotonic() >= deadline:  # an election is under way here
                    raise StromError(ErrorCode.NOT_CONTROLLER,
                                     "the controller quorum has no leader yet; is a majority of "
                                     f"{_voters_text(self.voters)} up?")
                await asyncio.sleep(0.02)
            else:
                left = deadline - time.monotonic()
                self.client.prefer(self.driver.leader_id)
                try:
                    index = await self.client.propose(data, max(0.01, min(left, 3.0)))
                except StromError as err:
                    if not err.retriable or time.monotonic() >= deadline:
                        raise
        try:
            await self.wait_applied(index, max(0.01, deadline - time.monotonic()))
        except StromError:
            if self.image.offset < index:
                raise
            # Committed and in this broker's image; only publishing it (opening thousands of
            # logs) is still under way. The change is made: answer, as Kafka's CreateTopics
            # answers once the controller committed; the partitions serve once published
            # (clients retry NOT_LEADER_OR_FOLLOWER meanwhile).
            log.info("metadata offset %d committed; this broker is still publishing it", index)
        return index

    async def wait_applied(self, offset: int, timeout_s: float = PROPOSE_TIMEOUT_S) -> None:
        """Until this broker's image includes ``offset`` and the broker acted on it (or the
        timeout passes)."""
        deadline = time.monotonic() + timeout_s
        while self.applied_offset < offset and not self._stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StromError(ErrorCode.REQUEST_TIMED_OUT,
                                 f"metadata offset {offset} was committed but this broker has not "
                                 f"applied it within {timeout_s:.1f}s (it is at "
                                 f"{self.applied_offset})")
            event = self._applied_event
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), left)

    async def sync(self, timeout_s: float = 5.0) -> None:
        """Catch up with everything the quorum has committed (a read barrier).

        Admin requests are validated against this broker's image; without the barrier a topic
        created through another broker a moment ago could look unknown here. The leader's commit
        index is asked for (locally when this broker leads) and awaited. Best effort: if no leader
        answers in time, the request proceeds on the local image (the metadata log still
        arbitrates the change itself)."""
        deadline = time.monotonic() + timeout_s
        target = -1
        if self.driver.node.is_leader:
            target = self.driver.node.commit_index
        else:
            candidates = [n for n in (self.driver.leader_id,) if n in self.voters]
            candidates += [n for n in sorted(self.voters) if n not in candidates]
            for node in candidates:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    answer = await self.client.describe_quorum(node, timeout_s=min(left, 1.0))
                except Exception:  # unreachable voter: try the next one
                    continue
                if answer.leader_id == answer.node_id:
                    target = int(answer.commit_index)
                    break
        if target > self.image.offset:
            with contextlib.suppress(StromError):
                await self.wait_applied(target, max(0.01, deadline - time.monotonic()))

    def _applied_image(self, image: MetadataImage) -> None:
        me = image.brokers.get(self.broker_id)
        if me is not None and me.incarnation_id == self.incarnation_id:
            if me.fenced:
                self.unfenced.clear()
            else:
                self.unfenced.set()
        if self.broker_epoch >= 0 and image.offset >= self.broker_epoch:
            self.caught_up.set()
        self._on_image(image)
        event, self._applied_event = self._applied_event, asyncio.Event()
        event.set()

    # -- registration and heartbeats ----------------------------------------------------------

    def _registration(self) -> RegisterBroker:
        host, _, port = self.address.rpartition(":")
        return RegisterBroker(self.broker_id, self.incarnation_id,
                              (Endpoint(GRPC_LISTENER, host, int(port)), *self.listeners),
                              self.config.rack or None)

    async def _register(self, timeout_s: float) -> None:
        started = time.monotonic()
        last_report = started
        while True:
            left = timeout_s - (time.monotonic() - started)
            try:
                self.broker_epoch = await self.propose(self._registration(), max(1.0, left))
                log.info("broker %d registered (incarnation %s, broker epoch %d)",
                         self.broker_id, self.incarnation_id[:8], self.broker_epoch)
                return
            except MetadataError:
                raise
            except StromError as err:
                if time.monotonic() - started >= timeout_s:
                    raise StromError(
                        ErrorCode.BROKER_NOT_AVAILABLE,
                        f"could not register with the controller quorum "
                        f"{_voters_text(self.voters)} within {timeout_s:.0f}s ({err.message}); "
                        f"check controller.quorum.voters and that a majority of voters is up",
                    ) from None
                if time.monotonic() - last_report > 5:
                    last_report = time.monotonic()
                    log.info("waiting for the controller quorum %s (%s)",
                             _voters_text(self.voters), err.message)
                await asyncio.sleep(0.2)

    async def _wait_caught_up(self, timeout_s: float) -> None:
        if self.image.offset >= self.broker_epoch:
            self.caught_up.set()
        try:
            await asyncio.wait_for(self.caught_up.wait(), timeout_s)
        except TimeoutError:
            raise StromError(ErrorCode.BROKER_NOT_AVAILABLE,
                             f"the metadata log did not catch up to offset {self.broker_epoch} "
                             f"within {timeout_s:.0f}s") from None

    def _check_cluster_id(self) -> None:
        wanted = self.config.cluster_id
        have = self.image.cluster_id
        if wanted and have and wanted != have:
            raise StromError(ErrorCode.INCONSISTENT_CLUSTER_ID,
                             f"cluster.id={wanted!r} does not match the cluster id {have!r} of "
                             f"the metadata log in {self.config.log_dirs[0] / RAFT_DIR}; this "
                             f"data directory belongs to another cluster")

    async def heartbeat_once(self, want_shutdown: bool = False) -> Any:
        """One heartbeat; the controller's answer (fenced, shutdown_ready) or raises."""
        want_shutdown = want_shutdown or self._want_shutdown
        offset = self.applied_offset
        if self.active is not None and self.driver.node.is_leader:
            return await self.active.heartbeat(self.broker_id, self.incarnation_id,
                                               self.broker_epoch, offset, want_shutdown)
        leader = self.driver.leader_id
        self.client.prefer(leader)  # our quorum member knows the leader first
        # The session timeout as the deadline, in one try when our quorum member names the
        # leader: a busy controller takes heartbeats late (2-3 s at 10,000 new partitions) and
        # one it takes late still refreshes the session, where 1 s tries at the leader and then
        # at another voter lost them all (issue 21 item 3). Heartbeats go in a window
        # (``_heartbeats``), so one waiting on a controller that died holds back no other.
        # Unknown leader: two tries, to find it.
        timeout_s = self.config.ms("broker.session.timeout.ms")
        reply = await self.client.heartbeat(self.broker_id, self.incarnation_id,
                                            self.broker_epoch, offset, want_shutdown,
                                            timeout_s=timeout_s,
                                            attempt_s=None if leader is None else timeout_s)
        if reply.HasField("error") and reply.error.code:
            raise StromError(error_code_from_int(reply.error.code), reply.error.message)
        return reply

    async def _heartbeats(self) -> None:
        """One heartbeat every ``broker.heartbeat.interval.ms``, each its own task, up to
        ``HEARTBEATS_IN_FLIGHT`` outstanding: the controller refreshes a session
        when it handles a heartbeat, so heartbeats sent one after another (the next after the
        answer) left gaps of a round trip plus an interval, and while a controller or broker
        loop turned slowly (publishing 10,000 new partitions) round trips of 2-3 s made those
        gaps pass the 3 s session: the broker was fenced while alive (issue 21 item 3). Sent
        in a window, heartbeats reach a slow controller at the interval, only later."""
        interval = self.config.ms("broker.heartbeat.interval.ms")
        in_flight: set[asyncio.Task[None]] = set()
        try:
            while not self._stopping:
                for task in [t for t in in_flight if t.done()]:
                    in_flight.discard(task)
                    exc = None if task.cancelled() else task.exception()
                    if exc is not None:  # unexpected: supervised (retried, then fatal)
                        await failed("broker-heartbeats", exc)
                if len(in_flight) < HEARTBEATS_IN_FLIGHT:
                    in_flight.add(asyncio.create_task(self._heartbeat(),
                                                      name="broker-heartbeat"))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._heartbeat_now.wait(), interval)
                self._heartbeat_now.clear()
        finally:
            await cancel_and_wait(list(in_flight))

    async def _heartbeat(self) -> None:
        epoch = self.broker_epoch
        try:
            await self.heartbeat_once()
        except StromError as err:
            if err.code != ErrorCode.STALE_BROKER_EPOCH:
                log.debug("heartbeat failed: %s", err)
                return
            if epoch != self.broker_epoch or self._registering:
                return  # registered again meanwhile, or another heartbeat is doing it
            log.warning("the controller does not know this registration any more; "
                        "registering again")
            self._registering = True
            try:
                with contextlib.suppress(StromError):
                    self.broker_epoch = await self.propose(self._registration())
                    if self.on_registered is not None:
                        self.on_registered()
            finally:
                self._registering = False

    async def _controlled_shutdown(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        self._want_shutdown = True
        log.info("controlled shutdown: asking the controller to move leadership away")
        while time.monotonic() < deadline:
            try:
                reply = await self.heartbeat_once(want_shutdown=True)
                if getattr(reply, "shutdown_ready", False):
                    log.info("controlled shutdown: this broker leads no partition any more")
                    return
            except StromError as err:
                log.debug("controlled shutdown heartbeat failed: %s", err)
            except Exception as exc:
                log.debug("controlled shutdown heartbeat failed: %r", exc)
            await asyncio.sleep(0.1)
        log.warning("controlled shutdown did not complete in %.1fs; stopping anyway", timeout_s)


def _voters_text(voters: dict[int, str]) -> str:
    return ",".join(f"{n}@{a}" for n, a in sorted(voters.items()))
