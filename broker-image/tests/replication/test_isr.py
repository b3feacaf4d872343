"""ISR and high watermark rules with a fake clock (Kafka's lastCaughtUpTimeMs)."""

from __future__ import annotations

from strom.replication import isr
from strom.replication.isr import FollowerState

LAG = 10_000


def test_fetch_at_leader_end_is_caught_up_now() -> None:
    s = isr.after_fetch(FollowerState(), fetch_offset=100, leader_end_offset=100, now_ms=5_000)
    assert s.last_caught_up_ms == 5_000 and s.log_end_offset == 100


def test_fetch_reaching_previous_leader_end_is_caught_up_at_previous_fetch() -> None:
    s = isr.after_fetch(FollowerState(), fetch_offset=50, leader_end_offset=100, now_ms=1_000)
    assert s.last_caught_up_ms == 0
    s = isr.after_fetch(s, fetch_offset=100, leader_end_offset=150, now_ms=2_000)
    assert s.last_caught_up_ms == 1_000  # it had, at 2 s, what the leader had at 1 s
    s = isr.after_fetch(s, fetch_offset=120, leader_end_offset=200, now_ms=3_000)
    assert s.last_caught_up_ms == 1_000  # 120 < 150: not caught up with the 2 s fetch


def test_shrink_after_lag_time_never_the_leader() -> None:
    states = {1: isr.reset(True, 0), 2: isr.reset(True, 0)}
    states[2] = isr.after_fetch(states[2], 100, 100, 9_000)
    assert isr.out_of_sync((0, 1, 2), 0, states, 100, LAG, LAG) == []
    assert isr.out_of_sync((0, 1, 2), 0, states, 100, LAG + 1, LAG) == [1]
    assert isr.out_of_sync((0, 1, 2), 0, {}, 100, 0, LAG) == [1, 2]


def test_follower_at_leader_end_stays_even_if_old() -> None:
    s = isr.after_fetch(FollowerState(), 100, 100, 0)
    assert isr.is_caught_up(s, 100, 60_000, LAG)
    assert not isr.is_caught_up(s, 101, 60_000, LAG)


def test_join_needs_high_watermark_and_epoch_start() -> None:
    s = isr.after_fetch(FollowerState(), 40, 50, 0)
    assert not isr.can_join(s, high_watermark=45, epoch_start_offset=30)
    assert isr.can_join(s, high_watermark=40, epoch_start_offset=30)
    assert not isr.can_join(s, high_watermark=40, epoch_start_offset=41)


def test_high_watermark_min_over_isr_and_never_backwards() -> None:
    states = {1: isr.after_fetch(FollowerState(), 70, 100, 0),
              2: isr.after_fetch(FollowerState(), 40, 100, 0)}
    assert isr.high_watermark(0, 0, 100, {0, 1}, states) == 70
    assert isr.high_watermark(0, 0, 100, {0, 1, 2}, states) == 40
    assert isr.high_watermark(80, 0, 100, {0, 1, 2}, states) == 80  # never backwards
    assert isr.high_watermark(0, 0, 100, {0}, states) == 100        # leader alone


def test_unknown_follower_position_holds_the_high_watermark() -> None:
    states = {1: isr.reset(True, 0)}
    assert isr.high_watermark(10, 0, 100, {0, 1}, states) == 10


def test_maximal_isr_counts_pending_changes() -> None:
    assert isr.maximal_isr((0, 1), (0, 1, 2)) == {0, 1, 2}   # pending expand
    assert isr.maximal_isr((0, 1, 2), (0, 1)) == {0, 1, 2}   # pending shrink: still counted
    assert isr.maximal_isr((0, 1), None) == {0, 1}
