"""The partition replicas this broker hosts: leader or follower, ISR, high watermark, acks=all.

:class:`ReplicaManager` (Kafka's name) is the one owner of the hosted :class:`PartitionLog`
objects on the request path. The metadata publisher tells it what the metadata log says about
each hosted partition (:meth:`ReplicaManager.apply_partition`); it then

- as **leader**: appends producers' batches, serves consumers below the high watermark, serves
  followers' ReplicaFetch up to its log end offset, records each follower's position, moves the
  high watermark (min log end offset over the maximal ISR, never backwards), completes acks=all
  appends once the high watermark passes them, and proposes ISR changes through ``alter_isr``
  (expand on a follower's fetch, shrink on a periodic check every ``lag / 2`` over the led
  partitions that something happened to, not over every hosted partition: see
  :meth:`ReplicaManager.check_isr`);
- as **follower**: hands the partition to the :class:`~strom.replication.fetcher.ReplicaFetcher`
  of its leader, appends what it fetches, truncates where the leader reports a divergence, and
  keeps its high watermark at min(leader's, own log end offset);
- with **no leader**: answers NOT_LEADER_OR_FOLLOWER to produce and fetch.

Everything runs on the event loop's thread (kfake style: state owned by one task, no locks);
storage calls are synchronous page-cache writes.

Where we differ from Kafka, and why:

- acks=all fails with NOT_LEADER_OR_FOLLOWER if this broker stopped leading while it waited, even
  if it leads again by then: its log may have been truncated in between (Kafka only looks at the
  high watermark). The producer retries (and the idempotent producer removes a duplicate). A new
  epoch with the same leader (e.g. a reassignment) does not fail it.
- A new leader does not write its epoch into the leader-epoch cache at election (Kafka does);
  divergence checks add the current epoch on the fly (``divergence.with_current_epoch``), which
  gives the same answers without a storage change.
- The reassignment throttle is one rate per broker for both sides, as Kafka's
  ``--throttle`` sets ``leader.replication.throttled.rate`` and
  ``follower.replication.throttled.rate`` to the same value on every broker: as leader a broker
  sends at most that many bytes/s to replicas being added, as follower it receives at most that
  many for its own replicas being added (a partition is left out of fetches while the follower
  bucket is in debt). Both are token buckets, not Kafka's sampled windows; same average rate.
- A replica fetch only reads one segment per partition per round (``PartitionLog.read``), so a
  catching-up follower moves one segment at a time at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any

from strom.protocol.batch import iter_headers, next_offset_after, whole_batches_within
from strom.protocol.errors import ErrorCode, StromError, error_code_from_int
from strom.protocol.replica_fetch import Answer, PartitionAnswer, Response
from strom.protocol.v1 import replica_pb2
from strom.ratelimit import RateLimitedLog
from strom.replication import divergence, isr
from strom.replication.fetcher import FetchPosition, ReplicaFetcher, backoff_s
from strom.replication.partition import Partition
from strom.replication.sessions import LeaderSession, Plan, SessionCache, Wanted
from strom.replication.settings import ReplicationSettings
from strom.replication.state import NO_LEADER, AlterIsr, BrokerAddress, PartitionView
from strom.replication.throttle import TokenBucket
from strom.replication.waiters import AppendWaiters
from strom.shutdown import cancel_and_wait
from strom.storage.config import LogConfig
from strom.storage.log import AppendResult, PartitionLog, ReadResult
from strom.storage.manager import LogManager
from strom.supervision import failed, spawn

__all__ = ["AppendWaiters", "ReplicaManager"]

log = logging.getLogger(__name__)
_apply_failures = RateLimitedLog(log)
#: Refused ISR changes, one line per kind and reason per interval: a broker restarted beside
#: 10,000 partitions had 2,192 expansions refused (INVALID_UPDATE_VERSION, each retried and
#: then applied) and wrote a WARNING for every one.
_isr_failures = RateLimitedLog(log)

TopicPartition = tuple[str, int]
_FOLLOWER_ERROR_DELAY_S = 1.0


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class ReplicaManager:
    def __init__(self, settings: ReplicationSettings, logs: LogManager, alter_isr: AlterIsr,
                 broker_address: BrokerAddress, *,
                 clock_ms: Callable[[], int] = _wall_ms) -> None:
        self.settings = settings
        self.broker_id = settings.broker_id
        self._logs = logs
        self._alter_isr = alter_isr
        self._broker_address = broker_address
        self._clock_ms = clock_ms
        self._partitions: dict[TopicPartition, Partition] = {}
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self.waiters = AppendWaiters()
        """Consumer fetches and follower ReplicaFetches wait here for appends."""
        self._acks = AppendWaiters()
        """acks=all produces wait here for high watermark or leadership changes."""
        self._sessions = SessionCache(self.waiters)
        """Leader side: each follower broker's fetch session (KIP-227)."""
        self._bucket = TokenBucket(-1, time.monotonic())
        self._follower_bucket = TokenBucket(-1, time.monotonic())
        self._tasks: set[asyncio.Task[None]] = set()
        self._isr_task: asyncio.Task[None] | None = None
        self._isr_watch: dict[TopicPartition, None] = {}
        """Led partitions the ISR check looks at (an ordered set): all but those whose every
        in-sync follower is at the log end offset with no ISR change pending, which no check
        can shrink until an append, a follower's fetch, a new view or an ISR change's end
        puts them back here (:meth:`check_isr`)."""
        self._started = False
        self._stopped = False
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.replication_bytes_in = 0
        self.replication_bytes_out = 0
        self.truncations = 0

    # -- lifecycle --------------------------------------------------------------------------------

    @property
    def throttle_bytes_per_sec(self) -> int:
        """Per-broker limit on reassignment traffic (-1 = none): bytes/s this broker sends, as
        leader, to replicas being added, and receives, as follower, for its replicas being
        added."""
        return self._bucket.rate

    @throttle_bytes_per_sec.setter
    def throttle_bytes_per_sec(self, value: int) -> None:
        self._bucket.rate = value
        self._follower_bucket.rate = value

    async def start(self) -> None:
        self._started = True
        self._isr_task = spawn("isr-checker", self._check_isr_forever, restartable=True)
        for fetcher in self._fetchers.values():
            fetcher.start()

    async def stop(self) -> None:
        """Stop fetchers and tasks, wake every waiter; logs stay open (the broker closes them)."""
        self._stopped = True
        self._sessions.close_all()
        self.waiters.close()
        self._acks.close()
        tasks = [t for t in (self._isr_task, *self._tasks) if t is not None]
        self._isr_task = None
        await cancel_and_wait(tasks)
        fetchers = list(self._fetchers.values())
        self._fetchers.clear()
        await asyncio.gather(*(f.stop() for f in fetchers), return_exceptions=True)

    # -- what the metadata says -------------------------------------------------------------------

    def apply_partition(self, view: PartitionView, log_config: LogConfig) -> None:
        """Make this broker what ``view`` says it is for the partition (sync and quick)."""
        tp = (view.topic, view.partition)
        plog = self._logs.get(*tp)
        if plog is None:
            plog = self._logs.create(view.topic, view.partition, log_config)
        elif plog.config != log_config:
            plog.update_config(log_config)
        part = self._partitions.get(tp)
        now = self._clock_ms()
        if part is None:
            part = self._partitions[tp] = Partition(view, plog, self.broker_id)
        else:
            part.view, part.log = view, plog
        if view.leader == self.broker_id:
            self._stop_following(tp)
            if part.led_epoch != view.leader_epoch:
                part.become_leader(now)
                # one line per partition only at DEBUG: the publisher logs how many it took
                # (10,000 lines at a restart cost 0.15 s of CPU; Kafka logs these at TRACE)
                log.debug("%s-%d: leader in epoch %d at offset %d (ISR %s)", *tp,
                          view.leader_epoch, part.epoch_start_offset, list(view.isr))
            else:
                part.update_assignment(now)
            part.advance_high_watermark()  # waiters are notified below in any case
            self._isr_watch[tp] = None
        else:
            part.resign()
            if view.leader == NO_LEADER:
                self._stop_following(tp)
            else:
                self._follow(tp, view)
        self._acks.notify(tp)
        self.waiters.notify(tp)

    def remove_partition(self, topic: str, partition: int, *, delete: bool) -> None:
        """This broker no longer hosts the partition; ``delete`` also removes its log."""
        tp = (topic, partition)
        self._stop_following(tp)
        self._partitions.pop(tp, None)
        self._isr_watch.pop(tp, None)
        self._acks.notify(tp)
        self.waiters.notify(tp)
        if delete:
            with contextlib.suppress(StromError):
                self._logs.delete_partition(topic, partition)

    def _follow(self, tp: TopicPartition, view: PartitionView) -> None:
        for leader, fetcher in list(self._fetchers.items()):
            if leader != view.leader and tp in fetcher:
                fetcher.remove(tp)
                self._drop_idle_fetcher(leader)
        existing = self._fetchers.get(view.leader)
        if existing is not None:
            fetcher = existing
        else:
            fetcher = self._fetchers[view.leader] = ReplicaFetcher(
                view.leader, self.settings, self, self._broker_address)
            if self._started and not self._stopped:
                fetcher.start()
        if tp in fetcher:
            fetcher.undelay(tp, view.leader_epoch)
        else:
            fetcher.add(tp, view.leader_epoch)

    def _stop_following(self, tp: TopicPartition) -> None:
        for leader, fetcher in list(self._fetchers.items()):
            if tp in fetcher:
                fetcher.remove(tp)
                self._drop_idle_fetcher(leader)

    def _drop_idle_fetcher(self, leader: int) -> None:
        fetcher = self._fetchers.get(leader)
        if fetcher is not None and len(fetcher) == 0:
            del self._fetchers[leader]
            self._spawn(fetcher.stop())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- hosted logs ------------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        part = self._partitions.get((topic, partition))
        return part.log if part is not None else None

    def logs(self) -> Iterator[PartitionLog]:
        return iter([p.log for p in self._partitions.values()])

    def __len__(self) -> int:
        return len(self._partitions)

    def view(self, topic: str, partition: int) -> PartitionView | None:
        part = self._partitions.get((topic, partition))
        return part.view if part is not None else None

    def is_leader(self, topic: str, partition: int) -> bool:
        part = self._partitions.get((topic, partition))
        return part is not None and part.is_leader

    def replica_progress(self, topic: str, partition: int) -> dict[int, int] | None:
        """Leader only: broker id -> last known log end offset (-1 unknown), leader included."""
        part = self._partitions.get((topic, partition))
        if part is None or not part.is_leader:
            return None
        progress = {r: s.log_end_offset for r, s in part.followers.items()}
        progress[self.broker_id] = part.log.log_end_offset
        return progress

    def under_replicated_count(self) -> int:
        return sum(1 for p in self._partitions.values() if p.under_replicated())

    def under_min_isr_count(self) -> int:
        """Partitions led here whose ISR is smaller than their min.insync.replicas (Kafka's
        UnderMinIsrPartitionCount): acks=all writes to them are refused."""
        return sum(1 for p in self._partitions.values()
                   if p.is_leader and len(p.view.isr) < p.log.config.min_insync_replicas)

    def offline_count(self) -> int:
        """Partitions hosted here with no leader, counted on their preferred replica only (so a
        cluster-wide sum counts each partition once)."""
        return sum(1 for p in self._partitions.values()
                   if p.offline and p.view.replicas and p.view.replicas[0] == self.broker_id)

    def max_follower_lag(self) -> int:
        """Records the most-behind followed partition lacks (Kafka's ReplicaFetcher MaxLag)."""
        return max((p.fetch_lag for p in self._partitions.values()
                    if not p.is_leader and not p.offline), default=0)

    def fetch_sessions(self) -> int:
        """Followers' fetch sessions open on this broker (one per follower broker at most)."""
        return len(self._sessions)

    def leader_count(self) -> int:
        return sum(1 for p in self._partitions.values() if p.is_leader)

    def follower_lags(self) -> Iterator[tuple[str, int, int]]:
        """(topic, partition, records behind) of each followed partition, as of its last fetch
        (Kafka's per-partition FetcherLagMetrics ConsumerLag)."""
        for (topic, partition), p in self._partitions.items():
            if not p.is_leader and not p.offline:
                yield topic, partition, p.fetch_lag

    # -- request path (leader) --------------------------------------------------------------------

    def leader_log(self, topic: str, partition: int, current_leader_epoch: int = -1
                   ) -> tuple[PartitionLog, PartitionView]:
        """The log of a partition this broker leads, or a StromError saying why not."""
        part = self._leader(topic, partition, current_leader_epoch)
        return part.log, part.view

    def _leader(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Partition:
        part = self._partitions.get((topic, partition))
        if part is None:
            raise StromError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"this broker hosts no replica of {topic}-{partition}; refresh "
                             f"metadata (the topic or partition may not exist)")
        view = part.view
        if view.leader == NO_LEADER:
            raise StromError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"{topic}-{partition} has no leader right now (no in-sync replica "
                             f"is available); retry after refreshing metadata")
        if not part.is_leader:
            raise StromError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"this broker does not lead {topic}-{partition} (leader is broker "
                             f"{view.leader}); refresh metadata")
        if current_leader_epoch >= 0 and current_leader_epoch != view.leader_epoch:
            code = (ErrorCode.FENCED_LEADER_EPOCH if current_leader_epoch < view.leader_epoch
                    else ErrorCode.UNKNOWN_LEADER_EPOCH)
            raise StromError(code, f"current_leader_epoch {current_leader_epoch} of "
                                   f"{topic}-{partition} does not match the leader's epoch "
                                   f"{view.leader_epoch}; refresh metadata")
        return part

    async def append(self, topic: str, partition: int, records: bytes | memoryview, acks: int,
                     config: LogConfig, timeout_ms: int) -> AppendResult:
        """Append as leader; with acks=-1 also wait until the high watermark passes the batch."""
        if acks != -1:
            return self.append_now(topic, partition, records)[0]
        part, tp, epoch, generation, deadline = self._append_target(
            topic, partition, acks, config, timeout_ms)
        result = part.log.append_as_leader(records, epoch)
        self._appended(part, tp)
        if acks == -1:
            await self._replicated(part, tp, generation, epoch, result, config, deadline,
                                   timeout_ms)
        return result

    def append_now(self, topic: str, partition: int, records: bytes | memoryview
                   ) -> tuple[AppendResult, PartitionLog]:
        """:meth:`append` with acks 0 or 1, where nothing waits: a plain call, no coroutine
        (a produce request appends to hundreds of partitions in turn, issue 21). Also the log
        appended to, whose log start offset the answer carries."""
        part = self._leader(topic, partition)
        plog = part.log
        result = plog.append_as_leader(records, part.view.leader_epoch)
        self._appended(part, (topic, partition))
        return result, plog

    async def append_many(self, topic: str, partition: int, parts: Sequence[bytes | memoryview],
                          acks: int, config: LogConfig, timeout_ms: int
                          ) -> list[AppendResult | StromError] | None:
        """:meth:`append` for the batches of several produce requests to one partition, in one
        write (:meth:`PartitionLog.append_many_as_leader`); a result or an error per part, in
        order, as :meth:`append` gives each (acks=-1 waits for each part's last offset in turn).
        None when the parts cannot be appended as one (the log unchanged); raises, nothing
        written, as :meth:`append` does for one part."""
        part, tp, epoch, generation, deadline = self._append_target(
            topic, partition, acks, config, timeout_ms)
        results = part.log.append_many_as_leader(parts, epoch)
        if results is None:
            return None
        self._appended(part, tp)
        if acks != -1:
            return list(results)
        out: list[AppendResult | StromError] = []
        for result in results:
            try:
                await self._replicated(part, tp, generation, epoch, result, config, deadline,
                                       timeout_ms)
                out.append(result)
            except StromError as err:
                out.append(err)
        return out

    def _append_target(self, topic: str, partition: int, acks: int, config: LogConfig,
                       timeout_ms: int) -> tuple[Partition, tuple[str, int], int, int, float]:
        """What an append as leader checks and fixes first, before it writes: the partition it
        leads (else NOT_LEADER / NOT_ENOUGH_REPLICAS), its key, the leader epoch and leadership
        generation the write belongs to (a wait for acks=-1 ends if either moves), the
        deadline."""
        tp = (topic, partition)
        part = self._leader(topic, partition)
        self._check_min_isr(part, tp, acks, config)
        deadline = asyncio.get_running_loop().time() + max(timeout_ms, 0) / 1000.0
        return part, tp, part.view.leader_epoch, part.leaderships, deadline

    @staticmethod
    def _check_min_isr(part: Partition, tp: tuple[str, int], acks: int,
                       config: LogConfig) -> None:
        min_isr = config.min_insync_replicas
        if acks == -1 and len(part.view.isr) < min_isr:
            raise StromError(ErrorCode.NOT_ENOUGH_REPLICAS,
                             f"{tp[0]}-{tp[1]} has {len(part.view.isr)} in-sync replicas, "
                             f"fewer than min.insync.replicas={min_isr}; wait for replicas to "
                             f"catch up, lower min.insync.replicas or use acks=1")

    def _appended(self, part: Partition, tp: tuple[str, int]) -> None:
        self._isr_watch[tp] = None  # the log end moved: followers are behind it now
        self._caught_up_until_now(part, tp)
        if part.advance_high_watermark():
            self._acks.notify(tp)
        self.waiters.notify(tp)

    def _caught_up_until_now(self, part: Partition, tp: TopicPartition) -> None:
        """Before the log end offset moves: a follower that was at the end when its fetch
        session last looked at ``tp`` (nothing was appended since) was caught up at each of its
        fetches since, the latest included. Kafka's leader records that on every fetch for
        every partition of the session; here idle partitions are not looked at, so it is
        recorded now, while it still holds, or an append after a long idle spell would make
        the follower look ``replica.lag.time.max.ms`` behind until its next fetch (and a
        shrink check in between would drop it from the ISR)."""
        for replica, state in part.followers.items():
            if not 0 <= state.last_fetch_leader_end_offset <= state.log_end_offset:
                continue
            session = self._sessions.of_replica(replica)
            if session is None or tp not in session.partitions:
                continue  # not fetching it: its caught-up time stays as it was
            seen = session.last_request_ms
            if seen > state.last_caught_up_ms:
                part.followers[replica] = dataclasses.replace(
                    state, last_caught_up_ms=seen, last_fetch_ms=max(state.last_fetch_ms, seen))

    async def _replicated(self, part: Partition, tp: tuple[str, int], generation: int,
                          epoch: int, result: AppendResult, config: LogConfig, deadline: float,
                          timeout_ms: int) -> None:
        """Wait until the high watermark passes ``result`` (acks=-1), or raise why not."""
        topic, partition = tp
        min_isr = config.min_insync_replicas
        loop = asyncio.get_running_loop()
        while True:
            current = self._partitions.get(tp)
            if (current is not part or not part.is_leader or part.leaderships != generation
                    or self._acks.closed):
                raise StromError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 f"this broker stopped leading {topic}-{partition} (epoch "
                                 f"{epoch}) before offset {result.last_offset} was replicated; "
                                 f"the write may or may not be kept; refresh metadata and retry")
            if part.log.high_watermark > result.last_offset:
                if len(part.view.isr) < min_isr:
                    raise StromError(
                        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                        f"{topic}-{partition}: the ISR shrank to {len(part.view.isr)} replicas, "
                        f"fewer than min.insync.replicas={min_isr}, after the append at offset "
                        f"{result.base_offset}; retry (it may be written twice without "
                        f"idempotence)")
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise StromError(ErrorCode.REQUEST_TIMED_OUT,
                                 f"{topic}-{partition}: offset {result.last_offset} was not "
                                 f"replicated to the ISR {list(part.view.isr)} within "
                                 f"timeout_ms={timeout_ms}; retry or raise timeout_ms")
            await self._acks.wait([tp], remaining)

    def read(self, topic: str, partition: int, offset: int, max_bytes: int,
             current_leader_epoch: int = -1) -> ReadResult:
        """Consumer read: only records below the high watermark.

        Offsets between the high watermark and the log end offset are valid but return nothing
        yet (a new leader's high watermark may briefly lag what consumers already saw), as in
        Kafka; beyond the log end offset is OFFSET_OUT_OF_RANGE. ``max_bytes`` 0: the checks
        and offsets only, no records (a fetch answer that is already full).
        """
        plog, _ = self.leader_log(topic, partition, current_leader_epoch)
        hw = plog.high_watermark
        end = plog.log_end_offset
        if offset < plog.log_start_offset or offset > end:
            raise StromError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"fetch offset {offset} is out of range for {topic}-{partition}; valid offsets "
                f"are [{plog.log_start_offset}, {end}] (log start offset .. log end offset; "
                f"records below the high watermark {hw} are readable)",
            )
        if offset >= hw or max_bytes <= 0:
            return ReadResult(b"", plog.log_start_offset, end, hw)
        return plog.read(offset, max_bytes, max_offset=hw)

    # -- request path: ReplicaFetch (leader side) -------------------------------------------------

    async def replica_fetch(self, request: replica_pb2.ReplicaFetchRequest) -> Response:
        """Serve one follower fetch: records up to the log end offset, long-polling while none.

        In a fetch session (:mod:`strom.replication.sessions`) only the partitions the request
        names and those that changed here since the last answer are looked at, and an
        incremental answer carries only those with news."""
        if request.max_wait_ms < 0 or request.min_bytes < 0 or request.max_bytes < 0:
            raise StromError(ErrorCode.INVALID_REQUEST,
                             f"ReplicaFetch sizes and max_wait_ms must be >= 0 (max_wait_ms="
                             f"{request.max_wait_ms}, min_bytes={request.min_bytes}, max_bytes="
                             f"{request.max_bytes})")
        if request.replica_id < 0 or request.replica_id == self.broker_id:
            raise StromError(ErrorCode.INVALID_REQUEST,
                             f"replica_id={request.replica_id} is not another broker's id")
        plan = self._sessions.plan(
            request.replica_id, request.session_id, request.session_epoch,
            [((p.topic, p.partition), Wanted(p.fetch_offset, p.last_fetched_epoch,
                                             p.current_leader_epoch, p.partition_max_bytes))
             for p in request.partitions],
            [(f.topic, f.partition) for f in request.forgotten])
        session = plan.session
        if session is None:
            return (replica_pb2.ReplicaFetchResponse(
                error_code=int(plan.error or ErrorCode.UNKNOWN_SERVER_ERROR),
                error_message=plan.message), [])
        session.last_request_ms = self._clock_ms()
        head = replica_pb2.ReplicaFetchResponse(session_id=session.session_id)
        try:
            return head, await self._serve_session(request, session, plan)
        finally:
            if not plan.cached:
                self._sessions.close(session)

    async def _serve_session(self, request: replica_pb2.ReplicaFetchRequest,
                             session: LeaderSession, plan: Plan) -> list[Answer]:
        cap = self.settings.fetch_response_max_bytes
        max_bytes = min(request.max_bytes or cap, cap)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + request.max_wait_ms / 1000.0
        answers: dict[TopicPartition, Answer] = {}
        todo: Sequence[TopicPartition] = plan.todo
        total = 0
        generation = session.generation
        while True:
            session.event.clear()
            total, done = self._replica_read_once(session, request.replica_id, todo, plan.full,
                                                  answers, total, max_bytes)
            session.answering.update(answers)
            remaining = deadline - loop.time()
            if done or plan.answer_now or total >= max(request.min_bytes, 1) or remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(session.event.wait(), remaining)
            replaced = plan.cached and self._sessions.get(session.session_id) is not session
            if self.waiters.closed or replaced or session.generation != generation:
                break  # shutting down, or a newer request of the follower took the session
            todo = session.take_dirty()
        self.replication_bytes_out += total
        return list(answers.values())

    def _replica_read_once(self, session: LeaderSession, replica: int,
                           todo: Sequence[TopicPartition], full: bool,
                           answers: dict[TopicPartition, Answer], total: int, max_bytes: int
                           ) -> tuple[int, bool]:
        """One pass over ``todo``: answers (those with news, or all when ``full``) go into
        ``answers``; returns (bytes of records so far, answer now?)."""
        done = False
        now_ms = self._clock_ms()
        wanted_of = session.partitions
        for tp in todo:
            wanted = wanted_of.get(tp)
            if wanted is None:
                continue
            out = PartitionAnswer(topic=tp[0], partition=tp[1], high_watermark=-1,
                                  log_start_offset=-1, log_end_offset=-1, diverging_epoch=-1,
                                  diverging_end_offset=-1)
            try:
                records, now, pending = self._serve_partition(
                    tp, wanted, replica, out, max_bytes - total, total == 0, now_ms)
            except StromError as err:
                out.error_code = int(err.code)
                out.error_message = err.message
                session.told.pop(tp, None)
                answers[tp] = (out, b"")
                done = True
                continue
            if pending:
                session.dirty[tp] = None  # not sent yet (no room, throttled): look again
            news = session.news(tp, out.high_watermark, out.log_start_offset,
                                out.log_end_offset)
            if full or records or news or out.diverging_epoch >= 0 or tp in answers:
                answers[tp] = (out, records)
            total += len(records)
            done = done or now
        return total, done

    def _serve_partition(self, tp: TopicPartition, p: Wanted, replica: int,
                         out: PartitionAnswer, remaining: int, first: bool, now_ms: int
                         ) -> tuple[bytes, bool, bool]:
        """Fill ``out``: (records to send, must the follower hear now?, are records left
        unsent that the follower will not ask for again?)."""
        topic, partition = tp
        part = self._leader(topic, partition, p.current_leader_epoch)
        view, plog = part.view, part.log
        if replica not in part.assigned():
            raise StromError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {replica} is not a replica of {topic}-{partition} "
                             f"(replicas {list(view.replicas)}); refresh metadata")
        end = plog.log_end_offset
        out.log_start_offset = plog.log_start_offset
        out.log_end_offset = end
        out.high_watermark = plog.high_watermark
        entries = divergence.with_current_epoch(plog.epochs, view.leader_epoch,
                                                part.epoch_start_offset)
        try:
            diverging = divergence.find_divergence(entries, end, p.last_fetched_epoch,
                                                   p.fetch_offset)
        except divergence.StaleLeader as exc:
            raise StromError(ErrorCode.FENCED_LEADER_EPOCH,
                             f"{topic}-{partition}: {exc}; this leader is stale") from None
        if diverging is not None:
            out.diverging_epoch, out.diverging_end_offset = diverging
            return b"", True, False
        if p.fetch_offset < plog.log_start_offset or p.fetch_offset > end:
            raise StromError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"replica fetch offset {p.fetch_offset} of {topic}-{partition} "
                             f"is outside the leader's log [{plog.log_start_offset}, {end}]")
        self._record_follower(part, replica, p.fetch_offset, end, now_ms)
        out.high_watermark = plog.high_watermark
        if p.fetch_offset == end:
            return b"", False, False
        throttled = (replica in view.adding and replica not in view.isr
                     and not self._bucket.unlimited)
        if throttled and not self._bucket.allows(time.monotonic()):
            return b"", False, True
        limit = min(p.max_bytes or self.settings.fetch_max_bytes,
                    self.settings.fetch_max_bytes, max(remaining, 0))
        records = plog.read(p.fetch_offset, max(limit, 1)).records
        if not first and len(records) > limit:
            records = whole_batches_within(records, limit)
        if not records:
            return b"", True, True  # data exists but does not fit this response
        if throttled:
            self._bucket.charge(len(records), time.monotonic())
        return records, next_offset_after(records) < end, False

    def _record_follower(self, part: Partition, replica: int, fetch_offset: int,
                         leader_end: int, now_ms: int) -> None:
        state = part.followers.get(replica, isr.FollowerState())
        part.followers[replica] = isr.after_fetch(state, fetch_offset, leader_end, now_ms)
        tp = (part.view.topic, part.view.partition)
        self._isr_watch[tp] = None
        if part.advance_high_watermark():
            self._acks.notify(tp)
            self.waiters.notify(tp)
        expanded = part.isr_to_expand(replica)
        if expanded is not None:
            self._propose_isr(part, expanded, expand=True)

    # -- ISR changes ------------------------------------------------------------------------------

    def _propose_isr(self, part: Partition, new_isr: tuple[int, ...], *, expand: bool) -> None:
        part.pending_isr = new_isr
        self._spawn(self._alter(part, new_isr, expand))

    async def _alter(self, part: Partition, new_isr: tuple[int, ...], expand: bool) -> None:
        view = part.view
        tp = (view.topic, view.partition)
        kind = "expand" if expand else "shrink"
        try:
            await self._alter_isr(view.topic, view.partition, new_isr, view.partition_epoch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reason = exc.code.name if isinstance(exc, StromError) else type(exc).__name__
            _isr_failures.warning(f"ISR {kind} {reason}",
                                  "%s-%d: ISR %s %s -> %s failed (%s); will retry", *tp, kind,
                                  list(view.isr), list(new_isr), exc)
        else:
            if expand:
                self.isr_expands += 1
            else:
                self.isr_shrinks += 1
            log.info("%s-%d: ISR %s %s -> %s", *tp, kind, list(view.isr), list(new_isr))
        finally:
            if part.pending_isr == new_isr:
                part.pending_isr = None
            current = self._partitions.get(tp) is part and part.is_leader
            if current:
                self._isr_watch[tp] = None  # no change pending any more: check it again
            if current and part.advance_high_watermark():
                self.waiters.notify(tp)
            self._acks.notify(tp)
            # Look at tp again in the followers' next fetches: while this change was pending no
            # other could be proposed (a follower caught up meanwhile could not rejoin), and an
            # idle partition is not looked at otherwise (a failed expansion is retried there).
            self.waiters.mark(tp)

    def check_isr(self) -> None:
        """Propose removing followers that have lagged for ``replica.lag.time.max.ms``.

        Kafka's leader walks every partition it leads on each check (every ``lag / 2``); here
        only the partitions in ``_isr_watch``, and a partition leaves it once every in-sync
        follower is at the log end offset and no ISR change is pending: such a partition has
        nothing to shrink (a follower at the log end is caught up whatever its times), and
        stays so until an append moves the log end, a follower's fetch changes what is known
        of it, a new view comes or a pending change ends - each of which puts it back. The
        decisions are the same as a walk over every led partition; at 10,000 idle partitions
        the walk was the largest part of an idle broker's Python work (it touched every
        partition's objects every 5 s)."""
        now = self._clock_ms()
        lag = self.settings.replica_lag_time_max_ms
        watch = self._isr_watch
        for tp in list(watch):
            part = self._partitions.get(tp)
            if part is None or not part.is_leader:
                del watch[tp]
                continue
            shrunk = part.isr_to_shrink(now, lag)
            if shrunk is not None:
                self._propose_isr(part, shrunk, expand=False)
            elif part.pending_isr is None and part.isr_at_log_end():
                del watch[tp]

    async def _check_isr_forever(self) -> None:
        interval = self.settings.isr_check_interval_s
        while True:
            await asyncio.sleep(interval)
            try:
                self.check_isr()
            except Exception as exc:
                await failed("isr-checker", exc)

    # -- follower side (called by the fetchers) ---------------------------------------------------

    def fetch_position(self, tp: TopicPartition) -> FetchPosition | None:
        part = self._partitions.get(tp)
        if part is None or part.is_leader or part.offline:
            return None
        plog = part.log
        epochs = plog.epochs
        return FetchPosition(plog.log_end_offset, epochs[-1][0] if epochs else -1,
                             plog.log_start_offset)

    def on_fetched(self, tp: TopicPartition, leader: int, leader_epoch: int, fetch_offset: int,
                   answer: PartitionAnswer, records: memoryview) -> float:
        part = self._partitions.get(tp)
        if (part is None or part.is_leader or part.view.leader != leader
                or part.view.leader_epoch != leader_epoch):
            return 0.0
        plog = part.log
        if plog.log_end_offset != fetch_offset:
            return 0.0  # truncated or appended meanwhile: this answer is stale
        code = answer.error_code
        try:
            if code == ErrorCode.NONE:
                self._apply_fetched(part, answer, records)
                return self._follower_throttle(part, len(records))
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                return self._out_of_range(part, answer)
        except StromError as err:
            _apply_failures.warning(f"{tp} {err.code.name}", "%s-%d: applying data fetched "
                                    "from broker %d failed: %s", *tp, leader, err)
            return backoff_s(1, self.settings)
        error = error_code_from_int(code)
        log.debug("%s-%d: leader %d answered %s: %s; retrying after metadata changes", *tp,
                  leader, error.name, answer.error_message)
        if error == ErrorCode.FENCED_LEADER_EPOCH:
            return _FOLLOWER_ERROR_DELAY_S  # our view is old: a new one will undelay it
        return backoff_s(2, self.settings)  # the leader may not have applied the view yet

    def _follower_throttle(self, part: Partition, nbytes: int) -> float:
        """Charge bytes fetched for a replica of ours being added; seconds to leave the
        partition out of fetches (Kafka's follower.replication.throttled.rate)."""
        view = part.view
        if (not nbytes or self._follower_bucket.unlimited or self.broker_id not in view.adding
                or self.broker_id in view.isr):
            return 0.0
        now = time.monotonic()
        self._follower_bucket.charge(nbytes, now)
        return self._follower_bucket.wait_s(now)

    def _apply_fetched(self, part: Partition, answer: PartitionAnswer, records: memoryview
                       ) -> None:
        plog = part.log
        tp = (part.view.topic, part.view.partition)
        if answer.diverging_epoch >= 0 and answer.diverging_end_offset >= 0:
            end = plog.log_end_offset
            target = divergence.truncation_offset(plog.epochs, end, answer.diverging_epoch,
                                                  answer.diverging_end_offset)
            if target >= end:  # no progress possible from epochs: fall back to the HW
                target = min(plog.high_watermark, end)
            log.info("%s-%d: log diverges from leader %d at epoch %d (leader's end offset %d); "
                     "truncating %d -> %d", *tp, part.view.leader, answer.diverging_epoch,
                     answer.diverging_end_offset, end, target)
            plog.truncate_to(target)
            self.truncations += 1
            return
        if records:
            self._append_follower(plog, records)
            self.replication_bytes_in += len(records)
        end = plog.log_end_offset
        plog.high_watermark = min(answer.high_watermark, end)
        leader_start = answer.log_start_offset
        if leader_start > plog.log_start_offset:
            target = min(leader_start, plog.high_watermark)
            if target > plog.log_start_offset:
                plog.advance_log_start_offset(target)
        part.fetch_lag = max(answer.log_end_offset - end, 0)
        self.waiters.notify(tp)

    def _append_follower(self, plog: PartitionLog, records: memoryview) -> None:
        end = plog.log_end_offset
        first = next(iter_headers(records))
        if first.base_offset < end <= first.last_offset and end == plog.log_start_offset:
            # The leader's log start is inside this batch (DeleteRecords): restart the empty
            # log at the batch's base, as Kafka does on UnexpectedAppendOffsetException.
            plog.truncate_fully_and_start_at(first.base_offset)
        plog.append_as_follower(records)

    def _out_of_range(self, part: Partition,
                      answer: PartitionAnswer) -> float:
        plog = part.log
        tp = (part.view.topic, part.view.partition)
        end = plog.log_end_offset
        if answer.log_start_offset > end:
            log.info("%s-%d: leader's log starts at %d, after ours ends (%d): restarting the "
                     "log there", *tp, answer.log_start_offset, end)
            plog.truncate_fully_and_start_at(answer.log_start_offset)
            self.truncations += 1
            return 0.0
        if 0 <= answer.log_end_offset < end:
            log.info("%s-%d: leader's log ends at %d, before ours (%d): truncating", *tp,
                     answer.log_end_offset, end)
            plog.truncate_to(answer.log_end_offset)
            self.truncations += 1
            return 0.0
        return backoff_s(1, self.settings)
