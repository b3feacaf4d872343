"""Produce (key 0), versions 3-13 (advertised 0-13): append producers' record batches, through
the gRPC front's handler (:func:`strom.broker.produce.handle`).

Supports acks 0/1/-1 with ``min.insync.replicas``, idempotent producers (sequence and epoch
checks live in the storage layer below both fronts), every compression codec (batches are stored
as sent; the broker never decompresses), per-partition errors with Kafka's codes and messages,
topic ids (v13). The records field is passed to the core as received: no record is decoded or
re-encoded. acks=0 gets no response, and an error on an acks=0 request closes the connection
(Kafka's way to tell a producer that does not read responses).

Per-request cost matters here (librdkafka at linger.ms=0 sends a request per record): the body
comes read in one pass (``produce_request.ProduceBody``), pipelined requests for one partition
are appended together (:func:`handle_pipelined`), and a successful one-partition answer is a
copy of a kept kio encoding with two integers written in (:func:`_encoded`).

Not supported: transactional produce (a ``transactional_id`` fails every partition with
INVALID_REQUEST, as InitProducerId does for a transactional id), per-record errors
(``record_errors`` is empty: a bad batch fails whole), ``current_leader`` hints on
NOT_LEADER_OR_FOLLOWER (clients refresh metadata instead).

Versions 0-2 (message format v0/v1) are advertised and refused, as Kafka 4.x does since
KAFKA-18659: librdkafka before 2.10 enables gzip, snappy and lz4 only if a broker's Produce range
starts at 0, so ApiVersions says 0-13 (:data:`ADVERTISED`) and a v0-2 request is closed without
an answer, as Kafka's ``SocketServer`` closes it ("unsupported version"; clients never send one,
since they pick the newest version both sides have).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

from kio.serial.readers import tz_aware_from_i64

from strom.broker import produce
from strom.broker.kafka.context import NO_THROTTLE, Context, code, topic_uuid
from strom.broker.kafka.frames import ResponseTemplate, TemplateCache
from strom.broker.kafka.produce_request import ProduceBody
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.produce_wire import PartitionData, ProduceRequest
from strom.protocol.v1 import broker_pb2

KEY = 0
VERSIONS = (3, 13)
ADVERTISED = (0, VERSIONS[1])
"""What ApiVersions says (KAFKA-18659: for old librdkafka's compression check); ``VERSIONS`` is
what is served."""


class CloseConnection(Exception):
    """Raised for a failed acks=0 request: Kafka closes the connection."""


class _Slot(NamedTuple):
    topic: str
    topic_id: uuid.UUID | None
    partition: int
    error: StromError | None = None


class _Prepared(NamedTuple):
    """A Kafka produce request as the core's request, with a slot per partition it names.
    (Tuples, not dataclasses: one of each per pipelined request, and tuples are built in a
    fraction of the time.)"""

    slots: list[_Slot]
    request: ProduceRequest
    transactional: bool
    run_key: tuple[str, int, int, int] | None
    """Requests with the same key may share one append (``produce.handle_run``): one
    partition, known, not transactional; None for any other request."""


class _Close:
    """The answer that closes the connection (a failed acks=0 request)."""


CLOSE = _Close()


async def handle(ctx: Context) -> Any:
    prepared = _prepare(ctx)
    return await _serve(ctx, prepared)


async def handle_pipelined(ctxs: Sequence[Context]) -> list[Any]:
    """Serve produce requests read pipelined from one connection: their answers in order, each
    a response, its encoded frame (``bytes``), None (acks=0) or ``CLOSE``, which ends the list
    (Kafka closes the connection after a failed acks=0 request, and the requests behind it
    are not served).

    Consecutive requests for the same single partition (with the same acks and timeout: one
    producer's, as librdkafka sends at linger.ms=0, one record per request) are appended
    together by the core (:func:`strom.broker.produce.handle_run`); whatever the core cannot
    promise to answer as it would each alone is served request by request, as
    :func:`handle` does. Other consecutive acks=1 requests (librdkafka sends one partition per
    request, so writing many partitions it pipelines requests for different ones) are served
    by the core one after the other in one pass, which answers each as :func:`handle` would:
    those for one partition each by :func:`strom.broker.produce.handle_each_now` (no
    coroutine or protobuf response per request), others by
    :func:`strom.broker.produce.handle_in_turn`."""
    prepared = [_prepare(ctx) for ctx in ctxs]
    answers: list[Any] = []
    i = 0
    while i < len(ctxs):
        j = _run_end(prepared, i)
        together = in_turn = now = None
        if j - i > 1:
            together = await produce.handle_run(ctxs[i].core,
                                                [p.request for p in prepared[i:j]])
        else:
            j = _turn_end(prepared, i)
            if prepared[i].run_key is not None and prepared[i].request.acks == 1:
                now = produce.handle_each_now(ctxs[i].core, [p.request for p in prepared[i:j]])
                # none served now (an auto-creation first): the first one by _serve_one
                j = i + len(now) if now else i + 1
            elif j - i > 1:
                in_turn = await produce.handle_in_turn(ctxs[i].core,
                                                       [p.request for p in prepared[i:j]])
        for k in range(i, j):
            try:
                if together is not None:
                    part = together[k - i]
                    answers.append(_answer(ctxs[k], prepared[k],
                                           {(part.topic, part.partition): part}, None))
                elif now:
                    answers.append(_answer_one(ctxs[k], prepared[k], now[k - i]))
                elif in_turn is not None:
                    answers.append(_answered(ctxs[k], prepared[k], in_turn[k - i]))
                elif prepared[k].run_key is not None and prepared[k].request.acks != -1:
                    answers.append(await _serve_one(ctxs[k], prepared[k]))
                else:
                    answers.append(await _serve(ctxs[k], prepared[k]))
            except CloseConnection:
                answers.append(CLOSE)
                return answers
        i = j
    return answers


def answer_now(ctxs: Sequence[Context]) -> list[Any] | None:
    """:func:`handle_pipelined`'s answers to ``ctxs``, computed now, in the caller's callback,
    or None (nothing done) when serving them could wait: an acks=-1 request (it waits for
    followers), or a topic this broker does not know (auto-creation waits for the
    controller).

    Why: librdkafka sends one partition per Produce request and, at a thousand partitions,
    most of them reach the broker alone; the listener serves such requests straight from
    ``data_received`` (no connection-task wake-up, no extra event-loop iteration: see
    :mod:`strom.broker.kafka.listener`). The requests are served by :func:`handle_pipelined`
    itself, the one implementation: with acks 0/1 and known topics nothing in it awaits
    anything that suspends (no follower wait, no auto-creation), so its coroutine finishes on
    its first step. A step that does suspend is a broken promise of this check, raised as
    a RuntimeError (the listener then closes the connection, as for any handler failure)."""
    core = ctxs[0].core
    topic = core.metadata.topic
    for ctx in ctxs:
        body: ProduceBody = ctx.body
        if body.acks == -1:
            return None
        for name, _, _ in body.topics:
            if name is not None and name not in produce.PRODUCE_FORBIDDEN \
                    and topic(name) is None:
                return None  # auto-creation (a topic id is never auto-created)
    if len(ctxs) == 1:  # a lone request (most at 1,000 partitions): no coroutine to step
        lone = _answer_lone(ctxs[0])
        if lone is not None:
            return [lone]
    step = handle_pipelined(ctxs)
    try:
        step.send(None)
    except StopIteration as done:
        answers: list[Any] = done.value
        return answers
    step.close()
    raise RuntimeError("a Produce request served now suspended (answer_now's check is stale)")


def _answer_lone(ctx: Context) -> Any:
    """:func:`handle_pipelined`'s answer to the one request ``ctx`` when it is the case
    :func:`strom.broker.produce.handle_each_now` serves (acks=1, one known partition, not
    transactional: the pass :func:`handle_pipelined` makes for it, as a plain call, without
    stepping its coroutine); None (nothing done) for any other request."""
    prepared = _prepare(ctx)
    if prepared.run_key is None or prepared.request.acks != 1:
        return None
    now = produce.handle_each_now(ctx.core, [prepared.request])
    return _answer_one(ctx, prepared, now[0]) if now else None


def _run_end(prepared: Sequence[_Prepared], i: int) -> int:
    """The end of the run of requests from ``i`` on with ``prepared[i]``'s run key (one
    partition, same acks and timeout); ``i + 1`` when it has none."""
    key = prepared[i].run_key
    j = i + 1
    while key is not None and j < len(prepared) and prepared[j].run_key == key:
        j += 1
    return j


def _turn_end(prepared: Sequence[_Prepared], i: int) -> int:
    """The end of the requests from ``i`` on the core serves in one pass: acks=1 (acks=0 is
    left out: a failed one closes the connection before the requests behind it are served),
    not transactional, each for one partition if ``prepared[i]`` is (else none), and none
    that starts a run of its own partition (appended together instead); ``i + 1`` when there
    is no such pass."""
    j = i
    one = prepared[i].run_key is not None
    while j < len(prepared) and prepared[j].request.acks == 1 \
            and not prepared[j].transactional and (prepared[j].run_key is not None) == one \
            and (j == i or _run_end(prepared, j) == j + 1):
        j += 1
    return max(j, i + 1)


def _prepare(ctx: Context) -> _Prepared:
    body: ProduceBody = ctx.body
    core = ctx.core
    by_id = None
    slots: list[_Slot] = []
    data: list[PartitionData] = []
    for name, topic_id, partitions in body.topics:
        error = None
        if name is None:
            if by_id is None:
                by_id = {topic_uuid(t.topic_id): n for n, t in core.metadata.topics().items()}
            name = by_id.get(topic_id, "") if topic_id is not None else ""
            if not name:
                error = StromError(ErrorCode.UNKNOWN_TOPIC_ID,
                                   f"topic id {topic_id} is unknown; refresh metadata")
        for partition, records in partitions:
            slots.append(_Slot(name, topic_id, partition, error))
            if error is None:
                data.append(PartitionData(name, partition, memoryview(records or b"")))
    transactional = body.transactional_id is not None
    run_key = None
    if not transactional and len(slots) == 1 and slots[0].error is None:
        run_key = (slots[0].topic, slots[0].partition, body.acks, body.timeout_ms)
    return _Prepared(slots, ProduceRequest(body.acks, body.timeout_ms, data), transactional,
                     run_key)


async def _serve(ctx: Context, prepared: _Prepared) -> Any:
    if prepared.transactional:
        return _answer(ctx, prepared, {}, StromError(
            ErrorCode.INVALID_REQUEST,
            "transactions are not supported; produce without a transactional.id"))
    try:
        answer: broker_pb2.ProduceResponse | StromError = await produce.handle(
            ctx.core, prepared.request)
    except StromError as err:
        answer = err
    return _answered(ctx, prepared, answer)


async def _serve_one(ctx: Context, prepared: _Prepared) -> Any:
    """:func:`_serve` of an acks 0/1 request for one known partition (``run_key`` set): served
    now by :func:`strom.broker.produce.handle_one_now` (no coroutine or protobuf response in
    the core), or by :func:`_serve` when that cannot serve it now (an auto-creation)."""
    try:
        out = produce.handle_one_now(ctx.core, prepared.request)
    except StromError as err:
        return _answer(ctx, prepared, {}, err)
    if out is None:
        return await _serve(ctx, prepared)
    return _answer_one(ctx, prepared, out)


def _answer_one(ctx: Context, prepared: _Prepared,
                out: produce.PartitionResult | StromError) -> Any:
    """:func:`_answer` to one request's outcome from the core's serving now: its partition's
    result, or the StromError that failed the whole request."""
    if isinstance(out, StromError):
        return _answer(ctx, prepared, {}, out)
    if not out.error_code and not out.error_message and prepared.request.acks \
            and prepared.slots[0].error is None:  # success: the templated answer at once
        encoded = _encoded(ctx, prepared.slots, out)
        if encoded is not None:
            return encoded
    return _answer(ctx, prepared, {(out.topic, out.partition): out}, None)


def _answered(ctx: Context, prepared: _Prepared,
              answer: broker_pb2.ProduceResponse | StromError) -> Any:
    """:func:`_answer` to the core's response, or to the StromError that failed the whole
    request."""
    if isinstance(answer, StromError):
        return _answer(ctx, prepared, {}, answer)
    return _answer(ctx, prepared, {(p.topic, p.partition): p for p in answer.partitions}, None)


def _answer(ctx: Context, prepared: _Prepared, results: dict[tuple[str, int], Any],
            whole: StromError | None) -> Any:
    """The response (a successful one-partition answer already encoded, as ``bytes``: see
    :func:`_encoded`), None for acks=0, or CloseConnection for a failed acks=0 request."""
    slots = prepared.slots
    failed = whole is not None or any(s.error is not None for s in slots) or any(
        p.error_code for p in results.values())
    if prepared.request.acks == 0:
        if failed:
            raise CloseConnection("an acks=0 produce failed")
        return None
    if not failed and len(slots) == 1:
        out = results.get((slots[0].topic, slots[0].partition))
        if out is not None and not out.error_message:
            encoded = _encoded(ctx, slots, out)
            if encoded is not None:
                return encoded
    return _response(ctx, slots, results, whole)


#: The encoded answers to successful one-partition requests, by everything but the integers
#: written into them (correlation id, partition index, base offset, log append time, log start
#: offset): (version, topic, topic id). Shared by every connection (the bytes depend on nothing
#: else). One template serves every partition of a topic: librdkafka sends one partition per
#: request, and a template per partition cost a kio encoding pair (~0.1 ms) on the first answer
#: of each of a fresh 1,000-partition topic, and cycled the cache at over 4,096 partitions.
_TEMPLATES: TemplateCache[ResponseTemplate] = TemplateCache()
#: The template's integers: partition index (int32), then base offset, log append time and log
#: start offset (int64; the last two absent in some versions).
_WIDTHS = (4, 8, 8, 8)


def _encoded(ctx: Context, slots: list[_Slot], out: Any) -> bytes | None:
    """The answer to a successful request for one partition (``slots``: its one slot; ``out``:
    its result, error code 0) as kio would encode it, made from a template: kio's generic
    response building and writing cost ~20-30 us a Produce answer here, the template's copy
    under 1 us (librdkafka at linger.ms=0 sends one request per record). None if the answer
    cannot be templated (the caller builds it)."""
    slot = slots[0]
    key = (ctx.version, slot.topic, slot.topic_id)
    try:
        template = _TEMPLATES[key]
    except KeyError:
        template = _TEMPLATES.make(key, lambda: ResponseTemplate(
            lambda values: _templated(ctx, slot, out, values), _WIDTHS))
    if template is None:
        return None
    return template.encode(ctx.request.correlation_id, slot.partition, out.base_offset,
                           out.log_append_time_ms, out.log_start_offset)


def _templated(ctx: Context, slot: _Slot, out: Any, values: list[int]) -> Any:
    """The successful one-partition response of ``slot``'s topic with ``values`` (partition
    index, base offset, log append time, log start offset) in place of ``out``'s."""
    partition, base_offset, append_time, log_start = values
    result = produce.PartitionResult(slot.topic, partition, 0, "", base_offset, append_time,
                                     log_start)
    return _response(ctx, [slot._replace(partition=partition)],
                     {(slot.topic, partition): result}, None)


def _response(ctx: Context, slots: list[_Slot], results: dict[tuple[str, int], Any],
              whole: StromError | None) -> Any:
    """The response: each slot's result, or its error."""
    topics: dict[tuple[str, uuid.UUID | None], list[Any]] = {}
    for slot in slots:
        err = whole or slot.error
        out = results.get((slot.topic, slot.partition))
        if err is not None or out is None:
            error = err or StromError(ErrorCode.UNKNOWN_SERVER_ERROR, "no result")
            part = ctx.build("PartitionProduceResponse", index=slot.partition,
                             error_code=code(int(error.code)), base_offset=-1,
                             log_append_time=None, log_start_offset=-1, record_errors=(),
                             error_message=error.message)
        else:
            part = ctx.build(
                "PartitionProduceResponse", index=slot.partition,
                error_code=code(out.error_code),
                base_offset=out.base_offset,
                log_append_time=(tz_aware_from_i64(out.log_append_time_ms)
                                 if out.log_append_time_ms >= 0 else None),
                log_start_offset=out.log_start_offset, record_errors=(),
                error_message=out.error_message or None)
        topics.setdefault((slot.topic, slot.topic_id), []).append(part)
    responses = tuple(ctx.build("TopicProduceResponse", name=name, topic_id=topic_id,
                                partition_responses=tuple(parts))
                      for (name, topic_id), parts in topics.items())
    return ctx.build("ProduceResponse", responses=responses, throttle_time=NO_THROTTLE)
