"""Fetch sessions on the leader (Kafka's KIP-227, for followers): what each follower fetches.

Why: a follower fetches every partition it follows from this broker in one ReplicaFetch (one
:class:`~strom.replication.fetcher.ReplicaFetcher` per leader). Without a session every fetch
names all of them and the leader looks at all of them, answers all of them and the follower
applies all of them: with 3 brokers and 10,000 partitions at RF 3 that is ~3,300 partitions
per fetch on each side, many times a second, whatever moved. With a session the leader keeps
each partition's fetch position between fetches, so an *incremental* fetch names only the
partitions whose position or leader epoch changed, and the leader looks only at those and at
the partitions that changed on its side since the last answer (an append, a high watermark or
log start move, a leadership change: :class:`~strom.replication.waiters.AppendWaiters` touches
the sessions that watch a partition); its answer carries only partitions with news.

The rules (Kafka's ``FetchManager.newContext``, by the request's session id and epoch):

- epoch 0: a full fetch: opens a new session holding exactly the request's partitions (it
  replaces the follower's previous session, so there is at most one per follower broker and the
  cache needs no eviction policy: Kafka keeps 1,000 slots for consumers and followers together);
- epoch -1: a full fetch without a session (answered with session id 0);
- epoch N > 0 with session id X: incremental: X unknown (e.g. the leader restarted) is
  FETCH_SESSION_ID_NOT_FOUND, N neither the next epoch nor the last one is
  INVALID_FETCH_SESSION_EPOCH, either way the follower starts over with a full fetch. Otherwise
  the request's partitions are added or updated, ``forgotten`` ones dropped, and the answer
  carries partitions with records, an error, a divergence or a moved high watermark / log start
  / log end offset.
- Not in Kafka: N equal to the *last* epoch is a retry of that request, whose answer the follower
  never got (it interrupted the long-poll because partitions moved to this leader, the failover
  case): whatever that answer told is forgotten, so its partitions are answered again. Kafka's
  followers do not interrupt a fetch; a full fetch after each interruption would cost as much as
  sessions save when thousands of partitions move at once.
- Not in Kafka either: a full fetch (epoch 0) that names partitions is answered after one pass,
  without waiting for records (``Plan.answer_now``). A follower never interrupts a full fetch
  (:mod:`strom.replication.fetcher`): before, while a creation added partitions to a fetcher in
  20 ms publisher slices, each add interrupted the follower's first full fetch, which was
  rebuilt over every partition so far and served by the leader again for as long as the
  creation went on (the loop watch named those passes among the turns that starved Raft, issue
  21 item 3). Answered at once, the session is open after one round trip and the partitions
  added meanwhile go in the next, incremental, request.

Pure state (no I/O, no clock); the replica manager reads the logs. Owned by the event loop.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from strom.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]
FULL_EPOCH = 0
SESSIONLESS_EPOCH = -1
_MAX_EPOCH = 2**31 - 1


class Watchers(Protocol):
    """Where a session registers for news of its partitions (the replica manager's waiters)."""

    def watch(self, tp: TopicPartition, watcher: LeaderSession) -> None: ...

    def unwatch(self, tp: TopicPartition, watcher: LeaderSession) -> None: ...


@dataclass(slots=True)
class Wanted:
    """What the follower last said about one partition: its position and the leader epoch it
    believes in."""

    fetch_offset: int
    last_fetched_epoch: int
    current_leader_epoch: int
    max_bytes: int


@dataclass(slots=True)
class Told:
    """What the follower was last told about one partition (an incremental answer leaves the
    partition out while none of these moved and there are no records for it)."""

    high_watermark: int = -2
    log_start_offset: int = -2
    log_end_offset: int = -2


@dataclass(eq=False)
class LeaderSession:
    session_id: int
    replica_id: int
    next_epoch: int = 1
    partitions: dict[TopicPartition, Wanted] = field(default_factory=dict)
    told: dict[TopicPartition, Told] = field(default_factory=dict)
    dirty: dict[TopicPartition, None] = field(default_factory=dict)
    """Partitions to look at in the next pass (insertion ordered: a set that keeps order)."""
    event: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a watched partition changed (wakes the session's long-poll)."""
    answering: set[TopicPartition] = field(default_factory=set)
    """Partitions the answer to the latest request carries (so far): told again on a retry."""
    generation: int = 0
    """Bumped by each request: a long-poll of an older request of the session stops."""
    last_request_ms: int = 0
    """When the follower's latest request arrived (set by the replica manager)."""

    def touch(self, tp: TopicPartition, wake: bool = True) -> None:
        """Something changed on ``tp`` here (called by the waiters): look at it next pass."""
        if tp in self.partitions:
            self.dirty[tp] = None
            if wake:
                self.event.set()

    def wake(self) -> None:
        self.event.set()

    def take_dirty(self) -> list[TopicPartition]:
        out = list(self.dirty)
        self.dirty.clear()
        return out

    def news(self, tp: TopicPartition, high_watermark: int, log_start_offset: int,
             log_end_offset: int) -> bool:
        """Whether the follower has not been told these figures yet; remembers them."""
        told = self.told.get(tp)
        if told is None:
            told = self.told[tp] = Told()
        if (told.high_watermark == high_watermark and told.log_start_offset == log_start_offset
                and told.log_end_offset == log_end_offset):
            return False
        told.high_watermark = high_watermark
        told.log_start_offset = log_start_offset
        told.log_end_offset = log_end_offset
        return True

    def forget_answer(self) -> None:
        """The follower never got the answer to the latest request: tell it all again."""
        for tp in self.answering:
            self.told.pop(tp, None)
            if tp in self.partitions:
                self.dirty[tp] = None
        self.answering.clear()


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


@dataclass(frozen=True)
class Plan:
    """How to answer one ReplicaFetch."""

    session: LeaderSession | None = None
    """The session to read (a throwaway one for a sessionless fetch); None with ``error``."""
    full: bool = True
    """Answer every partition of the session (else only those with news)."""
    cached: bool = False
    """The session stays after the answer (its id goes back to the follower)."""
    todo: tuple[TopicPartition, ...] = ()
    """Partitions to look at in the first pass."""
    answer_now: bool = False
    """A full fetch that names partitions: answer after the first pass, without waiting for
    records (the follower does not interrupt it; what it adds meanwhile comes next)."""
    error: ErrorCode | None = None
    message: str = ""


class SessionCache:
    """Every follower's session on this leader (at most one per follower broker)."""

    def __init__(self, watchers: Watchers, seed: int | None = None) -> None:
        self._watchers = watchers
        self._by_id: dict[int, LeaderSession] = {}
        self._by_replica: dict[int, LeaderSession] = {}
        self._random = random.Random(seed)

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, session_id: int) -> LeaderSession | None:
        return self._by_id.get(session_id)

    def of_replica(self, replica_id: int) -> LeaderSession | None:
        """The follower broker's current session, if it has one."""
        return self._by_replica.get(replica_id)

    def plan(self, replica_id: int, session_id: int, epoch: int,
             requested: Iterable[tuple[TopicPartition, Wanted]],
             forgotten: Iterable[TopicPartition]) -> Plan:
        """Apply one request to the cache; see the module docstring for the rules."""
        if epoch in (FULL_EPOCH, SESSIONLESS_EPOCH):
            if epoch == SESSIONLESS_EPOCH or session_id:
                old = self._by_id.get(session_id) if session_id else None
                if old is not None and old.replica_id == replica_id:
                    self.close(old)
            session = LeaderSession(self._new_id() if epoch == FULL_EPOCH else 0, replica_id)
            session.partitions.update(requested)
            if epoch == FULL_EPOCH:
                previous = self._by_replica.get(replica_id)
                if previous is not None:
                    self.close(previous)
                self._by_id[session.session_id] = session
                self._by_replica[replica_id] = session
            for tp in session.partitions:
                self._watchers.watch(tp, session)
            return Plan(session, full=True, cached=epoch == FULL_EPOCH,
                        todo=tuple(session.partitions), answer_now=bool(session.partitions))
        if epoch < 0:
            return Plan(error=ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                        message=f"session_epoch={epoch} is neither -1, 0 nor positive")
        found = self._by_id.get(session_id)
        if found is None or found.replica_id != replica_id:
            return Plan(error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                        message=f"fetch session {session_id} of broker {replica_id} is not "
                                "known here (this broker restarted or replaced it); send a "
                                "full fetch")
        if next_epoch(epoch) == found.next_epoch:  # a retry of the latest request
            found.forget_answer()
        elif epoch != found.next_epoch:
            return Plan(error=ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                        message=f"fetch session {session_id} expects epoch "
                                f"{found.next_epoch}, got {epoch}; send a full fetch")
        session = found
        session.next_epoch = next_epoch(epoch)
        session.answering.clear()
        session.generation += 1
        session.event.set()  # an older request still long-polling on the session ends
        for tp in forgotten:
            if session.partitions.pop(tp, None) is not None:
                self._watchers.unwatch(tp, session)
            session.told.pop(tp, None)
            session.dirty.pop(tp, None)
        for tp, wanted in requested:
            if tp not in session.partitions:
                self._watchers.watch(tp, session)
            session.partitions[tp] = wanted
            session.dirty[tp] = None
        return Plan(session, full=False, cached=True, todo=tuple(session.take_dirty()))

    def close(self, session: LeaderSession) -> None:
        """Forget ``session`` (also used for a sessionless fetch's throwaway one)."""
        if self._by_id.get(session.session_id) is session:
            del self._by_id[session.session_id]
        if self._by_replica.get(session.replica_id) is session:
            del self._by_replica[session.replica_id]
        for tp in session.partitions:
            self._watchers.unwatch(tp, session)
        session.wake()  # a long-poll still waiting on it answers now

    def close_all(self) -> None:
        for session in list(self._by_id.values()):
            self.close(session)

    def _new_id(self) -> int:
        while True:
            candidate = self._random.randint(1, _MAX_EPOCH)
            if candidate not in self._by_id:
                return candidate
