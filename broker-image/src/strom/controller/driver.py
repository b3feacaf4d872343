"""The task that owns one Raft node: it feeds it events and carries out its actions, in order.

Why it exists: ``RaftNode`` is sans-I/O; something must give it a clock, messages and proposals,
and do what it asks - persist, send, apply - honouring its contract. ``QuorumDriver`` is that one
owner: a single asyncio task reads an inbox (clock ticks, messages from the gRPC servicer, replies
from the transport, proposals) and handles one item at a time, so nothing is shared and nothing is
locked. Other coroutines only put items in the inbox and await futures, or read plain properties.

Clock ticks are due-time driven: after every item the driver asks the node when its next tick has
something to do (``RaftNode.next_tick_ms``: a heartbeat, a check-quorum, an election deadline)
and keeps one loop timer set for it, moved earlier when an item brings the time forward, never
more than a quarter election timeout ahead. A leader wakes ~5 times a second (heartbeats every
250 ms, check-quorum every second), a follower 4 times, an observer never; a fixed 10 ms
ticker woke 100 times a second on every node whatever was due (a third of an empty cluster's
idle CPU).

The node's own stalls do not count on its Raft clock: a timer that fires more than a heartbeat
interval late means the event loop could not run this node (a long callback, or many); the
lateness is taken off the clock the node is given (a first version also held the tick back a
heartbeat interval: that delayed a loaded leader's heartbeats, and elections churned). A tick
that finds messages already waiting in the inbox goes behind them once, and a leader's
check-quorum after a stall waits a whole election timeout (``RaftNode.listened_late``): what
the peers sent meanwhile is still in the sockets and behind the loop's callbacks, not yet in
the inbox. A node that could not listen proves nothing about its peers (at 10,000 partitions
the broker's loop runs seconds late at times, and leaders stepped down for it).

How actions are carried out (``_execute``), strictly in the order returned:

- ``Persist``: ``raftlog.persist`` in the driver's own thread (``raft-persist``; it fsyncs),
  awaited before the next action, so a vote or an acknowledgement is never sent before what it
  promises is on disk. The thread is the driver's alone: the loop's default executor also
  formats ``/metrics`` scrapes (up to a second at 10,000 partitions) and resolves the
  host names of new connections, and a vote must not wait in its queue behind them. A slow
  persist is logged with its time in the thread apart from the wait for the event loop (the
  loop, not the disk, was what a slow persist waited for at 10,000 partitions).
- ``Send``: a reply to the request being handled resolves that request's RPC; anything else goes
  to the ``Transport`` (fire-and-forget; replies come back through the inbox).
- ``Apply``: the committed entries join a backlog, applied to the ``MetadataImage`` in slices
  of ``apply_slice_s`` by the same task **whenever its inbox is empty**: a Raft message or a
  tick that arrives meanwhile is handled before the next slice, so heartbeats, votes and
  acknowledgements never wait for a large change to be applied (at 10,000 partitions a
  fencing is seconds of applying and publishing on a loaded machine, longer than an election
  timeout). Per applied entry, the proposal waiting on that index is resolved (or fails with
  the image's ``MetadataError``, or NOT_CONTROLLER when another term's entry took its index).
  Every ``compact_every`` applied entries the image is snapshotted into the Raft log
  (``RaftNode.compact``), whose ``Persist`` is carried out in turn.
- ``RestoreSnapshot``: the backlog is applied first, then the image is replaced; proposals at or
  below it fail (outcome unknown).
- ``BecameLeader`` / ``BecameFollower``: logged (one line when this node becomes the leader).

A failure to persist is fatal, and so is a failure of the broker's ``on_apply`` (the metadata
publisher): the run task ends with the exception and the supervisor (:mod:`strom.supervision`)
stops the process with a non-zero exit (continuing could break the promises already made, or
leave a broker whose state no longer follows the log).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from strom.controller.messages import (
    AppendEntries,
    AppendEntriesResponse,
    InstallSnapshot,
    InstallSnapshotResponse,
    LogEntry,
    Message,
    VoteRequest,
    VoteResponse,
)
from strom.controller.metadata import MetadataError, MetadataImage, decode_command
from strom.controller.raft import (
    Action,
    Apply,
    BecameFollower,
    BecameLeader,
    NotLeader,
    Persist,
    RaftConfig,
    RaftNode,
    RestoreSnapshot,
    Role,
    Send,
)
from strom.controller.raftlog import RaftLog, persist
from strom.controller.transport import Transport
from strom.protocol.errors import ErrorCode, StromError
from strom.ratelimit import RateLimitedLog
from strom.shutdown import cancel_and_wait
from strom.supervision import spawn

__all__ = ["NotControllerError", "QuorumDriver", "QuorumStatus", "sends_before_applies"]

log = logging.getLogger("strom.controller")
_undecodable = RateLimitedLog(log)
_slow = RateLimitedLog(log)

SLOW_PERSIST_S = 0.5
"""A persist (an fsync of the metadata log) slower than this is logged: the driver handles
nothing else meanwhile (no heartbeat answered, no vote given), so on a disk busy with, say,
the files of 10,000 new partitions it is a reason leaders step down and elections stall."""

APPLY_SLICE_S = 0.02
"""Longest stretch of applying committed entries between two yields to the event loop."""

ITEMS_PER_APPLY_SLICE = 16
"""Inbox items handled at most before a slice of a waiting backlog is applied (messages go
first, but a steady stream of them never stops applying)."""

_REPLY_TYPE: dict[type, type] = {
    VoteRequest: VoteResponse,
    AppendEntries: AppendEntriesResponse,
    InstallSnapshot: InstallSnapshotResponse,
}


@dataclass(slots=True)
class _Tick:
    stalled: bool = False
    """The timer fired more than a heartbeat interval late, or the tick waited that long in the
    inbox: the loop could not run the node (``RaftNode.listened_late`` comes before the
    tick)."""
    queued_ms: int = 0
    """When the timer put it in the inbox (``_now_ms``)."""


@dataclass(slots=True)
class _Incoming:
    message: Message
    reply: asyncio.Future[Message | None] | None = None


@dataclass(slots=True)
class _Propose:
    command: bytes
    result: asyncio.Future[int]


@dataclass(slots=True)
class _Pending:
    term: int
    result: asyncio.Future[int]


@dataclass(frozen=True, slots=True)
class QuorumStatus:
    """A node's view of the quorum, for DescribeQuorum."""

    node_id: int
    role: Role
    leader_id: int | None
    term: int
    commit_index: int
    last_applied: int
    last_index: int
    snapshot_index: int
    voters: tuple[int, ...]
    observers: tuple[int, ...]
    match_index: dict[int, int] = field(default_factory=dict)


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class QuorumDriver:
    """Owns one ``RaftNode`` and its ``RaftLog``; ``await start()``, later ``await stop()``."""

    def __init__(
        self,
        config: RaftConfig,
        raft_log: RaftLog,
        transport: Transport,
        *,
        compact_every: int = 1000,
        rng: random.Random | None = None,
        on_apply: Callable[[MetadataImage], None] | None = None,
        manage_observers: bool = False,
        apply_slice_s: float = APPLY_SLICE_S,
    ) -> None:
        self.config = config
        self.image = MetadataImage()
        self._log = raft_log
        self._disk = ThreadPoolExecutor(1, thread_name_prefix="raft-persist")
        """The one thread that reads and writes ``raft_log`` (its own: see the module doc)."""
        self._disk_closed = False
        self._transport = transport
        self._compact_every = compact_every
        self._rng = rng
        self._node: RaftNode | None = None
        self._inbox: asyncio.Queue[_Tick | _Incoming | _Propose] = asyncio.Queue()
        self._tick_queued = False
        self._tick_deferred = False
        self._forgiven_ms = 0
        self._clock_read_ms = 0
        """When the node's clock was last read (``_now_ms``): time after it has not been seen by
        the node, so forgiving it never takes the clock back below a time the node was given."""
        self._watch_ms = max(config.heartbeat_interval_ms, config.election_timeout_ms // 4)
        self.stalls_forgiven = 0
        """Timers that fired more than a heartbeat interval late (their lateness was forgiven)."""
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due_ms: int | None = None
        self._pending: dict[int, _Pending] = {}
        self._match: dict[int, int] = {}
        self._hard_state: tuple[int, int | None] | None = None
        self._since_compact = 0
        self._backlog: deque[LogEntry] = deque()
        """Committed entries not applied yet, in log order (applied when the inbox is empty)."""
        self._tasks: list[asyncio.Task[None]] = []
        self._on_apply = on_apply
        self._manage_observers = manage_observers
        self._apply_slice_s = apply_slice_s
        self._observers: dict[int, str] = {}
        self._leading = asyncio.Event()
        """Set while this node leads (from its ``BecameLeader`` to its ``BecameFollower``)."""
        self.task: asyncio.Task[None] | None = None
        """The run task; it ends with an exception if persisting failed."""
        self._stopped: str | None = None
        """Why the run task ended (failed or stopped): nothing will answer the inbox any more."""
        self._replies: set[asyncio.Future[Message | None]] = set()
        """Peers' requests handed in and not answered yet (failed when the run task ends)."""

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        state = await asyncio.get_running_loop().run_in_executor(self._disk, self._log.load)
        self._hard_state = (state.term, state.voted_for)
        self._node = RaftNode(self.config, state, now_ms=_now_ms(), rng=self._rng)
        self.image = MetadataImage.from_snapshot(state.snapshot.data)
        self.image.offset = state.snapshot.index
        log.info(
            "strom controller %d starting: term %d, snapshot at %d, %d log entries, voters %s",
            self.config.node_id,
            state.term,
            state.snapshot.index,
            len(state.entries),
            sorted(self.config.voters),
        )
        self._stopped = None
        self.task = spawn("raft-driver", self._run, restartable=False)
        self.task.add_done_callback(self._ended)
        self._tasks = [self.task]

    def _ended(self, task: asyncio.Task[None]) -> None:
        """The run task ended (failed, or stopped): what waits for it is answered at once.

        Why: a peer's AppendEntries handed in after the metadata log failed waited for a reply
        no one would give until the server's shutdown cancelled it, and gRPC then logged the
        cancelled handler's traceback; a proposal queued meanwhile would wait forever."""
        failure = None if task.cancelled() else task.exception()
        self._stopped = f"the controller stopped ({failure})" if failure is not None \
            else "the controller stopped"
        while not self._inbox.empty():
            item = self._inbox.get_nowait()
            if isinstance(item, _Propose) and not item.result.done():
                item.result.set_exception(NotControllerError(None, self._stopped))
        for reply in list(self._replies):
            if not reply.done():
                reply.set_exception(StromError(ErrorCode.BROKER_NOT_AVAILABLE, self._stopped))
        self._replies.clear()

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks = []
        self._disarm()
        if not self._disk_closed:  # a persist under way ends first (one thread, in order)
            self._disk_closed = True
            await asyncio.get_running_loop().run_in_executor(self._disk, _nothing)
            self._disk.shutdown(wait=False)
        for p in self._pending.values():
            if not p.result.done():
                p.result.set_exception(NotControllerError(None, "the controller stopped"))
        self._pending.clear()
        await self._transport.close()

    # ---- inputs (any coroutine on the loop) --------------------------------------------------

    async def receive(self, message: Message) -> Message | None:
        """Hand a request from a peer to the node; its reply, once it may be sent. Raises
        ``StromError(BROKER_NOT_AVAILABLE)`` once the node stopped (at once, or when it stops
        before replying)."""
        if self._stopped is not None:
            raise StromError(ErrorCode.BROKER_NOT_AVAILABLE, self._stopped)
        reply: asyncio.Future[Message | None] = asyncio.get_running_loop().create_future()
        self._replies.add(reply)
        reply.add_done_callback(self._replies.discard)
        self._inbox.put_nowait(_Incoming(message, reply))
        return await reply

    def deliver(self, message: Message) -> None:
        """Hand a reply (or any message needing no answer) to the node."""
        self._inbox.put_nowait(_Incoming(message))

    async def propose(self, command: bytes) -> int:
        """Append ``command``; its log index once committed and applied here.

        Raises ``StromError(NOT_CONTROLLER)`` (message names the leader hint) when this node is
        not the leader or lost leadership before the entry committed, and the image's
        ``MetadataError`` when the committed command did not apply.
        """
        return await self.submit(command)

    def submit(self, command: bytes) -> asyncio.Future[int]:
        """``propose`` without waiting: the command is queued now, in the order of the calls,
        and the future gives what ``propose`` would. Several submitted in a row are pipelined:
        each is appended and sent to the followers without waiting for the previous one to
        commit (a fencing of thousands of partitions is one round trip, not one per entry).
        Cancelling the future withdraws a command not yet appended."""
        result: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if self._stopped is not None:
            result.set_exception(NotControllerError(None, self._stopped))
        else:
            self._inbox.put_nowait(_Propose(command, result))
        return result

    # ---- introspection -----------------------------------------------------------------------

    @property
    def node(self) -> RaftNode:
        if self._node is None:
            raise RuntimeError("the driver is not started")
        return self._node

    def refusal(self, message: Message) -> str | None:
        """Why a peer request must be refused (``RaftNode.refusal``), or None."""
        if self._node is None:
            return "the controller is not started"
        return self._node.refusal(message)

    async def until_leading(self) -> None:
        """Return once this node leads (at once if it does): what waits for leadership needs
        no polling timer (the active controller on a follower sleeps here, not in 100 ms
        ticks)."""
        await self._leading.wait()

    @property
    def leader_id(self) -> int | None:
        return self._node.leader_id if self._node is not None else None

    def status(self) -> QuorumStatus:
        n = self.node
        match = dict(self._match) if n.is_leader else {}
        if n.is_leader:
            match[n.node_id] = n.last_index
        return QuorumStatus(
            node_id=n.node_id,
            role=n.role,
            leader_id=n.leader_id,
            term=n.term,
            commit_index=n.commit_index,
            last_applied=n.last_applied,
            last_index=n.last_index,
            snapshot_index=n.snapshot.index,
            voters=tuple(sorted(self.config.voters)),
            observers=tuple(sorted(self.config.observers)),
            match_index=match,
        )

    # ---- the owner task ----------------------------------------------------------------------

    def _arm(self, node: RaftNode) -> None:
        """Keep the loop timer set for the node's next due tick (``next_tick_ms``).

        Only moved when the due time came earlier (a new leader's first heartbeat): a due time
        that moved later (a follower hearing its leader pushes its election deadline back on
        every heartbeat) leaves the timer as it is; it fires, the tick does nothing, and the
        timer is set again for the later time - at most one wasted wake-up per deadline
        instead of a timer rescheduled on every message. A voter's timer is never set further
        than ``_watch_ms`` ahead (a quarter of the election timeout, at least a heartbeat
        interval): a stall of the loop is noticed by a timer firing late (``_due``), and at most
        that much of one counts on the node's clock."""
        if self._tick_queued:
            return  # armed again once that tick is handled
        due = node.next_tick_ms()
        if due is None:
            return  # an observer: no timer to keep
        due = min(due, self._clock_ms() + self._watch_ms)
        if self._timer_due_ms is not None and self._timer_due_ms <= due:
            return
        self._disarm()
        self._timer_due_ms = due
        # +1 ms: the node's clock is whole milliseconds, truncated; never wake just before.
        delay = max(0, due + 1 - self._clock_ms()) / 1000
        self._timer = asyncio.get_running_loop().call_later(delay, self._due)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_due_ms = None, None

    def _due(self) -> None:
        due, self._timer, self._timer_due_ms = self._timer_due_ms, None, None
        if self._tick_queued:
            return
        self._tick_queued = True
        read_ms = self._clock_read_ms
        late = self._clock_ms() - due if due is not None else 0
        stalled = late > self.config.heartbeat_interval_ms
        if stalled:
            # The event loop did not get to this timer for `late` ms (a long callback, or many):
            # that time is not counted on the node's clock (it pauses). A follower that did not
            # read the heartbeats waiting for it, or a leader that did not read the
            # acknowledgements, proves nothing about its peers. The tick itself is not held
            # back: a leader's heartbeats must not come later than the loop makes them.
            # Only the time since the node's clock was last read is forgiven, as in
            # ``_waited``: a message handled after the stall and before this late timer has
            # handed the node the stalled time, and taking it back would stop its clock.
            self._forgiven_ms += min(late, self._clock_read_ms - read_ms)
            self.stalls_forgiven += 1
        self._inbox.put_nowait(_Tick(stalled, _now_ms()))

    def _waited(self, tick: _Tick) -> None:
        """The first time ``tick`` is taken from the inbox: if the node's clock was not read
        for more than a heartbeat interval since the tick was queued, that time is a stall too,
        forgiven as ``_due`` forgives a late timer.

        Why: a timer can fire in the same turn of the loop as the callback that then blocks it
        (a long callback right behind it); ``_due`` saw no lateness, no timer is armed while a
        tick is queued, and the node was handed the stalled time on its clock at the tick.
        ci18 failed on it by chance (a leader stepped down in
        ``test_a_leader_whose_loop_stalled_waits_a_window_for_the_acknowledgements``). Only
        the time since the clock was last read is forgiven: time the node was already given
        (messages handled while the tick waited behind them) stays on its clock, so the clock
        never goes back and stops (a node keeps the largest time it was given; a stopped clock
        would hold a leader's heartbeats back)."""
        waited = _now_ms() - max(tick.queued_ms, self._clock_read_ms)
        if waited > self.config.heartbeat_interval_ms:
            self._forgiven_ms += waited
            self.stalls_forgiven += 1
            tick.stalled = True

    def _clock_ms(self) -> int:
        """The node's clock: monotonic milliseconds less the stalls forgiven (``_due``)."""
        now = self._clock_read_ms = _now_ms()
        return now - self._forgiven_ms

    async def _run(self) -> None:
        node = self.node
        handled = 0  # inbox items handled since the last slice of applying
        while True:
            self._arm(node)
            if self._inbox.empty():
                # Caught-up peers learn of new commits now, once per burst of input, not at the
                # next heartbeat (``RaftNode.commit_notices``).
                await self._execute(node.commit_notices(), None)
            if self._backlog and (self._inbox.empty() or handled >= ITEMS_PER_APPLY_SLICE):
                handled = 0
                await self._execute(self._apply_slice(), None)
                await asyncio.sleep(0)  # the rest of the loop, and what it brings to the inbox
                continue
            handled += 1
            item = await self._inbox.get()
            if isinstance(item, _Tick):
                if not self._tick_deferred:  # taken for the first time (one tick at a time)
                    self._waited(item)
                if not self._inbox.empty() and not self._tick_deferred:
                    # Messages that came in before the tick first: a leader's check-quorum must
                    # count the acknowledgements already received (they queue behind a busy
                    # loop), and a follower's election deadline the heartbeats.
                    self._tick_deferred = True
                    self._inbox.put_nowait(item)
                    continue
                self._tick_queued = self._tick_deferred = False
                if item.stalled:
                    # What the peers sent meanwhile is still on its way in (sockets, callbacks
                    # behind the loop): a leader's check-quorum waits a whole window for it.
                    node.listened_late(self._clock_ms())
                await self._execute(node.tick(self._clock_ms()), None)
            elif isinstance(item, _Incoming):
                self._track_match(node, item.message)
                await self._execute(node.receive(item.message, self._clock_ms()), item)
                if item.reply is not None and not item.reply.done():
                    item.reply.set_result(None)
            else:
                await self._propose(node, item)

    async def _propose(self, node: RaftNode, item: _Propose) -> None:
        if item.result.done():  # the caller gave up
            return
        try:
            outcome = node.propose(item.command)
        except ValueError as exc:
            item.result.set_exception(StromError(ErrorCode.INVALID_REQUEST, str(exc)))
            return
        if isinstance(outcome, NotLeader):
            item.result.set_exception(_not_controller(outcome.leader_hint))
            return
        self._pending[outcome.index] = _Pending(outcome.term, item.result)
        await self._execute(node.take_actions(), None)

    def _track_match(self, node: RaftNode, m: Message) -> None:
        if not node.is_leader or m.term != node.term:
            return
        acked = isinstance(m, AppendEntriesResponse) and m.success
        if acked or isinstance(m, InstallSnapshotResponse):
            assert isinstance(m, AppendEntriesResponse | InstallSnapshotResponse)
            self._match[m.sender] = max(self._match.get(m.sender, 0), m.match_index)

    async def _execute(self, actions: list[Action], request: _Incoming | None) -> None:
        queue: deque[Action] = deque(sends_before_applies(actions))
        reply_type = _REPLY_TYPE.get(type(request.message)) if request is not None else None
        while queue:
            action = queue.popleft()
            if isinstance(action, Persist):
                started = time.monotonic()
                wrote = await asyncio.get_running_loop().run_in_executor(
                    self._disk, _timed_persist, self._log, action, self._hard_state)
                self._hard_state = (action.term, action.voted_for)
                took = time.monotonic() - started
                if took > SLOW_PERSIST_S:
                    _slow.warning("persist", "persisting the metadata log took %d ms (%d "
                                  "entries): %d ms writing and syncing in its thread, %d ms "
                                  "waiting to be run or for the event loop to resume the "
                                  "driver; the Raft driver waited meanwhile", took * 1000,
                                  len(action.entries), wrote * 1000, (took - wrote) * 1000)
            elif isinstance(action, Send):
                if (
                    request is not None
                    and request.reply is not None
                    and not request.reply.done()
                    and action.to == request.message.sender
                    and type(action.message) is reply_type
                ):
                    request.reply.set_result(action.message)
                else:
                    self._transport.send(action.to, action.message, self.deliver)
            elif isinstance(action, Apply):
                self._backlog.extend(action.entries)
            elif isinstance(action, RestoreSnapshot):
                while self._backlog:  # entries below the snapshot, committed before it came
                    queue.extendleft(reversed(self._apply_slice()))
                    await asyncio.sleep(0)
                self._restore(action)
                queue.extend(self._published())
            elif isinstance(action, BecameLeader):
                self._match = {}
                self._leading.set()
                log.info(
                    "strom controller %d is the leader in term %d", self.config.node_id, action.term
                )
            elif isinstance(action, BecameFollower):
                self._leading.clear()
                log.info(
                    "strom controller %d follows %s in term %d",
                    self.config.node_id,
                    "nobody yet" if action.leader_id is None else f"node {action.leader_id}",
                    action.term,
                )

    def _apply_slice(self) -> list[Action]:
        """Apply backlog entries in log order for up to ``apply_slice_s`` (at least one), then
        publish what was applied (``on_apply``), so the broker acts on entries in log order: a
        fencing's leadership moves, proposed first, before its ISR shrinks. Readers see the
        image as of a whole entry. The actions returned (a compaction's ``Persist``, observer
        changes) are carried out before anything else."""
        out: list[Action] = []
        slice_end = time.monotonic() + self._apply_slice_s
        applied = 0
        while self._backlog and (not applied or time.monotonic() < slice_end):
            entry = self._backlog.popleft()
            applied += 1
            error: StromError | None = None
            if entry.command:
                try:
                    self.image.apply(entry.index, decode_command(entry.command))
                except MetadataError as exc:
                    error = exc
                except Exception as exc:  # an undecodable command: every node skips it alike
                    _undecodable.warning("undecodable", "entry %d does not decode: %s",
                                         entry.index, exc)
                    self.image.offset = max(self.image.offset, entry.index)
                    error = StromError(ErrorCode.INVALID_REQUEST, f"bad command: {exc}")
            else:
                self.image.offset = max(self.image.offset, entry.index)
            pending = self._pending.pop(entry.index, None)
            if pending is not None and not pending.result.done():
                if pending.term != entry.term:
                    pending.result.set_exception(_not_controller(self.leader_id))
                elif error is not None:
                    pending.result.set_exception(error)
                else:
                    pending.result.set_result(entry.index)
            self._since_compact += 1
            if self._since_compact >= self._compact_every:
                self._since_compact = 0
                out.extend(self.node.compact(entry.index, self.image.to_snapshot()))
        return out + self._published()

    def _published(self) -> list[Action]:
        """Tell the owner about the new image; keep the observer set in step with it.

        Observers are the registered brokers that are not voters: the leader replicates the
        metadata log to them, so every broker learns of every change by push, not by polling.
        """
        if self._on_apply is not None:
            try:
                self._on_apply(self.image)
            except Exception:
                # The broker's state no longer follows the log: fatal (the run task ends, the
                # supervisor stops the process; a restart replays the log from disk).
                log.critical("applying metadata offset %d in the broker failed",
                             self.image.offset)
                raise
        if not self._manage_observers:
            return []
        wanted: dict[int, str] = {}
        for b in self.image.brokers.values():
            if b.broker_id in self.config.voters or b.broker_id == self.config.node_id:
                continue
            if b.endpoints:
                wanted[b.broker_id] = f"{b.endpoints[0].host}:{b.endpoints[0].port}"
        if wanted == self._observers:
            return []
        self._observers = wanted
        self._transport.update_addresses(wanted)
        return self.node.set_observers(wanted)

    def _restore(self, action: RestoreSnapshot) -> None:
        snap = action.snapshot
        self.image = MetadataImage.from_snapshot(snap.data)
        self.image.offset = snap.index
        self._since_compact = 0
        for index in [i for i in self._pending if i <= snap.index]:
            p = self._pending.pop(index)
            if not p.result.done():
                p.result.set_exception(
                    NotControllerError(self.leader_id, "replaced by a snapshot; outcome unknown")
                )
        log.info("strom controller %d restored a snapshot at %d", self.config.node_id, snap.index)


def _timed_persist(log: RaftLog, action: Persist,
                   last_hard_state: tuple[int, int | None] | None) -> float:
    """``persist`` in the worker thread; the seconds it took there.

    Why: the driver's own measure (from the call to its resumption) also counts the wait for
    a worker and for the event loop to resume the driver. At 10,000 partitions RF 3 a
    "1,013 ms" and a "1,932 ms" persist were read as the Raft log's fsync waiting behind data
    flushes; a small file's write and fsync on the same disk meanwhile never took more than
    84 ms, and the loop watch showed the loop itself 1.9 s late at that moment. The warning now
    gives both parts."""
    started = time.monotonic()
    persist(log, action, last_hard_state)
    return time.monotonic() - started


def _nothing() -> None:
    pass


def sends_before_applies(actions: list[Action]) -> list[Action]:
    """``actions`` with every ``Send`` moved ahead of the ``Apply`` actions just before it,
    everything else in its order.

    Why: a follower told of a commit in the AppendEntries that brings the next entries gets
    ``[Persist, Apply, Send(ack)]``; carried out in that order, its acknowledgement of the new
    entries waited for it to apply the committed ones (at 10,000 partitions, a fencing Batch on
    a loaded machine: hundreds of ms), so each pipelined entry committed only after the
    previous one was applied on the followers. A Send only ever depends on what is persisted
    (a Persist is never passed) and applying only on what is committed, so the acknowledgement
    can go first; Apply stays in order with RestoreSnapshot and Persist."""
    out: list[Action] = []
    for action in actions:
        if isinstance(action, Send):
            k = len(out)
            while k and isinstance(out[k - 1], Apply):
                k -= 1
            out.insert(k, action)
        else:
            out.append(action)
    return out


class NotControllerError(StromError):
    """NOT_CONTROLLER with the leader this node knows of (``None`` while unknown)."""

    def __init__(self, leader_hint: int | None, message: str | None = None) -> None:
        super().__init__(
            ErrorCode.NOT_CONTROLLER,
            message
            or "this node is not the controller leader"
            + ("" if leader_hint is None else f"; try node {leader_hint}"),
        )
        self.leader_hint = leader_hint


def _not_controller(leader_hint: int | None) -> NotControllerError:
    return NotControllerError(leader_hint)
