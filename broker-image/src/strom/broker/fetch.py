"""Fetch: read whole record batches from partition leaders, with long-polling.

Supports Kafka's fetch semantics for consumers: ``min_bytes`` / ``max_wait_ms`` long-poll (the
response is sent as soon as the accumulated bytes reach ``min_bytes``, or any partition has an
error, or waiting cannot return more data, or ``max_wait_ms`` passes; appends wake waiting
fetches through per-partition events), ``partition_max_bytes`` per partition and ``max_bytes``
per response with KIP-74's rule (the first partition with data returns at least one whole batch
even if it is larger; later partitions only return whole batches that fit). Only offsets below
the high watermark are served, and only by the partition's leader (NOT_LEADER_OR_FOLLOWER
elsewhere). The first batch may start before ``fetch_offset``; consumers skip the records before
it, as in Kafka.

Sizes: 0 means "the default" (``max_bytes`` -> fetch.max.bytes, which also caps larger values;
``partition_max_bytes`` -> 1 MiB); negative sizes are INVALID_FETCH_SIZE (whole request for
``min_bytes``/``max_bytes``, per partition for ``partition_max_bytes``). Offsets below the log
start offset or beyond the log end offset are OFFSET_OUT_OF_RANGE with the valid range in the
message; offsets between the high watermark and the log end offset (a new leader's high watermark
may briefly lag) return no records yet. ``current_leader_epoch`` >= 0 is checked
(FENCED_/UNKNOWN_LEADER_EPOCH).

``replica_id`` is not special: followers replicate through ``Replica.ReplicaFetch``
(``replica_fetch.py``), so every Fetch is served as a consumer's.

Fetch sessions (KIP-227, :mod:`strom.broker.fetch_sessions`, the same cache and rules as the
Kafka listener's): a request with ``session_epoch`` set is planned by the broker's session cache
and served by :func:`read_planned`, so an incremental fetch names only new or moved partitions
and its answer carries only partitions with news; without it every partition is named and
answered, as before.

Not supported yet: read_committed filtering (isolation level 1 is
accepted and equals read_uncommitted: there are no transactions), preferred read replicas
(KIP-392: consumers always read from the leader).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from strom.broker.core import BrokerCore
from strom.broker.fetch_sessions import Plan, Wanted
from strom.broker.requests import require_topic_names
from strom.protocol.batch import summarize, whole_batches_within
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import broker_pb2

DEFAULT_PARTITION_MAX_BYTES = 1_048_576


@dataclass(slots=True)
class PartitionRead:
    """One partition's part of a fetch answer, before either front encodes it: the gRPC front
    copies it into its protobuf, the Kafka front writes ``records`` into the response frame as
    they came from the log (the same bytes object, never copied)."""

    topic: str
    partition: int
    error_code: int = 0
    error_message: str = ""
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    record_count: int = 0


async def handle(core: BrokerCore, request: broker_pb2.FetchRequest) -> broker_pb2.FetchResponse:
    """The gRPC Fetch: :func:`read` (or, with ``session_epoch`` set, :func:`read_planned` in
    the session :attr:`BrokerCore.fetch_sessions` plans), copied into the protobuf answer."""
    response = broker_pb2.FetchResponse()
    if request.HasField("session_epoch"):
        _validate(request)  # before the session takes the request's partitions in
        plan = core.fetch_sessions.plan(
            request.session_id, request.session_epoch,
            [((p.topic, p.partition), Wanted(p.fetch_offset, p.partition_max_bytes,
                                             p.current_leader_epoch))
             for p in request.partitions],
            [(f.topic, f.partition) for f in request.forgotten], {})
        if plan.error is not None:
            raise StromError(plan.error, f"fetch session {request.session_id} epoch "
                                         f"{request.session_epoch}: {plan.error.name}; start "
                                         f"over with a full fetch (session_epoch 0)")
        reads = await read_planned(core, plan, request)
        response.session_id = plan.session.session_id if plan.session is not None else 0
    else:
        reads = await read(core, request)
    for r in reads:
        response.partitions.add(topic=r.topic, partition=r.partition, error_code=r.error_code,
                                error_message=r.error_message, high_watermark=r.high_watermark,
                                log_start_offset=r.log_start_offset, records=r.records)
    return response


async def read_planned(core: BrokerCore, plan: Plan, head: broker_pb2.FetchRequest
                       ) -> list[PartitionRead]:
    """Serve a fetch as a session's ``plan`` says (both fronts): :func:`read` of the plan's
    partitions with ``head``'s limits and long-poll (its own partitions are not read), then
    one :class:`PartitionRead` per planned partition, or, for an incremental plan, only
    those with news (records, an error, a high watermark or log start offset the session has
    not told). A whole-request error (:func:`_validate`'s) is raised."""
    request = broker_pb2.FetchRequest(max_wait_ms=head.max_wait_ms, min_bytes=head.min_bytes,
                                      max_bytes=head.max_bytes, replica_id=head.replica_id,
                                      isolation_level=head.isolation_level)
    add = request.partitions.add
    for (name, partition), wanted in plan.partitions:
        add(topic=name, partition=partition, fetch_offset=wanted.fetch_offset,
            partition_max_bytes=wanted.max_bytes, current_leader_epoch=wanted.current_leader_epoch)
    reads = await read(core, request) if plan.partitions else []
    session = plan.session
    if session is None:
        return reads
    changed = session.changed
    return [r for r in reads
            if changed((r.topic, r.partition), r.error_code, len(r.records), r.high_watermark,
                       r.log_start_offset) or not plan.incremental]


async def read(core: BrokerCore, request: broker_pb2.FetchRequest) -> list[PartitionRead]:
    """Serve one fetch (long-poll included): one :class:`PartitionRead` per requested
    partition, in request order; counted in the bytes/messages-out metrics once."""
    _validate(request)
    max_bytes = min(request.max_bytes or core.config.fetch_max_bytes, core.config.fetch_max_bytes)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait_ms / 1000.0
    tps: list[tuple[str, int]] | None = None  # only a fetch that waits registers them
    waiters = core.replicas.waiters
    while True:
        reads, total, done = read_once(core, request, max_bytes)
        remaining = deadline - loop.time()
        if done or total >= request.min_bytes or remaining <= 0 or waiters.closed:
            break
        if tps is None:
            tps = [(r.topic, r.partition) for r in reads]
        event = waiters.register(tps)
        try:  # asyncio.timeout, not wait_for: no task per wait (~6 us less a long poll here)
            async with asyncio.timeout(remaining):
                await event.wait()
        except TimeoutError:
            pass
        finally:
            waiters.unregister(tps, event)
    _count_out(core, reads)
    return reads


def _validate(request: broker_pb2.FetchRequest) -> None:
    if request.max_wait_ms < 0:
        raise StromError(ErrorCode.INVALID_REQUEST,
                         f"max_wait_ms={request.max_wait_ms} is negative; use 0 or more")
    if request.min_bytes < 0:
        raise StromError(ErrorCode.INVALID_FETCH_SIZE,
                         f"min_bytes={request.min_bytes} is negative; use 0 or more")
    if request.max_bytes < 0:
        raise StromError(ErrorCode.INVALID_FETCH_SIZE,
                         f"max_bytes={request.max_bytes} is negative; use a size in bytes, or 0 "
                         f"for the broker's fetch.max.bytes")
    if request.isolation_level not in (0, 1):
        raise StromError(ErrorCode.INVALID_REQUEST,
                         f"isolation_level={request.isolation_level} is invalid; use 0 "
                         f"(read_uncommitted) or 1 (read_committed)")
    require_topic_names(p.topic for p in request.partitions)


def read_once(core: BrokerCore, request: broker_pb2.FetchRequest, max_bytes: int
              ) -> tuple[list[PartitionRead], int, bool]:
    """One pass over the partitions: (reads, bytes of records, respond-now?).

    Respond now when a partition has an error, or when some partition returned less than the
    data it has below the high watermark (the read stopped at a size limit or a segment end):
    waiting for appends would not make this response any bigger.
    """
    reads: list[PartitionRead] = []
    remaining = max_bytes
    total = 0
    done = False
    for p in request.partitions:
        out = PartitionRead(p.topic, p.partition)
        reads.append(out)
        full = False
        try:
            if p.partition_max_bytes < 0:
                raise StromError(ErrorCode.INVALID_FETCH_SIZE,
                                 f"partition_max_bytes={p.partition_max_bytes} for "
                                 f"{p.topic}-{p.partition} is negative; use a size in bytes, "
                                 f"or 0 for the default ({DEFAULT_PARTITION_MAX_BYTES})")
            own = p.partition_max_bytes or DEFAULT_PARTITION_MAX_BYTES
            limit = min(own, remaining)
            # once the answer is full, the partitions after it are checked and get their
            # offsets but no records, without reading the log (Kafka reads them with a zero
            # limit): a fetch that fills fetch.max.bytes early no longer reads every other
            # partition for bytes it then drops
            full = total > 0 and limit <= 0
            result = core.replicas.read(p.topic, p.partition, p.fetch_offset,
                                        0 if full else max(limit, 1), p.current_leader_epoch)
        except StromError as err:
            out.error_code = int(err.code)
            out.error_message = err.message
            core.metrics.partition_errors.labels("Fetch", err.code.name).inc()
            done = True
            continue
        out.high_watermark = result.high_watermark
        out.log_start_offset = result.log_start_offset
        records = result.records
        if not records:
            if full and p.fetch_offset < result.high_watermark:
                done = True  # data exists but does not fit this response
            continue
        if total > 0 and len(records) > limit:
            records = whole_batches_within(records, limit)
        # a partition cut by the room left in the answer (not by its own limit) fills it:
        # the partitions after it are not read. Each was read for that room (two preads:
        # the room, then the whole first batch) and dropped: over 1,000 partitions ~350 reads
        # a 4 MiB catch-up Fetch, ~2,450 per 200,000-record catch-up (issue 21)
        cut_by_answer = remaining < own
        if not records:
            done = True  # data exists but does not fit this response
            if cut_by_answer:
                remaining = 0
            continue
        summary = summarize(records)
        out.records = records
        out.record_count = summary.records
        total += len(records)
        remaining -= len(records)
        if summary.next_offset < result.high_watermark:
            done = True
            if cut_by_answer:
                remaining = 0
    return reads, total, done


def _count_out(core: BrokerCore, reads: list[PartitionRead]) -> None:
    metrics = core.metrics
    for r in reads:
        if r.records:
            metrics.fetched(r.topic, len(r.records), r.record_count)
