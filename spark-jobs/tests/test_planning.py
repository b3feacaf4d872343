"""Partition selection, offset resolution, rate limiting, splitting and data-loss decisions."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom_spark.errors import StromDataLossError, StromOptionError, StromTopicError
from strom_spark.offsets import TopicPartition as TP
from strom_spark.options import EARLIEST_SPEC, LATEST_SPEC, OffsetSpec, Subscription
from strom_spark.planning import (
    OffsetRange,
    find_data_loss,
    next_end_offsets,
    plan_ranges,
    raise_on_data_loss,
    rate_limit,
    resolve_offsets,
    select_partitions,
    split_ranges,
    timestamps_to_look_up,
)

COUNTS = {"a": 2, "b": 1, "sensor-1": 1, "sensor-2": 3, "__consumer_offsets": 5}


def test_select_subscribe_pattern_assign() -> None:
    assert select_partitions(Subscription("subscribe", topics=("a", "b")), COUNTS) == [
        TP("a", 0), TP("a", 1), TP("b", 0)]
    pat = select_partitions(Subscription("subscribePattern", pattern="sensor-.*|__.*"), COUNTS)
    assert pat == [TP("sensor-1", 0)] + [TP("sensor-2", p) for p in range(3)]  # no internal
    assert select_partitions(Subscription("assign", assigned=(TP("a", 1),)), COUNTS) == [TP("a", 1)]


def test_missing_topic_is_named() -> None:
    with pytest.raises(StromTopicError, match="'nope' of option subscribe do not exist"):
        select_partitions(Subscription("subscribe", topics=("a", "nope")), COUNTS)
    with pytest.raises(StromTopicError, match="assign names a-5, but topic 'a' has only 2"):
        select_partitions(Subscription("assign", assigned=(TP("a", 5),)), COUNTS)
    # later micro-batches are lenient: the data-loss check reports what vanished
    assert select_partitions(Subscription("subscribe", topics=("nope",)), COUNTS,
                             strict=False) == []


EARLY = {TP("t", 0): 10, TP("t", 1): 0}
LATE = {TP("t", 0): 100, TP("t", 1): 50}


def test_resolve_earliest_latest_and_explicit() -> None:
    assert resolve_offsets(EARLIEST_SPEC, EARLY, EARLY, LATE) == EARLY
    assert resolve_offsets(LATEST_SPEC, EARLY, EARLY, LATE) == LATE
    spec = OffsetSpec("offsets", offsets=((TP("t", 0), -2), (TP("t", 1), 20)))
    assert resolve_offsets(spec, EARLY, EARLY, LATE) == {TP("t", 0): 10, TP("t", 1): 20}
    spec = OffsetSpec("offsets", offsets=((TP("t", 0), -1), (TP("t", 1), -2)))
    assert resolve_offsets(spec, EARLY, EARLY, LATE) == {TP("t", 0): 100, TP("t", 1): 0}


def test_explicit_offsets_must_cover_and_exist() -> None:
    with pytest.raises(StromOptionError, match="not for t-1"):
        resolve_offsets(OffsetSpec("offsets", offsets=((TP("t", 0), 1),)), EARLY, EARLY, LATE)
    with pytest.raises(StromTopicError, match="t-7"):
        resolve_offsets(OffsetSpec("offsets", offsets=((TP("t", 0), 1), (TP("t", 1), 1),
                                                        (TP("t", 7), 1))), EARLY, EARLY, LATE)
    with pytest.raises(StromOptionError, match="endingOffsets: offset 500 for t-1 is beyond"):
        resolve_offsets(OffsetSpec("offsets", offsets=((TP("t", 0), 1), (TP("t", 1), 500))),
                        EARLY, EARLY, LATE, option="endingOffsets")


def test_resolve_timestamps() -> None:
    spec = OffsetSpec("timestamp", timestamp=1000)
    assert timestamps_to_look_up(spec, EARLY) == {TP("t", 0): 1000, TP("t", 1): 1000}
    found = {TP("t", 0): 42, TP("t", 1): None}
    with pytest.raises(StromOptionError, match="t-1 has no record with a timestamp >= 1000"):
        resolve_offsets(spec, EARLY, EARLY, LATE, found)
    assert resolve_offsets(spec, EARLY, EARLY, LATE, found, timestamp_strategy="latest") == {
        TP("t", 0): 42, TP("t", 1): 50}


def test_data_loss_detection_and_error_message() -> None:
    start = {TP("t", 0): 5, TP("t", 1): 60, TP("gone", 0): 3}
    losses = find_data_loss(start, EARLY, LATE)
    assert [loss.tp for loss in losses] == [TP("gone", 0), TP("t", 0), TP("t", 1)]
    with pytest.raises(StromDataLossError) as err:
        raise_on_data_loss(losses, True)
    text = str(err.value)
    assert "t-0 offset 5: offsets [5, 10) were deleted" in text
    assert "gone-0 offset 3: the partition no longer exists" in text
    assert "failOnDataLoss=false" in text
    raise_on_data_loss(losses, False)  # no error: skipped with a warning by the caller
    assert find_data_loss({TP("t", 0): 10}, EARLY, LATE) == []


def test_next_end_introduces_new_partitions_at_earliest() -> None:
    start = {TP("t", 0): 20}
    end = next_end_offsets(start, EARLY, LATE, None)
    assert end == {TP("t", 0): 100, TP("t", 1): 0}
    # the new partition is read from the next micro-batch on
    assert plan_ranges(start, end) == [OffsetRange("t", 0, 20, 100)]
    assert plan_ranges(end, next_end_offsets(end, EARLY, LATE, None)) == [
        OffsetRange("t", 1, 0, 50)]


def test_next_end_with_nothing_new_returns_start() -> None:
    assert next_end_offsets(LATE, EARLY, LATE, 10) == LATE


def test_next_end_clamps_deleted_and_drops_vanished() -> None:
    start = {TP("t", 0): 0, TP("t", 1): 50, TP("gone", 0): 9}
    end = next_end_offsets(start, EARLY, LATE, 30)
    # t-0 backlog counted from the log start (10), not from the deleted offset 0
    assert end == {TP("t", 0): 40, TP("t", 1): 50}


def test_rate_limit_is_proportional_and_exact() -> None:
    avail = {TP("t", 0): (0, 300), TP("t", 1): (0, 100), TP("t", 2): (5, 5 + 600)}
    end = rate_limit(avail, 100)
    assert end == {TP("t", 0): 30, TP("t", 1): 10, TP("t", 2): 65}
    # limit below the partition count still makes progress, never more than the limit
    end = rate_limit(avail, 1)
    assert sum(end[tp] - avail[tp][0] for tp in avail) == 1


@given(
    st.lists(st.integers(0, 10_000), min_size=1, max_size=8),
    st.integers(1, 5_000),
)
def test_rate_limit_properties(sizes: list[int], limit: int) -> None:
    avail = {TP("t", i): (1000, 1000 + s) for i, s in enumerate(sizes)}
    end = rate_limit(avail, limit)
    taken = {tp: end[tp] - avail[tp][0] for tp in avail}
    assert sum(taken.values()) == min(limit, sum(sizes))
    assert all(0 <= taken[tp] <= sizes[tp.partition] for tp in avail)


def test_split_ranges_like_kafka_min_partitions() -> None:
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 0, 100)]
    assert split_ranges(ranges, None) == ranges
    assert split_ranges(ranges, 2) == ranges
    out = split_ranges(ranges, 11)
    assert [(r.partition, r.start, r.end) for r in out if r.partition == 1] == [(1, 0, 100)]
    assert len([r for r in out if r.partition == 0]) == 10
    assert out[0] == OffsetRange("t", 0, 0, 100)


@given(
    st.lists(st.integers(0, 5_000), min_size=1, max_size=6),
    st.integers(1, 64),
)
def test_split_ranges_cover_exactly(sizes: list[int], min_parts: int) -> None:
    ranges = [OffsetRange("t", i, 7, 7 + s) for i, s in enumerate(sizes) if s > 0]
    out = split_ranges(ranges, min_parts)
    for r in ranges:
        pieces = [p for p in out if p.partition == r.partition]
        assert pieces[0].start == r.start and pieces[-1].end == r.end
        assert all(a.end == b.start for a, b in itertools.pairwise(pieces))
        assert all(p.size > 0 for p in pieces)
