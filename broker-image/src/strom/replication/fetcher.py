"""A follower's pull loop towards one leader broker: one long-poll ReplicaFetch at a time.

Kafka runs ``num.replica.fetchers`` threads per leader; we run one asyncio task per leader broker
for all partitions this broker follows from it, so the number of gRPC calls does not grow with the
partition count. The task only moves bytes: it asks the :class:`FetchTarget` (the replica manager,
which owns the logs) where each partition stands, sends one request, and hands each partition's
answer back. A partition the target says to delay (an error) is left out of requests until its
delay passes; an unknown leader address or a failed call backs off exponentially, bounded by
``fetch_backoff_max_ms``, so a leader that comes back is found again within a second.

A partition added (or given a new epoch) while a long-poll is in flight interrupts it and the
next request includes it at once: after a failover, partitions moving to a leader this broker
already fetches from must not wait out ``replica.fetch.wait.max.ms``. That retry is not
interrupted in its turn (what is added meanwhile goes in the request after it): one
interruption per answered request. Why: each interruption is a new call the leader's gRPC
server must accept, and a ``grpc.aio`` server accepts one call per turn or two of its event
loop, for every service together; while a creation of 10,000 partitions published them in
slices, every slice interrupted each follower's fetch, the leaders' servers were sent more
calls than their slowly turning loops accepted, and Raft and broker heartbeats waited behind
them until they passed their deadlines (issue 21 item 3). A full fetch is never
interrupted: the leader answers it without waiting (:mod:`strom.replication.sessions`), and an
interrupted full fetch would be rebuilt over every
partition again (while a creation adds partitions in slices, over and over). A response for a
partition whose leader epoch changed while the call was in flight is dropped; the target also
drops one whose log end offset moved (truncated meanwhile).

The fetches run in a fetch session (Kafka's KIP-227; :mod:`strom.protocol.fetch_session`
here, :mod:`strom.replication.sessions` on the leader): after one full fetch, a request names
only the partitions whose position or leader epoch changed, and the answer carries only the
partitions with news, so a fetch costs what moved, not the partitions followed. A delayed
partition is forgotten by the leader's session until its delay passes. A failed call or a
session error starts over with a full fetch; an interrupted one is retried in the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import grpc

from strom.protocol.errors import StromError
from strom.protocol.fetch_session import FetcherSession, Key
from strom.protocol.replica_fetch import PartitionAnswer, Received
from strom.protocol.v1 import replica_pb2
from strom.replication.settings import ReplicationSettings
from strom.replication.state import BrokerAddress
from strom.supervision import failed, spawn
from strom.transport import replica_rpc
from strom.transport.status import from_rpc_error

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_FetchMethod = grpc.aio.UnaryUnaryMultiCallable[replica_pb2.ReplicaFetchRequest, Received]
_IDLE_WAIT_S = 5.0
_WARN_EVERY_S = 30.0


@dataclass(frozen=True, slots=True)
class FetchPosition:
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int


class FetchTarget(Protocol):
    def fetch_position(self, tp: TopicPartition) -> FetchPosition | None: ...

    def on_fetched(self, tp: TopicPartition, leader: int, leader_epoch: int, fetch_offset: int,
                   answer: PartitionAnswer, records: memoryview) -> float:
        """Apply one partition's answer (its records beside it, a view of the response bytes);
        returns seconds to leave the partition out (0: none)."""
        ...


@dataclass(slots=True)
class _PartitionFetch:
    leader_epoch: int
    delayed_until: float = 0.0


def backoff_s(failures: int, settings: ReplicationSettings) -> float:
    """Exponential backoff after ``failures`` consecutive failures, bounded."""
    if failures <= 0:
        return 0.0
    ms = min(settings.fetch_backoff_ms * 2 ** min(failures - 1, 16), settings.fetch_backoff_max_ms)
    return float(ms) / 1000.0


class ReplicaFetcher:
    """Fetches every partition this broker follows from broker ``leader``."""

    def __init__(self, leader: int, settings: ReplicationSettings, target: FetchTarget,
                 broker_address: BrokerAddress,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.leader = leader
        self._settings = settings
        self._target = target
        self._broker_address = broker_address
        self._clock = clock
        self._partitions: dict[TopicPartition, _PartitionFetch] = {}
        self._delayed: set[TopicPartition] = set()
        self.session = FetcherSession()
        self._wakeup = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._channel: grpc.aio.Channel | None = None
        self._fetch: _FetchMethod | None = None
        self._address: str | None = None
        self._stopping = False
        self._last_warning = 0.0
        self.failures = 0
        self._retrying = False
        """The request in flight retries an interrupted one: it is not interrupted."""

    # -- membership (called by the manager on the event loop) -------------------------------------

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        self._partitions[tp] = _PartitionFetch(leader_epoch)
        self._delayed.discard(tp)
        self.session.touch(tp)
        self._wakeup.set()
        self._changed.set()

    def remove(self, tp: TopicPartition) -> None:
        self._partitions.pop(tp, None)
        self._delayed.discard(tp)
        self.session.touch(tp)  # forgotten in the next request

    def undelay(self, tp: TopicPartition, leader_epoch: int) -> None:
        """A new view for ``tp`` arrived: fetch it again at once with the new epoch."""
        state = self._partitions.get(tp)
        if state is not None:
            if state.leader_epoch != leader_epoch or state.delayed_until:
                self._changed.set()
            state.leader_epoch = leader_epoch
            state.delayed_until = 0.0
            self._delayed.discard(tp)
            self.session.touch(tp)
            self._wakeup.set()

    def __contains__(self, tp: object) -> bool:
        return tp in self._partitions

    def __len__(self) -> int:
        return len(self._partitions)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = spawn(f"replica-fetcher-{self.leader}", self._run, restartable=True)

    async def stop(self) -> None:
        self._stopping = True
        self._wakeup.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close_channel()

    async def _close_channel(self) -> None:
        channel, self._channel, self._fetch, self._address = self._channel, None, None, None
        if channel is not None:
            await channel.close(None)

    # -- the loop ---------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await self._fetch_once()
            except asyncio.CancelledError:
                raise
            except StromError as err:  # e.g. a storage error here: retried with backoff
                self._warn(f"fetching from leader {self.leader} failed: {err}")
                self.failures += 1
                await self._sleep(backoff_s(self.failures, self._settings))
            except Exception as exc:  # unexpected: supervised (retried, then fatal)
                self.failures += 1
                await failed(f"replica-fetcher-{self.leader}", exc)

    async def _sleep(self, seconds: float) -> None:
        self._wakeup.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), seconds)

    async def _fetch_once(self) -> None:
        self._changed.clear()  # whatever changes from here on interrupts the next call
        now = self._clock()
        self._undelay_expired(now)
        if len(self._delayed) >= len(self._partitions):  # nothing to fetch now
            delays = [self._partitions[tp].delayed_until - now for tp in self._delayed]
            await self._sleep(min(delays, default=_IDLE_WAIT_S))
            return
        fetch = await self._connect()
        if fetch is None:
            self.failures += 1
            self._warn(f"the address of leader broker {self.leader} is unknown")
            await self._sleep(backoff_s(self.failures, self._settings))
            return
        session = self.session
        interruptible = not session.full and not self._retrying
        self._retrying = False
        request = self._request()
        if not session.sent:  # no partition can be fetched (e.g. none has a position)
            session.reset()
            await self._sleep(backoff_s(1, self._settings))
            return
        timeout = (self._settings.fetch_wait_max_ms + self._settings.fetch_timeout_ms) / 1000.0
        try:
            response = await self._call(fetch, request, timeout, interruptible)
        except grpc.aio.AioRpcError as exc:
            session.reset()
            self.failures += 1
            self._warn(f"ReplicaFetch from broker {self.leader} at {self._address} failed: "
                       f"{from_rpc_error(exc)}")
            await self._sleep(backoff_s(self.failures, self._settings))
            return
        if response is None:  # interrupted: partitions were added or changed epoch
            session.interrupted()  # the next request retries it
            self._retrying = True
            return
        head, answers = response
        session.answered(head.session_id, head.error_code)
        if head.error_code:
            log.info("fetch session with leader %d: %s; starting over with a full fetch",
                     self.leader, head.error_message)
            return
        self.failures = 0
        done = self._clock()
        sent = session.sent
        for answer, records in answers:
            tp = (answer.topic, answer.partition)
            key = sent.get(tp)
            state = self._partitions.get(tp)
            session.touch(tp)  # its position may move: compare it in the next request
            if key is None or state is None or state.leader_epoch != key[2]:
                continue
            delay = self._target.on_fetched(tp, self.leader, key[2], key[0], answer, records)
            if delay > 0 and self._partitions.get(tp) is state:
                state.delayed_until = done + delay
                self._delayed.add(tp)  # forgotten by the leader's session until then

    def _undelay_expired(self, now: float) -> None:
        if not self._delayed:
            return
        for tp in [tp for tp in self._delayed if self._partitions[tp].delayed_until <= now]:
            self._delayed.discard(tp)
            self._partitions[tp].delayed_until = 0.0
            self.session.touch(tp)

    async def _call(self, fetch: _FetchMethod, request: replica_pb2.ReplicaFetchRequest,
                    timeout: float, interruptible: bool) -> Received | None:
        """The call's response, or None if :meth:`add` / :meth:`undelay` interrupted the
        long-poll (so a partition that just moved to this leader does not wait it out)."""
        if not interruptible:
            return await fetch(request, timeout=timeout)
        call = asyncio.ensure_future(fetch(request, timeout=timeout))
        changed = asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait((call, changed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            if not call.done():
                call.cancel()
        if not call.done() or call.cancelled():
            return None  # interrupted: cancel() only *requests* it, the task is not done yet
        response: Received = call.result()
        return response

    def _key(self, tp: TopicPartition) -> Key | None:
        state = self._partitions.get(tp)
        if state is None or tp in self._delayed:
            return None
        position = self._target.fetch_position(tp)
        if position is None:
            return None
        return position.fetch_offset, position.last_fetched_epoch, state.leader_epoch

    def _request(self) -> replica_pb2.ReplicaFetchRequest:
        """The next request: every fetchable partition in a full fetch, else only those whose
        figures changed since the last request, and those to forget."""
        settings = self._settings
        session = self.session
        named, forgotten = session.request(self._partitions, self._key)
        request = replica_pb2.ReplicaFetchRequest(
            replica_id=settings.broker_id, broker_epoch=-1, max_wait_ms=settings.fetch_wait_max_ms,
            min_bytes=1, max_bytes=settings.fetch_response_max_bytes,
            session_id=session.session_id, session_epoch=session.epoch)
        add = request.partitions.add
        max_bytes = settings.fetch_max_bytes
        for (topic, partition), (offset, last_epoch, leader_epoch) in named:
            add(topic=topic, partition=partition, fetch_offset=offset,
                last_fetched_epoch=last_epoch, current_leader_epoch=leader_epoch,
                partition_max_bytes=max_bytes)
        for topic, partition in forgotten:
            request.forgotten.add(topic=topic, partition=partition)
        return request

    async def _connect(self) -> _FetchMethod | None:
        address = self._broker_address(self.leader)
        if address is None:
            return None
        if address != self._address or self._fetch is None:
            await self._close_channel()
            size = self._settings.max_message_bytes
            self._channel = grpc.aio.insecure_channel(address, options=[
                ("grpc.max_send_message_length", size),
                ("grpc.max_receive_message_length", size),
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.min_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", self._settings.fetch_backoff_max_ms),
            ])
            self._fetch = replica_rpc.fetch_method(self._channel)
            self._address = address
        return self._fetch

    def _warn(self, message: str) -> None:
        now = self._clock()
        if now - self._last_warning >= _WARN_EVERY_S:
            self._last_warning = now
            log.warning("%s; retrying with backoff", message)
        else:
            log.debug("%s", message)
