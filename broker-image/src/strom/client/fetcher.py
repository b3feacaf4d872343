"""The consumer's engine: position resets and pipelined, long-polling fetches per leader.

One Fetch is kept in flight per leader broker, for every assigned partition led there whose
prefetch buffer has room (``SubscriptionState.max_buffered_fetches`` answers per partition), so the
next answer is on its way while the application processes the last — ``poll()`` then only decodes.
Each broker's Fetches run in a fetch session (KIP-227, :mod:`strom.protocol.fetch_session`, as
Kafka's consumer): after one full fetch a Fetch names only the partitions whose offset moved and
those no longer fetched (forgotten), and the answer carries only partitions with news; a failed
or cancelled call, or a session error (the broker restarted or evicted the session), starts over
with a full fetch, at once for a session error; ``close`` ends the sessions.
Errors per partition are handled as Kafka's fetcher does: NOT_LEADER_OR_FOLLOWER and other
retriable codes refresh metadata and back off; OFFSET_OUT_OF_RANGE resets by
``auto_offset_reset``; anything else is raised from the next ``poll()``. A corrupt batch (CRC
mismatch with ``check_crcs``, on by default as Kafka's ``check.crcs``, or records that do not
decode) is Kafka's CorruptRecordException: ``poll()`` returns the records before it, then raises
on every call, the position staying at the first record not returned, until the application
seeks past it.

Runs on one event loop (the caller's for ``AsyncConsumer``, a private thread's for ``Consumer``);
``on_data`` tells the front that records arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable

import grpc

from strom.client.backoff import RetryPolicy
from strom.client.connections import Connections, MetadataRefresher, now_ms, rpc_error
from strom.client.consumer_settings import ConsumerSettings
from strom.client.metadata import ClusterMetadata
from strom.client.models import TopicPartition
from strom.client.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, list_offsets
from strom.client.positions import EARLIEST, SubscriptionState
from strom.protocol.errors import ErrorCode, StromError, error_code_from_int
from strom.protocol.fetch_session import FetcherSession, Key
from strom.protocol.records import Record, RecordTaker
from strom.protocol.v1 import broker_pb2

log = logging.getLogger("strom.client.consumer")

#: Per-partition bytes asked for in one Fetch, at most. Measured against the real broker: 1 MiB
#: answers consumed faster than 8 MiB ones (Python gRPC's per-message cost grows with size), so
#: bigger ``max_partition_fetch_bytes`` settings are served as several pipelined 1 MiB fetches.
FETCH_CHUNK_BYTES = 1 << 20
#: Bytes asked for in one Fetch, at most, whatever ``fetch_max_bytes`` allows: a bigger
#: catch-up is served as several answers, so the client decodes one while the broker builds
#: and sends the next (one Fetch is in flight per leader). Over 1,000 partitions one Fetch
#: carried all 24.7 MB of a 200,000-record catch-up and nothing was decoded until it had
#: arrived; once the broker stopped reading the partitions after a full answer, 4 MiB
#: answers read it ~1.7x as fast (issue 21, docs/decisions.md).
FETCH_REQUEST_BYTES = 4 << 20
#: Prefetched answers buffered per partition beyond the one poll() is reading.
PREFETCH_DEPTH = 4


class ConsumerCore:
    def __init__(self, settings: ConsumerSettings, on_data: Callable[[], None]) -> None:
        self.settings = settings
        self.metadata = ClusterMetadata()
        self.conns = Connections(settings.bootstrap, self.metadata, settings.request_timeout_ms)
        self.subs = SubscriptionState(settings.auto_offset_reset,
                                      max_buffered_fetches=PREFETCH_DEPTH)
        self.partition_fetch_bytes = min(settings.max_partition_fetch_bytes, FETCH_CHUNK_BYTES)
        self.retry = RetryPolicy(settings.retry_backoff_ms, settings.retry_backoff_max_ms)
        self.on_data = on_data
        self.loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._fetches: dict[int, asyncio.Task[None]] = {}
        self._idle_polls: set[int] = set()
        """Brokers whose Fetch in flight names only partitions known to be caught up."""
        self._sessions: dict[int, FetcherSession] = {}
        """Each broker's fetch session (KIP-227): a Fetch names only the partitions whose
        offset moved (and those to forget), its answer carries only those with news. Over
        1,000 partitions every Fetch of a catch-up named all of them and each answer carried
        all of them, ~180 with records (issue 21)."""
        self._resets: set[asyncio.Task[None]] = set()
        self._refresher = MetadataRefresher(self.conns, settings.retry_backoff_ms, self.wake)
        self.closed = False
        self.resets_held = False
        """Set by ``assign()``, cleared by the next poll, position or seek: as in Kafka's
        consumer, an assignment alone sends no ListOffsets. An assign() followed by a
        seek_to_beginning() otherwise often sent two lookups of every partition, the first
        (auto_offset_reset's) for nothing: over 1,000 partitions it held the first Fetch back
        ~15 ms (issue 21)."""

    # --- lifecycle (on the loop) ---------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self.loop = asyncio.get_running_loop()
            self._wake = asyncio.Event()
            self._task = self.loop.create_task(self._run(), name="strom-consumer-fetcher")

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def cancel_fetches(self) -> None:
        """Drop in-flight fetches (after a seek or reassignment) so new positions go out now."""
        for task in self._fetches.values():
            task.cancel()
        self._fetches.clear()
        self._idle_polls.clear()
        self.wake()

    async def close(self) -> None:
        self.closed = True
        for t in [self._task, self._refresher.task, *self._fetches.values(), *self._resets]:
            if t is not None:
                t.cancel()
        await self._close_sessions()
        await self.conns.close()

    async def _close_sessions(self) -> None:
        """Tell each broker holding one of this consumer's fetch sessions that it ends (a
        Fetch with its id, epoch -1 and no partitions), as Kafka's consumer does on close:
        else the session keeps every partition's position on the broker until the cache's
        least-recently-used eviction (1,000 sessions). Best effort, at most a second."""
        calls = []
        for node, session in self._sessions.items():
            if session.session_id:
                request = broker_pb2.FetchRequest(session_id=session.session_id,
                                                  session_epoch=-1, replica_id=-1)
                with contextlib.suppress(StromError):
                    calls.append(self.conns.broker_stub(node).Fetch(request, timeout=1.0))
        self._sessions.clear()
        if calls:
            await asyncio.gather(*calls, return_exceptions=True)

    # --- poll side (any thread) ----------------------------------------------------------
    def take(self, max_records: int) -> tuple[list[Record], bool]:
        """Decode up to ``max_records`` buffered records; (records, freed a prefetch slot?)."""
        subs = self.subs
        out: list[Record] = []
        freed = False
        while len(out) < max_records:
            with subs.lock:
                if subs.errors:
                    if out:
                        break
                    raise subs.errors.popleft()
                c = subs.next_completed()
                if c is None:
                    break
            if c.records is None:
                c.records = RecordTaker(c.data, c.tp.topic, c.tp.partition, c.fetch_offset,
                                        check_crcs=self.settings.check_crcs)
            want = max_records - len(out)
            # decode only what this poll returns (whole batches at a time): big prefetched
            # answers never become one huge list of Records (which the cyclic GC would rescan)
            try:
                chunk = c.records.take(want)
            except StromError:
                # a corrupt batch with nothing before it: ``c`` stays first in line and the
                # position where it is, so every poll raises until the application seeks
                # (Kafka's consumer on CorruptRecordException); auto-commit commits nothing new
                if out:
                    break
                raise
            stopped = c.records.error is not None  # records before a corrupt batch
            exhausted = len(chunk) < want and not stopped
            with subs.lock:
                if not subs.advance(c, chunk[-1] if chunk else None, exhausted):
                    continue
                if exhausted and not freed:
                    # Wake the fetcher only for a partition it may fetch now: one in a Fetch
                    # in flight is looked at again when that answer is in (``_next_fetch``;
                    # every path that clears ``in_flight`` runs a step after). With polls of
                    # 500 records over 1,000 partitions nearly every poll empties one, and
                    # each wake-up cost a step over every partition and the GIL twice.
                    st = subs.states.get(c.tp)
                    freed = st is not None and not st.in_flight
            if out:
                out.extend(chunk)
            else:
                out = chunk
            if stopped:
                break  # deliver what precedes the corrupt batch now; the next poll raises
        return out, freed

    # --- the fetcher (on the loop) -------------------------------------------------------
    async def _run(self) -> None:
        assert self._wake is not None
        while not self.closed:
            self._wake.clear()
            try:
                self._step()
            except Exception:
                log.exception("consumer fetcher step failed")
            now = now_ms()
            with self.subs.lock:
                nb = self.subs.next_backoff_ms()
            timeout = None if nb == float("inf") else max(0.0, (nb - now) / 1000.0)
            if self.metadata.needs_refresh(now) and self.subs.states:
                timeout = 0.05 if timeout is None else min(timeout, 0.05)
            # a missed wake-up must never stall consumption: look again at least every second
            timeout = 1.0 if timeout is None else min(timeout, 1.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def _step(self) -> None:
        now = now_ms()
        subs = self.subs
        with subs.lock:
            resets = [] if self.resets_held else subs.needing_reset()
            for tp, _, _ in resets:
                subs.states[tp].resetting = True
            fetchable = subs.fetchable(now)
            topics = {tp.topic for tp in subs.states}
        if self.conns.add_topics(topics):
            self.metadata.mark_stale()
        if resets:
            task = self._spawn_reset(resets)
            self._resets.add(task)
            task.add_done_callback(self._resets.discard)
        routed, unknown = self.metadata.group_by_leader(tp for tp, _, _ in fetchable)
        if unknown or (self.metadata.needs_refresh(now) and topics):
            self.metadata.mark_stale()
            self._request_refresh(now)
        for node, tps in routed.items():
            members = set(tps)
            wanted = {tp: (off, gen) for tp, off, gen in fetchable if tp in members}
            with subs.lock:
                states = subs.states
                # partitions the last answers said have records past the offset we ask from
                hws = [(states[tp].high_watermark, off) for tp, (off, _) in wanted.items()]
                behind = any(hw > off for hw, off in hws)
                if node in self._fetches:
                    if not (behind and node in self._idle_polls):
                        continue
                    # the Fetch in flight long-polls caught-up partitions while a partition
                    # whose prefetch buffer just freed has records waiting: it would wait out
                    # fetch_max_wait_ms (the last ~6,000 records of a 10-partition catch-up
                    # waited 500 ms). Give it up and ask again, with this partition.
                    self._fetches.pop(node).cancel()
                self._idle_polls.discard(node)
                if all(0 <= hw <= off for hw, off in hws):  # a long-poll of caught-up ones
                    self._idle_polls.add(node)
                for tp in wanted:
                    states[tp].in_flight = True
            assert self.loop is not None
            task = self.loop.create_task(self._fetch(node, wanted))
            self._fetches[node] = task
            task.add_done_callback(functools.partial(self._fetch_done, node, wanted))

    def _next_fetch(self, node: int) -> None:
        """An answer from ``node`` is in: send the next fetches now, from this task, before
        the poll thread hears of the records. Through ``_fetch_done`` and ``wake`` the next
        Fetch left four or five event-loop turns later, each giving the GIL to a poll thread
        busy decoding (up to a 5 ms switch interval a turn): 8-31 ms between an answer and
        the next request at 1,000 partitions, where every answer is one seventh of a
        catch-up and the pipeline, not the decode, sets the pace (issue 21)."""
        if self._fetches.get(node) is asyncio.current_task():
            del self._fetches[node]
        if self.closed:
            return
        try:
            self._step()
        except Exception:
            log.exception("consumer fetcher step failed")

    def _fetch_done(self, node: int, wanted: dict[TopicPartition, tuple[int, int]],
                    task: asyncio.Task[None]) -> None:
        if self._fetches.get(node) is task:
            del self._fetches[node]
        if task.cancelled():
            # a task cancelled before it first ran never reaches its own cleanup: release its
            # partitions here, or they would stay "in flight" forever
            self._release(wanted)
        self.wake()

    def _release(self, wanted: dict[TopicPartition, tuple[int, int]]) -> None:
        with self.subs.lock:
            for tp, (_, gen) in wanted.items():
                st = self.subs.states.get(tp)
                if st is not None and st.generation == gen:
                    st.in_flight = False

    def _spawn_reset(self, resets: list[tuple[TopicPartition, str, int]]) -> asyncio.Task[None]:
        assert self.loop is not None
        return self.loop.create_task(self._reset(resets))

    async def _reset(self, resets: list[tuple[TopicPartition, str, int]]) -> None:
        wanted = {tp: (EARLIEST_TIMESTAMP if strategy == EARLIEST else LATEST_TIMESTAMP)
                  for tp, strategy, _ in resets}
        gens = {tp: gen for tp, _, gen in resets}
        try:
            found = await list_offsets(self.conns, self.retry, wanted,
                                       self.settings.request_timeout_ms / 1000.0)
        except StromError as exc:
            with self.subs.lock:
                for tp in wanted:
                    st = self.subs.states.get(tp)
                    if st is not None and st.generation == gens[tp]:  # else seeked meanwhile
                        st.resetting = False
                        st.backoff_until_ms = now_ms() + self.settings.retry_backoff_ms
                if not exc.retriable:
                    self.subs.errors.append(exc)
            self.on_data()
            self.wake()
            return
        with self.subs.lock:
            for tp, (offset, _) in found.items():
                st = self.subs.states.get(tp)
                if st is not None and st.generation == gens[tp]:  # else seeked meanwhile
                    st.resetting = False
                    self.subs.set_reset_result(tp, gens[tp], offset)
        self.on_data()  # position() waiters
        self.wake()

    def _request_refresh(self, now: float) -> None:
        assert self.loop is not None
        self._refresher.request(self.loop, now)

    async def _fetch(self, node: int, wanted: dict[TopicPartition, tuple[int, int]]) -> None:
        s = self.settings
        session = self._sessions.setdefault(node, FetcherSession())
        request = broker_pb2.FetchRequest(
            max_wait_ms=s.fetch_max_wait_ms, min_bytes=s.fetch_min_bytes,
            max_bytes=min(s.fetch_max_bytes, self.partition_fetch_bytes * max(4, len(wanted)),
                          FETCH_REQUEST_BYTES),
            replica_id=-1, isolation_level=0, session_id=session.session_id,
            session_epoch=session.epoch)
        named, forgotten = self._session_request(session, wanted)
        # built in place: FetchPartition objects handed to the constructor are copied into it
        # (0.75 -> 0.40 ms for 1,000 partitions, once per Fetch of a catch-up)
        add, size = request.partitions.add, self.partition_fetch_bytes
        for tp, (off, _, _) in named:
            add(topic=tp[0], partition=tp[1], fetch_offset=off, partition_max_bytes=size,
                current_leader_epoch=-1)
        for tp in forgotten:
            request.forgotten.add(topic=tp[0], partition=tp[1])
        subs = self.subs
        try:
            try:
                response = await self.conns.broker_stub(node).Fetch(
                    request, timeout=(s.request_timeout_ms + s.fetch_max_wait_ms) / 1000.0)
            except grpc.RpcError as exc:
                session.reset()
                self._fetch_failed(wanted, rpc_error(exc))
                return
            except StromError as err:
                session.reset()
                self._fetch_failed(wanted, err)
                return
            session.answered(response.session_id, 0)
            got = False
            with subs.lock:
                for p in response.partitions:
                    tp = TopicPartition(p.topic, p.partition)
                    w = wanted.pop(tp, None)
                    if w is None:
                        continue
                    if p.error_code:
                        self._partition_error(tp, w[1], StromError(
                            error_code_from_int(p.error_code),
                            p.error_message or f"fetch from {tp} failed"))
                        got = True
                    elif subs.on_fetched(tp, w[1], p.records, p.high_watermark,
                                         p.log_start_offset):
                        got = True
                for tp, (_, gen) in wanted.items():  # not answered: fetch again next round
                    st = subs.states.get(tp)
                    if st is not None and st.generation == gen:
                        st.in_flight = False
            self._next_fetch(node)
            if got:
                self.on_data()
        except asyncio.CancelledError:
            session.reset()  # the broker may or may not have taken the request in
            self._release(wanted)
            raise

    @staticmethod
    def _session_request(session: FetcherSession, wanted: dict[TopicPartition, tuple[int, int]]
                         ) -> tuple[list[tuple[tuple[str, int], Key]], list[tuple[str, int]]]:
        """(partitions to name with their offsets, partitions to forget): every partition
        fetched is looked at, since which ones may be fetched changes with prefetch buffers,
        pauses, seeks and back-offs; the broker's session reads the rest where it holds them,
        the offsets ``wanted`` has (a partition whose offset moved is named)."""
        offsets: dict[tuple[str, int], int] = {tp: off for tp, (off, _) in wanted.items()}
        if not session.full:
            touch = session.touch
            for tp in offsets:
                touch(tp)
            for held in session.sent:
                if held not in offsets:
                    touch(held)

        def key_of(tp: tuple[str, int]) -> Key | None:
            off = offsets.get(tp)
            return None if off is None else (off, -1, -1)

        return session.request(offsets, key_of)

    def _fetch_failed(self, wanted: dict[TopicPartition, tuple[int, int]],
                      err: StromError) -> None:
        if err.code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                        ErrorCode.INVALID_FETCH_SESSION_EPOCH):
            # the broker restarted or evicted the session: ask again at once, a full fetch
            # (the session was reset), as Kafka's consumer does
            log.debug("fetch session error, starting over with a full fetch: %s", err)
            self._release(wanted)
            self.wake()
            return
        with self.subs.lock:
            for tp, (_, gen) in wanted.items():
                self._partition_error(tp, gen, err)
        if not err.retriable:
            self.on_data()

    def _partition_error(self, tp: TopicPartition, generation: int, err: StromError) -> None:
        """Handle one partition's fetch error (caller holds ``subs.lock``)."""
        st = self.subs.states.get(tp)
        if st is None or st.generation != generation:
            return
        st.in_flight = False
        if err.code is ErrorCode.OFFSET_OUT_OF_RANGE:
            log.info("%s: offset %s out of range, resetting (%s)", tp, st.fetch_offset,
                     self.settings.auto_offset_reset)
            self.subs.request_reset(tp)
        elif err.retriable:
            self.metadata.mark_stale()
            st.backoff_until_ms = now_ms() + self.settings.retry_backoff_ms
        else:
            st.backoff_until_ms = now_ms() + self.settings.retry_backoff_max_ms
            self.subs.errors.append(err)

    # --- control calls (on the loop) -----------------------------------------------------
    async def list_offsets(self, wanted: dict[TopicPartition, int]
                           ) -> dict[TopicPartition, tuple[int, int]]:
        return await list_offsets(self.conns, self.retry, wanted,
                                  self.settings.request_timeout_ms / 1000.0)
