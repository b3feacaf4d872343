"""The producer's engine: routing, appending, and the sender task that ships batches.

Shared by ``Producer`` (which runs it on a private loop thread and appends from the caller's
thread) and ``AsyncProducer`` (which runs it on the caller's loop). The sender loop asks the
accumulator which leaders have sendable batches, sends one Produce per leader with up to
``max_in_flight_requests_per_connection`` requests pipelined per broker, and on a retriable error
(NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, NETWORK_EXCEPTION, ...) marks the metadata
stale and re-queues the batch after exponential backoff with jitter until ``delivery_timeout_ms``
— Kafka's producer behaviour. Non-retriable errors fail the batch's futures.

Idempotence (on by default with acks=all, as in Kafka 3; KIP-98/KIP-360): before its first send
the sender gets a producer id and epoch with InitProducerId from any broker; each batch is given
the next sequence number of its partition when it is first drained and keeps it (and its bytes)
across retries, so the leader recognises a retry whose first answer was lost and answers it with
the original offsets, also after a failover (followers rebuild the same state from the log). A
partition has one batch in flight at a time, so order holds across retries. When a batch that
had a sequence fails for good (out-of-order sequence, delivery timeout), the partition's
sequence has a gap, so the producer bumps its epoch (locally, as Kafka's client does; a new id
from InitProducerId once the int16 epoch is exhausted) and restarts every partition at sequence
0; a batch the broker refused unwritten because it did not know the producer or its epoch is
restamped under the new epoch and resent. Without idempotence (an explicit acks=0 or 1), a retry
after a lost answer can duplicate records, as in Kafka.
Oversized batches are not split on MESSAGE_TOO_LARGE: lower ``batch_size``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import grpc

from strom.client.accumulator import BATCH_OVERHEAD, RecordAccumulator
from strom.client.backoff import RetryPolicy
from strom.client.config import parse_bootstrap, require_positive, resolve_idempotence
from strom.client.connections import Connections, MetadataRefresher, now_ms, rpc_error
from strom.client.metadata import ClusterMetadata
from strom.client.models import TopicPartition
from strom.client.partitioner import DefaultPartitioner
from strom.client.produce_request import encode_produce_request
from strom.client.producer_batch import DeliveryCallback, ProducerBatch
from strom.protocol.errors import ErrorCode, Handling, StromError, codes_with, error_code_from_int
from strom.protocol.records import Compression, Header, restamp_producer_state
from strom.protocol.v1 import broker_pb2

log = logging.getLogger("strom.client.producer")

#: Per-record bytes beyond key and value (varints, attributes, deltas) — for the size check.
RECORD_OVERHEAD = 24
_SEQUENCE_MODULUS = 1 << 31  # sequences wrap from 2**31 - 1 to 0, as in Kafka
_MAX_EPOCH = (1 << 15) - 1  # epochs are int16: at Short.MAX_VALUE Kafka's producer gets a new id
#: The broker refused the batch without writing it: a new epoch and a resend fix it.
_NO_HEADERS: list[Header] = []  # shared: the codec only reads it
_PRODUCE_METHOD = "/strom.v1.Broker/Produce"  # as in broker_pb2_grpc.BrokerStub
_ProduceCall = grpc.aio.UnaryUnaryMultiCallable[bytes, broker_pb2.ProduceResponse]
_RESTAMP_ERRORS = codes_with(Handling.NEW_PRODUCER_EPOCH)


#: A Produce unanswered for this long makes the sender poll the metadata (``_poll_for_moves``:
#: after ``_POLL_MS``, then doubling up to ``retry_backoff_max_ms``) and, once another broker
#: leads all its partitions, abandon the call and resend there: a hung or cut-off old leader
#: would otherwise hold the batches for the whole request_timeout_ms (30 s), sometimes twice.
#: acks=all answers take milliseconds here. Only calls whose partitions all have another
#: replica are polled for (no other broker can lead a partition that has one replica), and the
#: backoff keeps a slow broker from being asked every 250 ms for metadata: at 10,000 partitions
#: a loaded broker's Produce takes seconds, and a Metadata answer of 10,000 partitions was 35 %
#: of the broker's CPU during keyed produce (issue 21). Kafka's producer has no such poll: it
#: waits out request.timeout.ms.
STUCK_REQUEST_MS = 1000.0
_POLL_MS = 250.0
_POLL_RESET_MS = 10_000.0  # the backoff starts over once no poll was wanted for this long


@dataclass(slots=True, eq=False)
class _InFlight:
    """One Produce call on the wire, so the sender can abandon it when leadership moved."""

    node: int
    batches: list[ProducerBatch]
    started_ms: float
    call: Any = None
    moved: bool = False
    #: the metadata version its partitions' leaders were last checked against
    checked_version: int = -1
    #: every partition of it has a replica on another broker (as of ``checked_version``)
    movable: bool = True


class NeedMetadata(Exception):
    """Internal: the topic's partitions are not known yet; wait for metadata and try again."""


class BufferFull(Exception):
    """Internal: buffer_memory has no room for the ``size`` bytes a new batch needs; wait for
    batches to complete and try again."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class ProducerOptions(TypedDict, total=False):
    """The keyword options of ``Producer`` and ``AsyncProducer`` (defaults in ``build``)."""

    acks: int | str
    enable_idempotence: bool
    linger_ms: int
    batch_size: int
    compression_type: str
    retries: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    delivery_timeout_ms: int
    request_timeout_ms: int
    max_in_flight_requests_per_connection: int
    max_request_size: int
    buffer_memory: int
    max_block_ms: int
    partitioner: str


@dataclass(frozen=True, slots=True)
class ProducerSettings:
    bootstrap: list[tuple[str, int]]
    acks: int
    idempotence: bool
    linger_ms: int
    batch_size: int
    compression: Compression
    retries: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    delivery_timeout_ms: int
    request_timeout_ms: int
    max_in_flight: int
    max_request_size: int
    buffer_memory: int
    max_block_ms: int

    @classmethod
    def build(cls, bootstrap_servers: str | Sequence[str], *, acks: int | str | None = None,
              enable_idempotence: bool | None = None, linger_ms: int = 5,
              batch_size: int = 262144, compression_type: str = "none",
              retries: int = 2147483647, retry_backoff_ms: int = 100,
              retry_backoff_max_ms: int = 1000, delivery_timeout_ms: int = 120000,
              request_timeout_ms: int = 30000, max_in_flight_requests_per_connection: int = 5,
              max_request_size: int = 4 * 1048576, buffer_memory: int = 32 * 1048576,
              max_block_ms: int = 60000, partitioner: str = "default") -> ProducerSettings:
        """Validate the options (one place for their defaults, shared by both producers)."""
        if partitioner not in ("default", "murmur2", "sticky"):
            raise StromError(ErrorCode.INVALID_CONFIG,
                             f"partitioner={partitioner!r} is not supported; use 'default'")
        try:
            compression = Compression.parse(compression_type)
        except ValueError as exc:
            raise StromError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        if linger_ms < 0:
            raise StromError(ErrorCode.INVALID_CONFIG, f"linger_ms={linger_ms} must be >= 0")
        acks_value, idempotence = resolve_idempotence(acks, enable_idempotence, retries)
        return cls(
            bootstrap=parse_bootstrap(bootstrap_servers), acks=acks_value,
            idempotence=idempotence,
            linger_ms=linger_ms, batch_size=require_positive("batch_size", batch_size),
            compression=compression, retries=max(0, retries),
            retry_backoff_ms=max(0, retry_backoff_ms),
            retry_backoff_max_ms=max(retry_backoff_ms, retry_backoff_max_ms),
            delivery_timeout_ms=require_positive("delivery_timeout_ms", delivery_timeout_ms),
            request_timeout_ms=require_positive("request_timeout_ms", request_timeout_ms),
            max_in_flight=require_positive("max_in_flight_requests_per_connection",
                                           max_in_flight_requests_per_connection),
            max_request_size=require_positive("max_request_size", max_request_size),
            buffer_memory=require_positive("buffer_memory", buffer_memory),
            max_block_ms=max(0, max_block_ms),
        )


class ProducerCore:
    """Routing + accumulator + sender task. Sender methods run on one event loop only."""

    def __init__(self, settings: ProducerSettings) -> None:
        self.settings = settings
        self.metadata = ClusterMetadata()
        self.conns = Connections(settings.bootstrap, self.metadata, settings.request_timeout_ms)
        self.acc = RecordAccumulator(
            batch_size=settings.batch_size, linger_ms=settings.linger_ms,
            compression=settings.compression, buffer_memory=settings.buffer_memory,
            # One batch in flight per partition, always: gRPC dispatches the concurrent calls of
            # one HTTP/2 connection in no guaranteed order, so two in-flight batches of a
            # partition could be appended swapped even without a retry (measured: a test saw it
            # under CPU load). Pipelining still happens across partitions (max_in_flight).
            # Idempotent sequence numbers will let this relax, as in Kafka.
            max_in_flight_per_partition=1)
        self.partitioner = DefaultPartitioner()
        self.retry = RetryPolicy(settings.retry_backoff_ms, settings.retry_backoff_max_ms,
                                 settings.retries)
        self.max_record_size = settings.max_request_size - 61 - RECORD_OVERHEAD
        #: topic -> its partitions, valid while ``routes_version == metadata.version``
        self.routes: dict[str, list[TopicPartition]] = {}
        self.routes_version = -1
        #: topic -> (the batch its null-key records stick to, metadata version when chosen);
        #: lets ``Producer.send`` append there without routing while that batch stays open.
        #: Written under ``acc.lock`` by ``append_locked``; read by ``send`` before locking.
        self.sticky_open: dict[str, tuple[ProducerBatch, int]] = {}
        #: topic -> each partition's open batch as last seen (None: not known), valid with
        #: ``routes``: keyed records find their batch by the partition number, not through
        #: the partition's key object, the accumulator's dict and its deque. A batch that is
        #: not full is always its partition's last (a new batch marks the one before it full;
        #: a batch drained, expired or aborted is full), so ``append_fast`` checks ``full``
        #: under ``acc.lock`` as it does for the sticky batch. Over 1,000 partitions each of
        #: those objects is a cache miss per record (issue 21). Written under ``acc.lock`` by
        #: ``append_locked``; an entry is dropped when its batch completes.
        self.keyed_open: dict[str, list[ProducerBatch | None]] = {}
        self.in_flight: dict[int, int] = {}
        self._calls: set[_InFlight] = set()
        self._next_poll_ms = 0.0
        self._poll_interval_ms = _POLL_MS
        self._last_poll_wanted_ms = float("-inf")
        self._produce_calls: dict[str, tuple[grpc.aio.Channel, _ProduceCall]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake: asyncio.Event | None = None
        self._completed: asyncio.Event | None = None
        self._sender: asyncio.Task[None] | None = None
        self._refresher = MetadataRefresher(self.conns, settings.retry_backoff_ms, self.wake)
        self._flush_waiters: list[tuple[set[ProducerBatch], asyncio.Future[None]]] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False
        # idempotence (sender loop only)
        self.producer_id = -1
        self.producer_epoch = -1
        self._sequences: dict[TopicPartition, int] = {}  # next sequence per partition
        self._bump_needed = False
        self._init_task: asyncio.Task[None] | None = None

    # --- lifecycle (on the loop) ---------------------------------------------------------
    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._completed = asyncio.Event()
        self._sender = self.loop.create_task(self._run(), name="strom-producer-sender")

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # --- routing and append (any thread) -------------------------------------------------
    def route(self, topic: str, key: bytes | None, partition: int | None
              ) -> tuple[TopicPartition, bool, int]:
        """(partition to append to, sticky?, partition count); raises NeedMetadata."""
        if self.routes_version != self.metadata.version:
            self.routes.clear()
            self.keyed_open.clear()
            self.routes_version = self.metadata.version
        tps = self.routes.get(topic)
        if tps is None:
            n = self.metadata.partition_count(topic)
            if n is None:
                raise NeedMetadata(topic)
            self.keyed_open[topic] = [None] * n
            tps = self.routes[topic] = [TopicPartition(topic, p) for p in range(n)]
        n = len(tps)
        if partition is not None:
            if not 0 <= partition < n:
                raise StromError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"partition {partition} does not exist: topic {topic!r} has "
                                 f"{n} partitions (0..{n - 1})")
            return tps[partition], False, n
        if key is not None:
            return tps[self.partitioner.partition_for_key(key, n)], False, n
        return tps[self.partitioner.sticky_partition(topic, n)], True, n

    def append_fast(self, topic: str, key: bytes | None, value: bytes | None, ts: int,
                    on_delivery: DeliveryCallback | None = None, ks: int = 0, vs: int = 0
                    ) -> tuple[ProducerBatch, int] | None:
        """Append a record without partition or headers to the open batch routing would pick
        (null key: the topic's sticky batch; key: its partition's open batch) if there is one:
        (batch, index), else None and the caller routes. The one body of both producers' fast
        path (``Producer.send`` and ``AsyncProducer.send``)."""
        batch: ProducerBatch | None = None
        if key is None:
            hot = self.sticky_open.get(topic)
            if hot is not None and hot[1] == self.metadata.version:
                batch = hot[0]
        elif self.routes_version == self.metadata.version:
            opens = self.keyed_open.get(topic)
            if opens is not None:
                batch = opens[self.partitioner.partition_for_key(key, len(opens))]
        if batch is None:
            return None
        lock = self.acc.lock
        lock.acquire()
        try:
            if batch.full:
                return None
            builder = batch.builder
            index = builder.count
            if builder.raw_append(index, ts, key, value, _NO_HEADERS) is None:
                batch.full = True  # routing starts the next batch
                return None
            builder.count = index + 1
            if on_delivery is not None:  # under the lock: the sender may complete the batch
                batch.add_callback(index, ts, ks, vs, on_delivery)
            return batch, index
        finally:
            lock.release()

    def append_locked(self, tp: TopicPartition, sticky: bool, n: int, key: bytes | None,
                      value: bytes | None, ts: int, headers: Sequence[Header], reserved: int
                      ) -> tuple[ProducerBatch, int, bool, bool]:
        """Append under ``acc.lock``: (batch, index, wake the sender?, reservation used?).
        ``reserved``: bytes of buffer_memory the caller reserved for a new batch (0: none);
        raises BufferFull with the size to wait for when a new batch finds no room."""
        acc = self.acc
        hdrs = headers if type(headers) is list else list(headers)
        batch = acc.open_batch(tp)
        if batch is not None:
            index = batch.builder.try_append(key, value, ts, hdrs)
            if index >= 0:
                if sticky:
                    self.sticky_open[tp.topic] = (batch, self.routes_version)
                else:
                    self._keep_open(tp, n, batch)
                return batch, index, False, False
            acc.mark_full(batch)
        tps = self.routes.get(tp.topic)
        if sticky and n > 1 and tps is not None and len(tps) == n:
            # KIP-480: a new batch is due, so move null-key records to another partition
            tp = tps[self.partitioner.on_new_batch(tp.topic, n, tp.partition)]
            batch = acc.open_batch(tp)
            if batch is not None:
                index = batch.builder.try_append(key, value, ts, hdrs)
                if index >= 0:
                    self.sticky_open[tp.topic] = (batch, self.routes_version)
                    return batch, index, True, False
                acc.mark_full(batch)
        size = reserved
        if not size:
            need = (BATCH_OVERHEAD + RECORD_OVERHEAD + (0 if key is None else len(key))
                    + (0 if value is None else len(value)))
            for name, data in hdrs:
                need += len(name) + (0 if data is None else len(data))
            size = acc.reserve_batch(tp, need)
            if not size:
                raise BufferFull(acc.batch_capacity(tp, need))
        batch, wake = acc.start_batch(tp, now_ms(), size)
        batch.builder.try_append(key, value, ts, hdrs)
        if sticky:
            self.sticky_open[tp.topic] = (batch, self.routes_version)
        else:
            self._keep_open(tp, n, batch)
        return batch, 0, wake, True

    def _keep_open(self, tp: TopicPartition, n: int, batch: ProducerBatch) -> None:
        """Note ``batch`` as ``tp``'s open batch for ``append_fast`` (caller holds ``acc.lock``;
        ``n``: the partition count ``tp`` was routed with)."""
        opens = self.keyed_open.get(tp.topic)
        if opens is not None and len(opens) == n:
            opens[tp.partition] = batch

    def check_size(self, key_size: int, value_size: int) -> None:
        if key_size + value_size > self.max_record_size:
            raise StromError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"record of {key_size + value_size} bytes (key + value) does not fit "
                f"max_request_size={self.settings.max_request_size}; raise max_request_size "
                f"(and the topic's max.message.bytes) or send smaller records")

    async def wait_for_topic(self, topic: str, timeout_s: float) -> None:
        """Fetch metadata until ``topic``'s partitions are known (Kafka's max.block.ms wait)."""
        deadline = time.monotonic() + timeout_s
        if self.conns.add_topics([topic]):
            self.metadata.mark_stale()
        attempt = 0
        last: StromError | None = None
        while True:
            if self.metadata.partition_count(topic) is not None:
                return
            err = self.metadata.topic_error(topic)
            if err is not None and not err.retriable:
                raise err
            try:
                await self.conns.refresh_metadata()
            except StromError as exc:
                last = exc
            if self.metadata.partition_count(topic) is not None:
                return
            last = self.metadata.topic_error(topic) or last
            if last is not None and not last.retriable:
                raise last
            attempt += 1
            left = deadline - time.monotonic()
            if left <= 0:
                raise StromError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"topic {topic!r} not present in metadata after {timeout_s * 1000:.0f} ms"
                    + (f" (last error: {last})" if last else "")
                    + "; create it first (Admin.create_topic) or check bootstrap_servers")
            await asyncio.sleep(min(left, self.retry.backoff(attempt) / 1000.0))

    # --- the sender (on the loop) --------------------------------------------------------
    def _leader_of(self, tp: TopicPartition) -> int:
        return self.metadata.leader_for(tp)

    async def _run(self) -> None:
        assert self._wake is not None
        acc = self.acc
        try:
            while True:
                self._wake.clear()
                now = now_ms()
                check = acc.ready(now, self._leader_of)
                if check.unknown_leader_topics \
                        and self.conns.add_topics(check.unknown_leader_topics):
                    self.metadata.mark_stale()  # a topic not asked for yet: at once
                if self.metadata.needs_refresh(now):
                    self._request_refresh(now)  # throttled to one per retry_backoff_ms
                elif check.backing_off or check.unknown_leader_topics:
                    # a retry waits (did its leader move? KIP-951) or a partition has no
                    # leader: poll with backoff, as Kafka's metadata refresh backs off
                    # (KIP-580), not every retry_backoff_ms
                    self._poll_for_moves(now)
                nodes = [n for n in check.nodes if self._may_send(n, check.full_nodes)]
                if nodes and self.settings.idempotence and (
                        self.producer_id < 0 or self._bump_needed):
                    if self._bump_needed and 0 <= self.producer_epoch < _MAX_EPOCH:
                        self._bump_epoch()
                    else:
                        self._start_init_producer_id()
                        nodes = []
                if nodes:
                    drained = acc.drain(nodes, self._leader_of, self.settings.max_request_size,
                                        now, self._stamp if self.settings.idempotence else None)
                    for node, batches in drained.items():
                        self.in_flight[node] = self.in_flight.get(node, 0) + 1
                        self._spawn(self._send(node, batches))
                for batch in acc.expire(now, self.settings.delivery_timeout_ms):
                    last = batch.last_error
                    self._finish(batch, -1, -1, StromError(
                        last.code if isinstance(last, StromError) else ErrorCode.REQUEST_TIMED_OUT,
                        f"expiring {batch.record_count} record(s) for {batch.tp}: "
                        f"{now - batch.created_ms:.0f} ms passed since the batch was created, "
                        f"over delivery_timeout_ms={self.settings.delivery_timeout_ms}"
                        + (f" (last error: {last})" if last is not None else "")))
                if acc.closing and not acc.has_incomplete():
                    return
                timeout: float | None = None
                if check.next_check_ms != float("inf"):
                    timeout = max(0.0, (check.next_check_ms - now_ms()) / 1000.0)
                if acc.has_queued():
                    # queued but not sendable (no leader, in-flight limit): look again soon
                    timeout = min(timeout if timeout is not None else 1.0,
                                  max(self.settings.retry_backoff_ms, 10) / 1000.0
                                  if check.unknown_leader_topics or check.backing_off
                                  else 1.0)
                if self._calls:
                    poll_s = self._check_stuck(now_ms())
                    timeout = poll_s if timeout is None else min(timeout, poll_s)
                elif any(self.in_flight.values()):  # calls spawned just now start soon
                    timeout = min(timeout if timeout is not None else 1.0,
                                  STUCK_REQUEST_MS / 1000.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # never leave futures hanging on a bug
            log.exception("producer sender failed")
            for batch in acc.abort_all():
                self._finish(batch, -1, -1, exc)
            raise

    def _may_send(self, node: int, full_nodes: set[int]) -> bool:
        """Pipeline up to ``max_in_flight`` requests to a node, but only for full batches (or a
        flush): a batch that is merely due (linger passed) waits for the node's request in flight
        to come back, gathering the records that arrive meanwhile (Nagle's rule). Profiled at
        10k records/s with linger_ms=0: every Produce carried ~3 records and gRPC's per-call CPU
        (~0.3 ms each side) saturated the 2 cores, so queueing set the latency."""
        in_flight = self.in_flight.get(node, 0)
        if in_flight == 0:
            return True
        return in_flight < self.settings.max_in_flight and node in full_nodes

    def _check_stuck(self, now: float) -> float:
        """Poll the metadata while a Produce that could move is unanswered for
        ``STUCK_REQUEST_MS`` (backing off, see ``STUCK_REQUEST_MS``); abandon the calls whose
        every partition another broker now leads. Returns when to look again (seconds)."""
        oldest = min(c.started_ms for c in self._calls)
        if now - oldest < STUCK_REQUEST_MS:
            return (oldest + STUCK_REQUEST_MS - now) / 1000.0
        version = self.metadata.version
        movable = False
        for c in self._calls:
            if c.moved or c.call is None or now - c.started_ms < STUCK_REQUEST_MS:
                continue
            if c.checked_version != version:
                # once per metadata version, stopping at the first partition that cannot move
                # or is still led by the node: a slow Produce of 1,000 partitions otherwise
                # cost 1,000 lookups a wake-up
                c.checked_version = version
                node = c.node
                c.movable = all(self.metadata.may_move(b.tp, node) for b in c.batches)
                if c.movable and all(0 <= self._leader_of(b.tp) != node for b in c.batches):
                    leaders = {self._leader_of(b.tp) for b in c.batches}
                    log.info("abandoning a Produce to broker %d unanswered for %.0f ms: "
                             "broker(s) %s lead its partitions now", node, now - c.started_ms,
                             sorted(leaders))
                    c.moved = True
                    c.call.cancel()
                    self._poll_interval_ms = _POLL_MS  # the poll found a move: keep watching
                    continue
            movable = movable or c.movable
        if not movable:
            return STUCK_REQUEST_MS / 1000.0  # a call that becomes stuck later is looked at then
        return self._poll_for_moves(now) / 1000.0

    def _poll_for_moves(self, now: float) -> float:
        """Refresh the metadata to see whether leaders moved, for a stuck call or a retry in
        its backoff: after ``_POLL_MS``, then doubling up to ``retry_backoff_max_ms``, starting
        over once a call was abandoned or nothing was polled for in ``_POLL_RESET_MS``. Before,
        a retry in backoff refreshed every ``retry_backoff_ms`` (100 ms) and a stuck call every
        250 ms: 10,000-partition Metadata answers several times a second (issue 21). Returns
        the milliseconds until the next poll."""
        if now - self._last_poll_wanted_ms >= _POLL_RESET_MS:
            self._poll_interval_ms = _POLL_MS
        self._last_poll_wanted_ms = now
        if now >= self._next_poll_ms:
            self._next_poll_ms = now + self._poll_interval_ms
            self._poll_interval_ms = min(self._poll_interval_ms * 2,
                                         max(_POLL_MS, self.settings.retry_backoff_max_ms))
            self.metadata.mark_stale()
            self._request_refresh(now)
        return max(0.0, self._next_poll_ms - now)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        assert self.loop is not None
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _request_refresh(self, now: float) -> None:
        assert self.loop is not None
        self._refresher.request(self.loop, now)

    async def _send(self, node: int, batches: list[ProducerBatch]) -> None:
        s = self.settings
        request = encode_produce_request(
            s.acks, s.request_timeout_ms,
            [(b.tp.topic, b.tp.partition, b.data or b"") for b in batches])
        if s.acks == 0:  # the client does not wait for the answer (Kafka: offset -1)
            for b in batches:
                b.acks_zero = True
                self._finish(b, -1, -1, None)
        entry = _InFlight(node, batches, now_ms())
        self._calls.add(entry)
        try:
            try:
                produce = self._produce_call(node)
                entry.call = call = produce(request, timeout=s.request_timeout_ms / 1000.0)
                response = await call
            except grpc.RpcError as exc:
                err = rpc_error(exc)
                for b in batches:
                    self._failed(b, err, node)
                return
            except StromError as err:
                for b in batches:
                    self._failed(b, err, node)
                return
            except asyncio.CancelledError:
                if not entry.moved:
                    raise
                # abandoned by _check_stuck: as a request timeout, but sent on at once
                # (idempotence makes the resend safe: the new leader de-duplicates it)
                moved = StromError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                   f"broker {node} did not answer and no longer leads")
                for b in batches:
                    self._failed(b, moved, node)
                return
            results = {(p.topic, p.partition): p for p in response.partitions}
            # the acknowledged batches give their memory back and unmute their partitions
            # under one lock for the whole response, not one each (issue 21)
            acknowledged: list[ProducerBatch] = []
            for b in batches:
                r = results.get((b.tp.topic, b.tp.partition))
                if r is None:
                    self._failed(b, StromError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                               f"produce response has no result for {b.tp}"))
                elif r.error_code:
                    code = error_code_from_int(r.error_code)
                    if code is ErrorCode.DUPLICATE_SEQUENCE_NUMBER and b.producer_id >= 0:
                        self._finish(b, r.base_offset, r.log_append_time_ms, None)  # as Kafka
                    else:
                        self._failed(b, StromError(code, r.error_message
                                                   or f"produce to {b.tp} failed"), node)
                elif self._finish(b, r.base_offset, r.log_append_time_ms, None, release=False):
                    acknowledged.append(b)
            if acknowledged:
                self.acc.finished_many(acknowledged)
        finally:
            self._calls.discard(entry)
            self.in_flight[node] -= 1
            self.wake()

    def _produce_call(self, node: int) -> _ProduceCall:
        """``Broker/Produce`` on ``node``'s channel taking the request's encoded bytes (no
        protobuf message: see ``produce_request``)."""
        address = self.metadata.broker_address(node)
        if address is None:
            raise StromError(ErrorCode.LEADER_NOT_AVAILABLE,
                             f"broker {node} is not in the cluster metadata")
        channel = self.conns.channel(address)
        cached = self._produce_calls.get(address)
        if cached is None or cached[0] is not channel:
            cached = self._produce_calls[address] = (channel, channel.unary_unary(
                _PRODUCE_METHOD, request_serializer=None,
                response_deserializer=broker_pb2.ProduceResponse.FromString))
        return cached[1]

    def _failed(self, batch: ProducerBatch, err: StromError, node: int = -1) -> None:
        if batch.done:
            return  # acks=0: already resolved
        batch.failed_leader = node
        batch.last_error = err
        now = now_ms()
        retriable = err.retriable
        if batch.producer_id >= 0 and err.code in _RESTAMP_ERRORS:
            retriable = True  # not written: resend under a new epoch (KIP-360)
            batch.restamp = True
            self._bump_needed = True
        if self.retry.should_retry(retriable, batch.attempts + 1, now,
                                   batch.created_ms + self.settings.delivery_timeout_ms) \
                and not self.closed:
            log.debug("retrying %s after %s (attempt %d)", batch.tp, err, batch.attempts + 1)
            self.metadata.mark_stale()
            self._request_refresh(now)
            self.acc.reenqueue(batch, now + self.retry.backoff(batch.attempts + 1))
            return
        self._finish(batch, -1, -1, err)

    def _finish(self, batch: ProducerBatch, base_offset: int, log_append_time: int,
                error: BaseException | None, *, release: bool = True) -> bool:
        """Complete ``batch`` (False if it already was); ``release=False``: the caller gives
        its memory back with ``acc.finished_many``."""
        if batch.done:
            return False
        if (error is not None and batch.producer_id == self.producer_id >= 0
                and batch.producer_epoch == self.producer_epoch and not batch.restamp):
            # the batch had sequence numbers and will never be written: the partition's
            # sequence now has a gap the broker would refuse, so start a new epoch
            self._bump_needed = True
        batch.complete(base_offset, log_append_time, error)
        if release:
            self.acc.finished(batch)
        tp = batch.tp
        hot = self.sticky_open.get(tp.topic)
        if hot is not None and hot[0] is batch:  # do not keep a finished batch's bytes alive
            self.sticky_open.pop(tp.topic, None)
        opens = self.keyed_open.get(tp.topic)
        if opens is not None and tp.partition < len(opens) and opens[tp.partition] is batch:
            opens[tp.partition] = None
        if self._completed is not None:
            self._completed.set()
        if self._flush_waiters:
            still = []
            for pending, fut in self._flush_waiters:
                pending.discard(batch)
                if pending:
                    still.append((pending, fut))
                elif not fut.done():
                    fut.set_result(None)
            self._flush_waiters = still
        return True

    # --- idempotence (on the loop) -------------------------------------------------------
    def _stamp(self, batch: ProducerBatch) -> None:
        """Give a batch leaving for the first time (or refused unwritten) its sequence."""
        if batch.producer_id >= 0 and not batch.restamp:
            return  # a retry keeps its sequence: that is what lets the broker de-duplicate
        seq = self._sequences.get(batch.tp, 0)
        if batch.data is None:
            batch.builder.set_producer_state(self.producer_id, self.producer_epoch, seq)
        else:
            batch.data = restamp_producer_state(batch.data, self.producer_id,
                                                self.producer_epoch, seq)
        batch.producer_id, batch.producer_epoch, batch.base_sequence = (
            self.producer_id, self.producer_epoch, seq)
        batch.restamp = False
        self._sequences[batch.tp] = (seq + batch.record_count) % _SEQUENCE_MODULUS

    def _bump_epoch(self) -> None:
        """Kafka's idempotent producer bumps its epoch itself (KIP-360): the broker sees the
        higher epoch start at sequence 0 and fences the older one. Brokers hand out ids only."""
        self.producer_epoch += 1
        self._sequences.clear()
        self._bump_needed = False
        log.debug("producer id %d bumped to epoch %d", self.producer_id, self.producer_epoch)

    def _start_init_producer_id(self) -> None:
        if self._init_task is None or self._init_task.done():
            assert self.loop is not None
            self._init_task = self.loop.create_task(self._init_producer_id(),
                                                    name="strom-producer-init-id")

    async def _init_producer_id(self) -> None:
        """A new producer id (at the start, or when the epoch is exhausted) from any broker,
        retried with backoff while errors are retriable."""
        s = self.settings
        request = broker_pb2.InitProducerIdRequest(producer_id=-1, producer_epoch=-1)
        attempt = 0
        while not self.closed:
            err: StromError
            try:
                stub = self.conns.broker_stub_at(self.conns.addresses()[0])
                response = await stub.InitProducerId(request,
                                                     timeout=s.request_timeout_ms / 1000.0)
                if response.error_code:
                    raise StromError(error_code_from_int(response.error_code),
                                     response.error_message or "InitProducerId failed")
            except grpc.RpcError as exc:
                err = rpc_error(exc)
            except StromError as exc:
                err = exc
            else:
                log.debug("producer id %d epoch %d", response.producer_id,
                          response.producer_epoch)
                self.producer_id, self.producer_epoch = (response.producer_id,
                                                         response.producer_epoch)
                self._sequences.clear()
                self._bump_needed = False
                self.wake()
                return
            if not err.retriable:
                fatal = StromError(err.code, f"the idempotent producer could not get a producer "
                                             f"id (InitProducerId: {err}); fix the broker or "
                                             f"set enable_idempotence=False")
                log.error("%s", fatal)
                for batch in self.acc.abort_all():
                    self._finish(batch, -1, -1, fatal)
                return
            attempt += 1
            log.debug("InitProducerId failed (%s); retrying (attempt %d)", err, attempt)
            await asyncio.sleep(self.retry.backoff(attempt) / 1000.0)

    async def wait_completion(self) -> None:
        """Wait until some batch completes (the async producer's buffer_memory backpressure)."""
        assert self._completed is not None
        self._completed.clear()
        await self._completed.wait()

    # --- flush / close (on the loop) -----------------------------------------------------
    async def flush(self, timeout_s: float | None) -> None:
        assert self.loop is not None
        with self.acc.lock:
            pending = {b for b in self.acc.incomplete if not b.done}
            self.acc.flushes_in_progress += 1
        try:
            if not pending:
                return
            fut: asyncio.Future[None] = self.loop.create_future()
            self._flush_waiters.append((pending, fut))
            self.wake()
            try:
                await asyncio.wait_for(fut, timeout_s)
            except TimeoutError:
                raise StromError(ErrorCode.REQUEST_TIMED_OUT,
                                 f"flush did not complete within {timeout_s} s; "
                                 f"{len(pending)} batch(es) still unacknowledged") from None
        finally:
            with self.acc.lock:
                self.acc.flushes_in_progress -= 1

    async def close(self, timeout_s: float | None) -> None:
        if self.closed:
            return
        with self.acc.lock:
            self.acc.closing = True
        with self.acc.memory:
            self.acc.memory.notify_all()
        self.wake()
        if self._sender is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._sender), timeout_s)
            except TimeoutError:
                self._sender.cancel()
            except Exception:  # the sender already logged and failed its batches
                pass
        calls = [t for t in self._tasks if not t.done()]
        if calls:
            # acks=0 batches complete as soon as they are handed to gRPC, but their calls are
            # still on the wire: closing the channel now would drop them. Kafka's close() also
            # lets in-flight sends finish.
            await asyncio.wait(calls, timeout=timeout_s if timeout_s is not None else 30.0)
        self.closed = True
        err = StromError(ErrorCode.NETWORK_EXCEPTION,
                         "producer closed before the record was acknowledged")
        for batch in self.acc.abort_all():
            self._finish(batch, -1, -1, err)
        for batch in list(self.acc.incomplete):
            self._finish(batch, -1, -1, err)
        for task in list(self._tasks):
            task.cancel()
        if self._init_task is not None:
            self._init_task.cancel()
        self._refresher.cancel()
        await self.conns.close()
