"""RecordFuture: lazy per-record futures backed by one batch, compatible with concurrent.futures."""

from __future__ import annotations

import concurrent.futures as cf
import threading

import pytest

from strom.client.models import RecordMetadata, TopicPartition
from strom.client.producer_batch import ProducerBatch, RecordFuture
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import BatchBuilder, Compression


def _batch() -> ProducerBatch:
    return ProducerBatch(TopicPartition("t", 2), BatchBuilder(Compression.NONE, 1 << 16), 0, 0)


def test_result_after_completion() -> None:
    batch = _batch()
    futures = [RecordFuture(batch, i, 1000 + i, 1, 10) for i in range(3)]
    assert not any(f.done() for f in futures)
    batch.complete(base_offset=40)
    assert all(f.done() for f in futures)
    assert futures[2].result() == RecordMetadata("t", 2, 42, 1002, 1, 10)
    assert futures[0].exception() is None


def test_log_append_time_replaces_timestamp() -> None:
    batch = _batch()
    f = RecordFuture(batch, 0, 5, 0, 0)
    batch.complete(base_offset=0, log_append_time=777)
    assert f.result().timestamp == 777


def test_error_propagates() -> None:
    batch = _batch()
    f = RecordFuture(batch, 0, 0, 0, 0)
    batch.complete(-1, error=StromError(ErrorCode.INVALID_RECORD, "bad"))
    with pytest.raises(StromError) as info:
        f.result()
    assert info.value.code is ErrorCode.INVALID_RECORD
    assert isinstance(f.exception(), StromError)


def test_result_timeout_and_blocking_wait() -> None:
    batch = _batch()
    f = RecordFuture(batch, 0, 0, 0, 0)
    with pytest.raises(TimeoutError):
        f.result(timeout=0.01)
    threading.Timer(0.05, lambda: batch.complete(7)).start()
    assert f.result(timeout=5).offset == 7


def test_wait_as_completed_and_callbacks() -> None:
    b1, b2 = _batch(), _batch()
    f1, f2, f3 = RecordFuture(b1, 0, 0, 0, 0), RecordFuture(b1, 1, 0, 0, 0), RecordFuture(
        b2, 0, 0, 0, 0)
    called: list[int] = []
    f1.add_done_callback(lambda f: called.append(f.result().offset))
    threading.Timer(0.05, lambda: b1.complete(10)).start()
    done, not_done = cf.wait([f1, f2, f3], timeout=5, return_when=cf.FIRST_COMPLETED)
    assert done == {f1, f2} and not_done == {f3}
    assert called == [10]
    b2.complete(0)
    futures: list[cf.Future[RecordMetadata]] = [f1, f2, f3]
    assert set(cf.as_completed(futures, timeout=5)) == {f1, f2, f3}
    late: list[bool] = []
    f3.add_done_callback(lambda f: late.append(f.done()))
    assert late == [True]
    assert not f1.cancel()


def test_on_delivery_callbacks() -> None:
    batch = _batch()
    got: list[tuple[RecordMetadata | None, BaseException | None]] = []
    batch.add_callback(1, 5, 0, 3, lambda md, err: got.append((md, err)))
    batch.complete(100)
    assert got == [(RecordMetadata("t", 2, 101, 5, 0, 3), None)]
