"""Fetch sessions (KIP-227): the broker remembers a consumer's partitions between fetches, so an
incremental fetch names only what changed and its answer carries only partitions with news.

Why it exists: Kafka's Java consumer (and Kafka Streams, Connect, Spark's Kafka source) asks for
a session on every full fetch; without one it sends and gets back every partition every time,
O(partitions) per poll. Strom's own consumer does the same on the gRPC Fetch (issue 21: over
1,000 partitions every Fetch of a catch-up named and answered all of them). One concept for
both fronts: the Kafka listener keeps one cache, the gRPC front another
(:attr:`strom.broker.core.BrokerCore.fetch_sessions`), and both serve a plan with
:func:`strom.broker.fetch.read_planned`. This module is the pure part (no I/O, no clock but
the caller's counter): a bounded cache of sessions keyed by id, and per request a
:class:`Plan` -- which partitions to read, at which offsets -- and, after the read, which
partitions the answer must carry (:meth:`Session.changed`).

Kafka's rules (``FetchManager.newContext``), by the request's session id and epoch:

- id 0, epoch -1: a sessionless full fetch; id 0, epoch 0: a full fetch that opens a session
  (answered with its id; 0 when the cache is full of sessions used more recently than this
  one would be, which the client takes as "no session");
- id X, epoch 0: close X, then as id 0 epoch 0; id X, epoch -1: close X, sessionless;
- id X, epoch N > 0: an incremental fetch: X unknown is FETCH_SESSION_ID_NOT_FOUND, N not the
  expected epoch INVALID_FETCH_SESSION_EPOCH; else the request's partitions are added or
  updated, ``forgotten_topics_data`` removed, every partition of the session is read, and the
  answer carries those with records, an error, or a changed high watermark / log start offset.

Not as Kafka: eviction is plain least-recently-used (Kafka also weighs partition counts and
protects followers' sessions; Strom's followers fetch over gRPC); partitions are read in
session order (Kafka rotates those that returned data to the end, for fairness).
"""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict
from dataclasses import dataclass, field

from strom.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]
FINAL_EPOCH = -1
INITIAL_EPOCH = 0
#: Kafka's max.incremental.fetch.session.cache.slots default.
DEFAULT_SLOTS = 1000


@dataclass
class Wanted:
    """What a consumer asked for one partition (kept across incremental fetches)."""

    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1


@dataclass
class _Sent:
    high_watermark: int = -2
    log_start_offset: int = -2


@dataclass
class Session:
    session_id: int
    next_epoch: int = 1
    partitions: OrderedDict[TopicPartition, Wanted] = field(default_factory=OrderedDict)
    sent: dict[TopicPartition, _Sent] = field(default_factory=dict)
    topic_ids: dict[str, object] = field(default_factory=dict)

    def changed(self, tp: TopicPartition, error: int, records: int, high_watermark: int,
                log_start_offset: int) -> bool:
        """Whether an incremental answer carries ``tp``; remembers what was sent."""
        last = self.sent.setdefault(tp, _Sent())
        news = (error != 0 or records > 0 or last.high_watermark != high_watermark
                or last.log_start_offset != log_start_offset)
        if news and error == 0:
            last.high_watermark, last.log_start_offset = high_watermark, log_start_offset
        return news

    def bump(self) -> None:
        self.next_epoch = 1 if self.next_epoch >= 2**31 - 1 else self.next_epoch + 1


@dataclass(frozen=True)
class Plan:
    """How to answer one fetch: ``error`` set means answer only that (no partitions)."""

    error: ErrorCode | None = None
    session: Session | None = None     # None: sessionless (answer session id 0, all partitions)
    incremental: bool = False
    partitions: tuple[tuple[TopicPartition, Wanted], ...] = ()


class FetchSessionCache:
    """A front's sessions (one cache per Kafka listener, one for the gRPC Fetch); owned by the
    event loop."""

    def __init__(self, slots: int = DEFAULT_SLOTS, seed: int | None = None) -> None:
        self.slots = slots
        self._sessions: OrderedDict[int, Session] = OrderedDict()
        self._random = random.Random(seed)

    def __len__(self) -> int:
        return len(self._sessions)

    def _new_id(self) -> int:
        for _ in itertools.count():
            candidate = self._random.randint(1, 2**31 - 1)
            if candidate not in self._sessions:
                return candidate
        raise AssertionError("unreachable")

    def plan(self, session_id: int, epoch: int,
             requested: list[tuple[TopicPartition, Wanted]],
             forgotten: list[TopicPartition], topic_ids: dict[str, object]) -> Plan:
        """The plan for a request (see the module docstring for the rules)."""
        if session_id != 0 and epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            self._sessions.pop(session_id, None)  # the client closes its session
        if epoch == FINAL_EPOCH:
            return Plan(partitions=tuple(requested))
        if epoch == INITIAL_EPOCH:
            if self.slots <= 0:
                return Plan(partitions=tuple(requested))
            if len(self._sessions) >= self.slots:
                self._sessions.popitem(last=False)  # least recently used
            session = Session(self._new_id())
            session.partitions.update(requested)
            session.topic_ids.update(topic_ids)
            self._sessions[session.session_id] = session
            return Plan(session=session, partitions=tuple(requested))
        if epoch < 0:
            return Plan(error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        found = self._sessions.get(session_id) if session_id != 0 else None
        if found is None:
            return Plan(error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND if session_id != 0
                        else ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if epoch != found.next_epoch:
            return Plan(error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        self._sessions.move_to_end(session_id)
        for tp, wanted in requested:
            found.partitions[tp] = wanted
        for tp in forgotten:
            found.partitions.pop(tp, None)
            found.sent.pop(tp, None)
        found.topic_ids.update(topic_ids)
        found.bump()
        return Plan(session=found, incremental=True, partitions=tuple(found.partitions.items()))
