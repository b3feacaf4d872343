"""One producer batch and the per-record futures that point into it.

Completion is per batch (one Produce answer per batch), so the per-record cost of ``send()`` must
not include a full ``concurrent.futures.Future`` (its ``threading.Condition`` alone is ~1 µs).
``RecordFuture`` is a real ``Future`` subclass — ``wait()``/``as_completed()``/callbacks work — but
all records of a batch share the batch's condition, and its ``RecordMetadata`` is built only when
asked for (kafka-python and librdkafka do the same: per-batch completion, lazy record metadata).
The sender completes a whole batch under the shared condition and notifies once. The condition
itself is made only when a future is first waited on or watched: most batches' futures never
are, and a ``threading.Condition`` per batch was a tenth of the sender's CPU with a thousand
partitions of small batches (issue 21).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures._base import FINISHED, PENDING
from typing import Any

from strom.client.models import RecordMetadata, TopicPartition, record_metadata
from strom.protocol.records import BatchBuilder

DeliveryCallback = Callable[[RecordMetadata | None, BaseException | None], None]

#: Makes a batch's condition at most once when two threads ask for it together.
_CONDITION_LOCK = threading.Lock()


class RecordFuture(Future[RecordMetadata]):
    """The future ``Producer.send`` returns: resolved when the record's batch is acknowledged.

    Its state is read from the batch (``_state``/``_exception``/``_condition`` are properties), so
    the batch keeps no list of its records' futures: a future the caller drops is freed at once,
    and completing a batch costs one lock and one notify however many records it holds. Only
    futures that get waiters (``concurrent.futures.wait``) or done-callbacks register with the
    batch, under its condition.
    """

    _result = None  # never read: result() builds the RecordMetadata from the batch

    def __init__(self, batch: ProducerBatch, index: int, timestamp: int, key_size: int,
                 value_size: int) -> None:  # deliberately not calling Future.__init__ (see module)
        self._meta = (batch, index, timestamp, key_size, value_size)

    # The attributes Future's own methods (and wait()/as_completed()) use, derived from the batch.
    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        return self._meta[0].waitable()

    @property
    def _state(self) -> str:  # type: ignore[override]
        return FINISHED if self._meta[0].done else PENDING

    @property
    def _exception(self) -> BaseException | None:  # type: ignore[override]
        return self._meta[0].error

    @property
    def _waiters(self) -> list[Any]:  # type: ignore[override]
        return self._watch()[0]

    @property
    def _done_callbacks(self) -> list[Callable[[Future[RecordMetadata]], object]]:
        return self._watch()[1]

    def _watch(self) -> tuple[list[Any], list[Callable[[Future[RecordMetadata]], object]]]:
        w: tuple[list[Any], list[Callable[[Future[RecordMetadata]], object]]] | None = \
            self.__dict__.get("_w")
        if w is None:
            batch = self._meta[0]
            with batch.waitable():
                w = self.__dict__["_w"] = ([], [])
                if batch.watched is None:
                    batch.watched = []
                batch.watched.append(self)
        return w

    def add_done_callback(self, fn: Callable[[Future[RecordMetadata]], object]) -> None:
        batch = self._meta[0]
        with batch.waitable():
            if not batch.done:
                self._done_callbacks.append(fn)
                return
        _safe(fn, self)

    def result(self, timeout: float | None = None) -> RecordMetadata:
        super().result(timeout)  # waits on the batch's condition; raises the batch's error
        batch, index, timestamp, key_size, value_size = self._meta
        return batch.record_metadata(index, timestamp, key_size, value_size)

    def cancel(self) -> bool:
        return False  # once handed to the producer a record cannot be taken back (as in Kafka)

    def running(self) -> bool:
        return not self._meta[0].done

    def __repr__(self) -> str:
        batch = self._meta[0]
        return f"<RecordFuture {batch.tp} #{self._meta[1]} {'done' if batch.done else 'pending'}>"


class ProducerBatch:
    """Records for one partition, sent (and possibly retried) as one RecordBatch v2."""

    __slots__ = (
        "acks_zero", "async_futures", "attempts", "base_offset", "base_sequence", "builder",
        "callbacks", "condition", "created_ms", "data", "done", "error", "failed_leader",
        "full", "last_error", "log_append_time", "producer_epoch", "producer_id", "reserved",
        "restamp", "retry_at_ms", "tp", "watched",
    )

    def __init__(self, tp: TopicPartition, builder: BatchBuilder, created_ms: float,
                 reserved: int) -> None:
        self.tp = tp
        self.builder = builder
        self.created_ms = created_ms
        self.reserved = reserved  # bytes of buffer_memory held until completion
        #: made by ``waitable()`` once a future waits (reentrant: wait() locks futures one by one)
        self.condition: threading.Condition | None = None
        self.watched: list[RecordFuture] | None = None  # futures with waiters or callbacks
        # the async producer's: (index, timestamp, key_size, value_size, asyncio.Future)
        self.async_futures: list[tuple[int, int, int, int, Any]] | None = None
        self.callbacks: list[tuple[int, int, int, int, DeliveryCallback]] | None = None
        self.data: bytes | bytearray | None = None  # set when closed; never modified after
        self.full = False
        self.attempts = 0
        self.retry_at_ms = 0.0
        #: the broker the last failed attempt went to: a batch skips its backoff once
        #: the metadata names another leader (Kafka's KIP-951)
        self.failed_leader = -1
        self.last_error: Exception | None = None  # of the last failed attempt, for expiry
        self.done = False
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self.acks_zero = False
        # idempotence: set once when first drained, kept by retries (the broker de-duplicates)
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.restamp = False  # refused unwritten: resend under the producer's new epoch

    def waitable(self) -> threading.Condition:
        """The condition futures wait on, made on first use. ``complete()`` sets ``done`` before
        it looks for the condition, so a waiter that makes it too late for the notify finds
        ``done`` already set when it checks under it."""
        cond = self.condition
        if cond is None:
            with _CONDITION_LOCK:
                cond = self.condition
                if cond is None:
                    cond = self.condition = threading.Condition()
        return cond

    @property
    def record_count(self) -> int:
        return len(self.builder)

    def close(self) -> bytes | bytearray:
        """Freeze the batch into bytes (idempotent: retries resend the same bytes)."""
        if self.data is None:
            self.data = self.builder.build_buffer()
            self.full = True
        return self.data

    def record_metadata(self, index: int, timestamp: int, key_size: int,
                        value_size: int) -> RecordMetadata:
        offset = -1 if self.acks_zero or self.base_offset < 0 else self.base_offset + index
        ts = self.log_append_time if self.log_append_time >= 0 else timestamp
        return record_metadata(self.tp.topic, self.tp.partition, offset, ts, key_size, value_size)

    def add_callback(self, index: int, timestamp: int, key_size: int, value_size: int,
                     callback: DeliveryCallback) -> None:
        if self.callbacks is None:
            self.callbacks = []
        self.callbacks.append((index, timestamp, key_size, value_size, callback))

    def complete(self, base_offset: int, log_append_time: int = -1,
                 error: BaseException | None = None) -> None:
        """Resolve every record of the batch: one lock, one notify, then callbacks."""
        if self.done:
            return
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.error = error
        self.done = True
        cond = self.condition
        watched = None
        if cond is not None:
            with cond:
                watched = self.watched
                cond.notify_all()
        if watched:
            for f in watched:
                waiters, callbacks = f._watch()
                for waiter in waiters:
                    if error is None:
                        waiter.add_result(f)
                    else:
                        waiter.add_exception(f)
                for cb in callbacks:
                    _safe(cb, f)
        if self.async_futures:
            self._complete_async(self.async_futures, error)
        if self.callbacks:
            for index, ts, ks, vs, callback in self.callbacks:
                if error is None:
                    _safe(callback, self.record_metadata(index, ts, ks, vs), None)
                else:
                    _safe(callback, None, error)

    def _complete_async(self, futures: list[tuple[int, int, int, int, Any]],
                        error: BaseException | None) -> None:
        for index, ts, ks, vs, f in futures:
            if f.done():
                continue
            if error is not None:
                f.set_exception(error)
            else:
                f.set_result(self.record_metadata(index, ts, ks, vs))


def _safe(fn: Callable[..., object], *args: object) -> None:
    try:
        fn(*args)
    except Exception:  # a user's callback must not kill the sender
        import logging

        logging.getLogger("strom.client.producer").exception("delivery callback raised")
