"""Fetch sessions (KIP-227) as a pure cache: Kafka's rules for opening, using, closing and
refusing sessions, and which partitions an incremental answer carries."""

from __future__ import annotations

from strom.broker.fetch_sessions import FetchSessionCache, Wanted
from strom.protocol.errors import ErrorCode

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def _open(cache: FetchSessionCache) -> int:
    plan = cache.plan(0, 0, [(A0, Wanted(0, 100)), (A1, Wanted(5, 100))], [], {})
    assert plan.session is not None and not plan.incremental
    assert [tp for tp, _ in plan.partitions] == [A0, A1]
    return plan.session.session_id


def test_a_full_fetch_with_epoch_0_opens_a_session_and_epoch_minus_1_does_not() -> None:
    cache = FetchSessionCache(seed=1)
    assert _open(cache) > 0 and len(cache) == 1
    sessionless = cache.plan(0, -1, [(A0, Wanted(0, 100))], [], {})
    assert sessionless.session is None and sessionless.error is None and len(cache) == 1


def test_incremental_fetches_update_add_forget_and_read_the_whole_session() -> None:
    cache = FetchSessionCache(seed=1)
    sid = _open(cache)
    plan = cache.plan(sid, 1, [(A0, Wanted(7, 100)), (B0, Wanted(0, 50))], [A1], {})
    assert plan.incremental and plan.error is None
    assert [(tp, w.fetch_offset) for tp, w in plan.partitions] == [(A0, 7), (B0, 0)]
    nothing = cache.plan(sid, 2, [], [], {})
    assert [tp for tp, _ in nothing.partitions] == [A0, B0]


def test_unknown_sessions_and_wrong_epochs_are_refused_as_kafka_does() -> None:
    cache = FetchSessionCache(seed=1)
    sid = _open(cache)
    assert cache.plan(sid + 1, 1, [], [], {}).error is ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.plan(sid, 2, [], [], {}).error is ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert cache.plan(0, 3, [], [], {}).error is ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert cache.plan(sid, 1, [], [], {}).error is None  # the epoch still expected
    closed = cache.plan(sid, -1, [(A0, Wanted(0, 1))], [], {})  # close, then sessionless
    assert closed.session is None and len(cache) == 0
    assert cache.plan(sid, 2, [], [], {}).error is ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_a_full_cache_evicts_the_least_recently_used_session() -> None:
    cache = FetchSessionCache(slots=2, seed=1)
    first, second = _open(cache), _open(cache)
    assert cache.plan(first, 1, [], [], {}).error is None  # first is now the most recent
    _open(cache)
    assert cache.plan(second, 1, [], [], {}).error is ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.plan(first, 2, [], [], {}).error is None


def test_an_incremental_answer_carries_only_partitions_with_news() -> None:
    cache = FetchSessionCache(seed=1)
    plan = cache.plan(0, 0, [(A0, Wanted(0, 100))], [], {})
    session = plan.session
    assert session is not None
    assert session.changed(A0, 0, 0, 10, 0)       # first answer: everything is news
    assert not session.changed(A0, 0, 0, 10, 0)   # nothing new
    assert session.changed(A0, 0, 120, 10, 0)     # records
    assert session.changed(A0, 0, 0, 11, 0)       # the high watermark moved
    assert session.changed(A0, 0, 0, 11, 3)       # the log start offset moved
    assert session.changed(A0, 6, 0, -1, -1)      # an error, every time
    assert session.changed(A0, 6, 0, -1, -1)
