"""The active controller: the cluster's decisions, taken by whichever voter leads the quorum.

Why it exists: the Raft log only agrees on commands; something must watch the brokers and
propose the commands that keep partitions available. As in KRaft, that is the Raft leader
itself, so there is never a second decision-maker: the moment a node stops leading, its
proposals fail and its loop idles, and the next leader starts from the committed image.

What it does, every tick while it leads (``decisions`` holds the logic; this module holds the
timers, the in-memory broker sessions and the proposals):

- Waits, after winning an election, until it has applied its own no-op entry: only then is its
  image everything earlier leaders committed. Then it writes the cluster id if there is none and
  gives every unfenced broker a fresh session, so a new controller does not fence everyone.
- Heartbeats (``heartbeat``, not logged in Raft) refresh a broker's session; a fenced broker
  whose heartbeat shows it has applied the metadata log up to its own registration is unfenced
  (by a proposal that outlives the heartbeat: one whose RPC deadline passes does not withdraw it).
- An unfenced broker without a heartbeat for ``session_timeout_ms`` is fenced (time the
  controller itself did not run, when half a session or longer, does not count), with its
  leaderships moved and its ISR memberships dropped (moves first, in ``Batch`` entries proposed
  pipelined; what one tick's budget does not hold follows on the next ticks, and a controller
  that takes over finishes a fencing its predecessor left half done); so is one whose heartbeat
  is ``probe_after_ms`` late and whose port refuses connections (``liveness``: the process is
  gone, so waiting out the session would only prolong the outage).
- A broker asking for controlled shutdown loses its leaderships and ISR memberships while it is
  still up; once it leads nothing another live replica could lead, it is told so and fenced.
- Replicas in a log directory their broker reported offline leave the ISR, and their
  leaderships move to another live in-sync replica (``offline_replica_changes``).
- Leaderless partitions get a leader (unclean only if the topic allows it), reassignments whose
  new replicas are in sync complete, and every ``leader_imbalance_check_ms`` preferred replicas
  get their leadership back.

Every decision carries the partition epoch it was made at; if the image moved on, the command
is rejected alike everywhere and simply recomputed on the next tick. Each step's proposal is
bounded by a timeout and each tick proposes a bounded number of entries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from strom.controller.decisions import (
    controlled_shutdown_changes,
    fence_changes,
    imbalanced_partitions,
    leaderless_elections,
    offline_replica_changes,
    preferred_election,
    reassignment_completions,
    shutdown_ready,
)
from strom.controller.driver import NotControllerError, QuorumDriver
from strom.controller.liveness import connection_refused
from strom.controller.metadata import (
    NO_LEADER,
    Batch,
    ChangePartition,
    Command,
    Endpoint,
    MetadataError,
    MetadataImage,
    SetClusterId,
    UnfenceBroker,
    encode_command,
)
from strom.protocol.errors import ErrorCode, StromError
from strom.shutdown import cancel_and_wait
from strom.supervision import failed, spawn

__all__ = ["UNCLEAN_LEADER_ELECTION", "ActiveController", "ControllerSettings", "HeartbeatResult"]

log = logging.getLogger("strom.controller.active")

UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"
MAX_BATCH = 2000
"""Commands per ``Batch`` entry: bounds one entry's size (~370 KB of ChangePartition) and the
time one apply takes (decoding and applying 2,000 changes: ~15 ms on this machine when idle;
the driver yields to the event loop between entries). Each entry costs an fsync on every
voter, so fewer, bigger entries commit sooner."""
MAX_BATCHES_PER_STEP = 6
"""Batches one step of one tick proposes, pipelined (``_propose_all``); what is left is
recomputed on the next tick. Enough for the whole fencing of a broker of 3 at 10,000 partitions
at RF 3 (~5,000 leadership moves and ~5,000 ISR shrinks): at 4 batches of 500 a tick, each
waiting for the previous one to commit, its leaderships took 3 ticks and 6.9 s to move."""
LOG_EACH_CHANGE = 20
"""Above this many partition changes in one tick the controller logs their count per reason
instead of a line each (each still at DEBUG)."""


@dataclass(frozen=True)
class ControllerSettings:
    session_timeout_ms: int = 3000
    leader_imbalance_check_ms: int = 30_000
    auto_leader_rebalance: bool = True
    cluster_id: str = ""
    """"" generates one on the first leadership if the image has none."""
    unclean_default: bool = False
    """The broker default of ``unclean.leader.election.enable``."""
    tick_ms: int = 100
    propose_timeout_s: float = 5.0
    ready_wait_s: float = 2.0
    """How long a heartbeat waits for a new leader to catch up before REQUEST_TIMED_OUT."""
    probe_after_ms: int = 1000
    """A heartbeat this late makes the controller probe the broker's port; a refused
    connection fences it at once (``liveness``). 0 turns the probe off."""


@dataclass(frozen=True)
class HeartbeatResult:
    fenced: bool
    """As the controller sees the broker after this heartbeat."""
    shutdown_ready: bool
    """For a broker that wants to shut down: it leads nothing another replica could lead."""


class ActiveController:
    """Runs beside a ``QuorumDriver``; acts only while that driver's node leads."""

    def __init__(
        self,
        driver: QuorumDriver,
        settings: ControllerSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        probe: Callable[[str, int], Coroutine[Any, Any, bool]] = connection_refused,
    ) -> None:
        self._driver = driver
        self._probe = probe
        self._probes: dict[int, tuple[int, asyncio.Task[bool]]] = {}
        """Broker id -> (the number of its last heartbeat when the probe began, the probe)."""
        self._heard: dict[int, tuple[int, float]] = {}
        """Broker id -> (number, clock()) of the last heartbeat this controller heard from it,
        or of the moment it took the broker over (number 0). Unlike ``_sessions`` it is never
        moved by the stall forgiveness: a probe asks the kernel, not the loop, so it is due a
        ``probe_after_ms`` after the broker was last heard, and its verdict holds unless a
        heartbeat came after it began."""
        self._beats = 0
        """Heartbeats heard while active: the number each one gets in ``_heard``."""
        self._probe_now: set[int] = set()
        """Brokers to probe without waiting for a late heartbeat: every broker when this node
        becomes the active controller (the one that died may have been the old controller)."""
        self._settings = settings
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._term: int | None = None
        """The term this node leads in (None while it does not)."""
        self._ready_index = 0
        self._ready = False
        self._sessions: dict[int, float] = {}
        """Broker id -> clock() of its last heartbeat (in memory only, as in Kafka)."""
        self._shutting_down: dict[int, str] = {}
        """Broker id -> incarnation of brokers in controlled shutdown."""
        self._fencing: dict[int, int] = {}
        """Broker id -> registration epoch of brokers this controller fenced whose partition
        changes may not all be proposed yet: a tick proposes a bounded number of commands, and
        a broker in the ISR of 10,000 partitions needs 10,000 changes; the rest are recomputed
        and proposed on the next ticks (until the broker registers again)."""
        self._last_rebalance = 0.0
        self._last_tick = 0.0
        """clock() of the last tick while active (0 before the first)."""
        self._late = 0.0
        """Seconds the tick's sleeps woke late since the last tick: the loop ran other work."""
        self._tick_lock = asyncio.Lock()
        self._stopping = False
        self._unfencing: dict[int, asyncio.Task[None]] = {}
        """Broker id -> its UnfenceBroker proposal in flight (outlives the heartbeat)."""

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._stopping = False
        self._task = spawn("active-controller", self._run, restartable=False)

    async def stop(self) -> None:
        # The flag as well as cancel(): Python 3.11's wait_for can swallow a cancellation that
        # arrives as the awaited proposal completes, and the loop must end anyway.
        self._stopping = True
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None
        self._cancel_probes()
        await cancel_and_wait(list(self._unfencing.values()))
        self._unfencing.clear()

    @property
    def active(self) -> bool:
        """Leading and caught up: heartbeats are answered, decisions are taken."""
        node = self._driver.node
        return self._ready and node.is_leader and node.term == self._term

    # ---- heartbeats --------------------------------------------------------------------------

    async def heartbeat(
        self,
        broker_id: int,
        incarnation_id: str,
        broker_epoch: int,
        metadata_offset: int,
        want_shutdown: bool,
    ) -> HeartbeatResult:
        """Refresh ``broker_id``'s session; unfence it once it has caught up.

        Raises ``NotControllerError`` when this node does not lead, REQUEST_TIMED_OUT while a
        new leader is still catching up, and STALE_BROKER_EPOCH when the incarnation or epoch is
        not the broker's current registration (the broker must register again).
        """
        await self._wait_active()
        image = self._driver.image
        reg = image.brokers.get(broker_id)
        if reg is None or reg.incarnation_id != incarnation_id or reg.epoch != broker_epoch:
            current = "none" if reg is None else f"{reg.incarnation_id} at epoch {reg.epoch}"
            raise StromError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"broker {broker_id} heartbeat names incarnation {incarnation_id} at epoch "
                f"{broker_epoch}, but its registration is {current}; register again",
            )
        self._sessions[broker_id] = self._clock()
        self._beats += 1
        self._heard[broker_id] = (self._beats, self._sessions[broker_id])
        # A controlled shutdown is not withdrawn by a later heartbeat without the flag (as in
        # Kafka, whose broker keeps wantShutDown set once it began): that heartbeat was sent
        # before the shutdown began and arrived late, and unfencing on it gave a stopping
        # broker back its unfenced state (seen: a stopped broker 'alive (unfenced)'). The
        # next incarnation registers anew, which ends it.
        if self._shutting_down.get(broker_id) == incarnation_id:
            want_shutdown = True
        elif want_shutdown:
            log.info("broker %d asks for a controlled shutdown", broker_id)
            self._shutting_down[broker_id] = incarnation_id
        if reg.fenced and not want_shutdown and metadata_offset >= reg.epoch:
            unfencing = self._unfencing.get(broker_id)
            if unfencing is None or unfencing.done():
                unfencing = asyncio.create_task(
                    self._unfence(broker_id, incarnation_id, metadata_offset, reg.epoch),
                    name=f"unfence-broker-{broker_id}")
                unfencing.add_done_callback(_retrieved)
                self._unfencing[broker_id] = unfencing
            # Shielded: a heartbeat whose RPC deadline (1 s a try) passes while the controller
            # is slow to commit must not withdraw the proposal with it (under load at 10,000
            # partitions each try gave up before the driver took the proposal, and a live
            # broker fenced once stayed fenced for good). The next heartbeat awaits the same.
            await asyncio.shield(unfencing)
        image = self._driver.image
        reg = image.brokers.get(broker_id)
        fenced = reg is None or reg.fenced
        return HeartbeatResult(fenced, want_shutdown and shutdown_ready(image, broker_id))

    async def _unfence(self, broker_id: int, incarnation_id: str, metadata_offset: int,
                       epoch: int) -> None:
        with contextlib.suppress(MetadataError):  # re-registered meanwhile: still fenced
            await self._propose(UnfenceBroker(broker_id, incarnation_id))
            log.info("unfencing broker %d: its heartbeat shows metadata offset %d, caught up "
                     "with its registration at %d", broker_id, metadata_offset, epoch)

    async def _wait_active(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._settings.ready_wait_s
        while True:
            if not self._driver.node.is_leader:
                raise NotControllerError(self._driver.leader_id)
            if self.active:
                return
            if loop.time() >= deadline:
                raise StromError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    "the new controller leader is still applying the metadata log; retry",
                )
            await asyncio.sleep(self._settings.tick_ms / 1000)

    # ---- the loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except NotControllerError:
                pass  # lost leadership mid-tick; the next tick notices
            except StromError as exc:
                log.warning("controller tick failed: %s", exc)
            except Exception as exc:
                await failed("active-controller", exc)
            if self._term is None:
                # Not leading (and the last tick said so): nothing to decide until this node
                # leads, which wakes the loop at once instead of a tick up to 100 ms later.
                await self._driver.until_leading()
            else:
                # The loop's own clock: how late the loop was, whatever clock sessions use.
                due = loop.time() + self._settings.tick_ms / 1000
                await asyncio.sleep(self._settings.tick_ms / 1000)
                self._late += max(loop.time() - due, 0.0)

    async def run_once(self) -> None:
        """One tick: catch up after an election, then every periodic decision."""
        async with self._tick_lock:
            await self._tick()

    async def _tick(self) -> None:
        node = self._driver.node
        if not node.is_leader:
            if self._term is not None:
                log.info("controller %d is no longer the active controller", node.node_id)
            self._term, self._ready = None, False
            return
        if self._term != node.term:
            self._term, self._ready, self._ready_index = node.term, False, node.last_index
            self._last_tick = 0.0
            self._sessions.clear()
            self._heard.clear()
            self._shutting_down.clear()
            self._fencing.clear()
            self._cancel_probes()
        if not self._ready:
            if min(node.last_applied, self._driver.image.offset) < self._ready_index:
                return
            await self._become_active()
        now = self._clock()
        self._forgive_stall(now)
        await self._fence_expired(now)
        await self._finish_fencing()
        await self._controlled_shutdowns()
        await self._elections(now)

    async def _become_active(self) -> None:
        image = self._driver.image
        if not image.cluster_id:
            cluster_id = self._settings.cluster_id or uuid.uuid4().hex
            await self._propose(SetClusterId(cluster_id))
            log.info("cluster id set to %s", cluster_id)
        now = self._clock()
        for b in self._driver.image.brokers.values():
            if not b.fenced:
                self._sessions[b.broker_id] = now
                self._heard[b.broker_id] = (0, now)
                self._probe_now.add(b.broker_id)
            elif b.fenced_by_controller:
                # Fenced by a predecessor that may have lost leadership before proposing all
                # of its partition changes: finish them (``_finish_fencing`` stops at once
                # when nothing is left).
                self._fencing[b.broker_id] = b.epoch
        self._last_rebalance = now
        self._ready = True
        log.info(
            "controller %d is the active controller in term %s (metadata offset %d)",
            self._driver.node.node_id,
            self._term,
            self._driver.image.offset,
        )

    def _forgive_stall(self, now: float) -> None:
        """If this controller itself did not run for half a session (its event loop was busy,
        e.g. applying a huge metadata change, or the process was paused), the heartbeats it
        did not hear prove nothing about the brokers: their sessions are extended by the
        stall, so a busy controller never fences brokers (itself included) for its own
        deafness. Heartbeats queued meanwhile arrive on the next turns of the loop.

        Shorter lateness counts too: by as much as the tick's sleep woke late (the loop was
        running other work; a session is never moved past now). At 10,000 new partitions the
        loop turned every 100-300 ms for tens of seconds, no single stall reaching half a
        session, while each heartbeat took several such turns to be handled: in two runs the
        ticks had been late by 1.55 and 1.91 s of the 3.0-3.1 s after which live brokers were
        fenced. The margin this adds to the fencing of a dead broker is the controller's own
        lateness meanwhile (none on an idle controller; a refused port fences at once)."""
        late, self._late = self._late, 0.0
        last, self._last_tick = self._last_tick, now
        if not last:
            return
        stalled = now - last - self._settings.tick_ms / 1000
        if stalled <= self._settings.session_timeout_ms / 2000:
            if late > 0:
                for broker_id, seen in self._sessions.items():
                    self._sessions[broker_id] = min(seen + late, now)
            return
        for broker_id in self._sessions:
            self._sessions[broker_id] += stalled
        log.warning("the controller did not run for %d ms; broker sessions are extended by as "
                    "much (missing heartbeats prove nothing meanwhile)", int(stalled * 1000))

    async def _fence_expired(self, now: float) -> None:
        timeout_s = self._settings.session_timeout_ms / 1000
        for b in sorted(self._driver.image.brokers.values(), key=lambda b: b.broker_id):
            if b.fenced:
                self._forget_probe(b.broker_id)
                continue
            last = self._sessions.setdefault(b.broker_id, now)
            if now - last <= timeout_s:
                heard = self._heard.setdefault(b.broker_id, (0, now))
                if not self._refused(b.broker_id, b.endpoints, heard, now):
                    continue
                why = (f"nothing heard from it for {int((now - heard[1]) * 1000)} ms and its "
                       f"address refuses connections (the process is gone)")
            else:
                why = (f"no heartbeat for {int((now - last) * 1000)} ms (session timeout "
                       f"{self._settings.session_timeout_ms} ms)")
            self._forget_probe(b.broker_id)
            image = self._driver.image
            commands = fence_changes(image, b.broker_id)
            log.info("fencing broker %d: %s; %d partition changes", b.broker_id, why,
                     len(commands) - 1)
            self._fencing[b.broker_id] = b.epoch
            await self._propose_all(commands)

    async def _finish_fencing(self) -> None:
        """Propose the partition changes of fenced brokers that one tick did not hold (their
        leaderships moved, their ISR memberships dropped), a bounded number per tick; also
        those of brokers a previous controller fenced (``_become_active``)."""
        for broker_id, epoch in sorted(self._fencing.items()):
            image = self._driver.image
            reg = image.brokers.get(broker_id)
            current = reg is not None and reg.fenced and reg.epoch == epoch
            changes = fence_changes(image, broker_id)[1:] if current else []
            if not changes:  # done, or it registered again (its partitions are its own then)
                del self._fencing[broker_id]
                continue
            log.info("fencing broker %d: %d partition changes left", broker_id, len(changes))
            await self._propose_all(changes)

    def _refused(self, broker_id: int, endpoints: Sequence[Endpoint],
                 heard: tuple[int, float], now: float) -> bool:
        """Probe a broker whose heartbeat is late; True once a probe begun after its last
        heartbeat (``heard``: its number and time, see ``_heard``) found its port refusing
        connections. Never waits: one probe at a time runs in the background and is read on
        a later tick.

        A probe is told from a newer one by the heartbeat's number, not by the session's
        time: the session moves on every tick the loop woke late (``_forgive_stall``), and
        compared by it every probe was dropped and begun again on the next tick, so none was
        ever read and a killed broker was fenced by its session instead (3.0-3.1 s at 10,000
        partitions; issue 21 items 3, 7)."""
        after_s = self._settings.probe_after_ms / 1000
        beat, heard_at = heard
        due = now - heard_at > after_s or broker_id in self._probe_now
        if not after_s or not due or not endpoints:
            self._forget_probe(broker_id)
            return False
        running = self._probes.get(broker_id)
        if running is not None and running[0] != beat:  # it heart-beat meanwhile
            self._forget_probe(broker_id)
            running = None
        if running is None:
            endpoint = endpoints[0]
            task = asyncio.create_task(self._probe(endpoint.host, endpoint.port),
                                       name=f"probe-broker-{broker_id}")
            self._probes[broker_id] = (beat, task)
            return False
        task = running[1]
        if not task.done():
            return False
        del self._probes[broker_id]
        self._probe_now.discard(broker_id)
        return not task.cancelled() and task.exception() is None and task.result()

    def _forget_probe(self, broker_id: int) -> None:
        running = self._probes.pop(broker_id, None)
        if running is not None:
            running[1].cancel()

    def _cancel_probes(self) -> None:
        for broker_id in list(self._probes):
            self._forget_probe(broker_id)
        self._probe_now.clear()

    async def _controlled_shutdowns(self) -> None:
        for broker_id, incarnation in sorted(self._shutting_down.items()):
            image = self._driver.image
            reg = image.brokers.get(broker_id)
            if reg is None or reg.incarnation_id != incarnation:
                self._shutting_down.pop(broker_id, None)
                continue
            if reg.fenced:
                continue
            changes = controlled_shutdown_changes(image, broker_id)
            if changes:
                log.info(
                    "controlled shutdown of broker %d: moving leadership and ISR membership "
                    "of %d partitions",
                    broker_id,
                    len(changes),
                )
                await self._propose_all(changes)
                image = self._driver.image
            if shutdown_ready(image, broker_id):
                log.info("fencing broker %d: controlled shutdown is complete", broker_id)
                self._fencing[broker_id] = image.brokers[broker_id].epoch
                await self._propose_all(fence_changes(image, broker_id))

    def unclean_allowed(self, topic: str) -> bool:
        """The topic's ``unclean.leader.election.enable``, else the cluster-wide broker
        default, else the settings' default."""
        image = self._driver.image
        t = image.topics.get(topic)
        value = t.configs.get(UNCLEAN_LEADER_ELECTION) if t is not None else None
        if value is None:
            value = image.broker_configs.get("", {}).get(UNCLEAN_LEADER_ELECTION)
        if value is None:
            return self._settings.unclean_default
        return value.strip().lower() == "true"

    async def _elections(self, now: float) -> None:
        image = self._driver.image
        reasons: list[tuple[ChangePartition, str]] = []
        for c in leaderless_elections(image, self.unclean_allowed):
            unclean = c.isr is not None
            reasons.append(
                (
                    c,
                    "unclean election (no live in-sync replica)"
                    if unclean
                    else "the partition had no leader",
                )
            )
        reasons += [(c, "its replica on the leader or in the ISR is in an offline log directory")
                    for c in offline_replica_changes(image)]
        reasons += [(c, "reassignment complete") for c in reassignment_completions(image)]
        period_s = self._settings.leader_imbalance_check_ms / 1000
        if self._settings.auto_leader_rebalance and now - self._last_rebalance >= period_s:
            self._last_rebalance = now
            for topic, partition in imbalanced_partitions(image):
                with contextlib.suppress(MetadataError):
                    change = preferred_election(image, topic, partition)
                    reasons.append((change, "preferred replica leadership rebalance"))
        chosen: dict[tuple[str, int], tuple[ChangePartition, str]] = {}
        for change, reason in reasons:
            key = (change.topic, change.partition)
            if key not in chosen and self._eligible(image, change):
                chosen[key] = (change, reason)
        if not chosen:
            return
        self._log_changes(image, list(chosen.values()))
        await self._propose_all([c for c, _ in chosen.values()])

    @classmethod
    def _log_changes(cls, image: MetadataImage,
                     changes: Sequence[tuple[ChangePartition, str]]) -> None:
        """One line per change while they are few; past ``LOG_EACH_CHANGE``, one line with the
        count per reason and each change at DEBUG. At 10,000 partitions a tick chose thousands
        (the elections after a fencing, a preferred-leader rebalance), and writing a line for
        each on the event loop was the largest part of the controller's late turns (and was
        done again on every tick whose proposals failed)."""
        if len(changes) <= LOG_EACH_CHANGE:
            for change, reason in changes:
                cls._log_change(image, change, reason)
            return
        reasons = Counter(reason for _, reason in changes)
        log.info("changing leadership or ISR of %d partitions: %s", len(changes),
                 "; ".join(f"{n} x {reason}" for reason, n in reasons.most_common()))
        if log.isEnabledFor(logging.DEBUG):
            for change, reason in changes:
                cls._log_change(image, change, reason, logging.DEBUG)

    def _eligible(self, image: MetadataImage, change: ChangePartition) -> bool:
        """A broker in controlled shutdown is not given any new leadership."""
        if change.leader is None or change.leader not in self._shutting_down:
            return True
        return change.leader == image.partition(change.topic, change.partition).leader

    @staticmethod
    def _log_change(image: MetadataImage, change: ChangePartition, reason: str,
                    level: int = logging.INFO) -> None:
        p = image.partition(change.topic, change.partition)
        if change.replicas is not None:
            log.log(
                level,
                "completing reassignment of %s-%d: replicas %s -> %s, leader %d (%s)",
                change.topic,
                change.partition,
                p.replicas,
                list(change.replicas),
                p.leader if change.leader is None else change.leader,
                reason,
            )
        elif change.leader == p.leader and change.isr is not None:
            log.log(
                level,
                "ISR of %s-%d %s -> %s, leader %s stays: %s",
                change.topic,
                change.partition,
                p.isr,
                list(change.isr),
                p.leader,
                reason,
            )
        else:
            log.log(
                level,
                "electing broker %s leader of %s-%d (was %s): %s",
                change.leader,
                change.topic,
                change.partition,
                "none" if p.leader == NO_LEADER else p.leader,
                reason,
            )

    # ---- proposing ---------------------------------------------------------------------------

    async def _propose_all(self, commands: Sequence[Command]) -> None:
        """Propose in bounded Batches, pipelined: every Batch is handed to the driver before
        the first commits (they commit in order, so leadership moves listed first commit
        first), then all are awaited together. Sub-commands the image rejects are recomputed
        on a later tick; so is what exceeds ``MAX_BATCHES_PER_STEP``.

        Raises NotControllerError, or REQUEST_TIMED_OUT when they did not all commit within
        ``propose_timeout_s``."""
        chunks = [commands[i : i + MAX_BATCH] for i in range(0, len(commands), MAX_BATCH)]
        if not chunks:
            return
        futures: list[asyncio.Future[int]] = []
        try:
            for chunk in chunks[:MAX_BATCHES_PER_STEP]:
                command = Batch(tuple(chunk)) if len(chunk) > 1 else chunk[0]
                futures.append(self._driver.submit(encode_command(command)))
                await asyncio.sleep(0)  # the driver appends and sends it meanwhile
            _, late = await asyncio.wait(futures, timeout=self._settings.propose_timeout_s)
        except BaseException:
            for future in futures:
                if not future.cancel() and not future.cancelled():
                    future.exception()
            raise
        for future in futures:  # read every outcome: none is reported as never retrieved
            if future.done() and not future.cancelled():
                future.exception()
        if late:
            for future in late:
                future.cancel()
            raise StromError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{len(late)} of {len(futures)} metadata entries ({len(commands)} commands) did "
                f"not commit within {self._settings.propose_timeout_s}s",
            )
        for future in futures:
            error = future.exception()
            if isinstance(error, MetadataError):  # a single command the image rejected
                log.debug("a command did not apply: %s", error.message)
            elif error is not None:
                raise error

    async def _propose(self, command: Command) -> None:
        """Raises NotControllerError, REQUEST_TIMED_OUT, or the image's MetadataError (single
        commands only; a Batch's rejected parts land in ``image.errors``)."""
        try:
            await asyncio.wait_for(
                self._driver.propose(encode_command(command)), self._settings.propose_timeout_s
            )
        except TimeoutError:
            raise StromError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{command.TYPE} did not commit within {self._settings.propose_timeout_s}s",
            ) from None
        except MetadataError as exc:
            if isinstance(command, UnfenceBroker):
                raise
            log.debug("%s did not apply: %s", command.TYPE, exc.message)


def _retrieved(task: asyncio.Task[None]) -> None:
    """Its outcome is awaited by heartbeats that may all have given up: read it here so a
    failure (lost leadership, a timeout; the next heartbeat proposes again) is not reported
    as never retrieved."""
    if not task.cancelled():
        task.exception()
