"""In-sync replica rules on the leader, pure (times in ms are passed in, no clocks read here).

Kafka's rules, from ``Replica.updateFetchState`` and ``Partition``:

- A follower is *caught up* at time T if its fetch at T asked for an offset >= the leader's log
  end offset at T, or >= the leader's log end offset at the time of its previous fetch (then it
  was caught up at that previous fetch's time): ``last_caught_up_ms``.
- The leader shrinks the ISR by every follower (never itself) that has not been caught up for
  ``replica.lag.time.max.ms`` and is not at the leader's log end offset right now.
- A follower outside the ISR joins once its log end offset is >= the high watermark and >= the
  offset where the leader's current epoch started (so it has every record of older epochs).
- The high watermark is the smallest log end offset over the *maximal* ISR (the committed ISR
  plus a pending expansion; a pending shrink still counts the leaving replica) and the leader;
  it never moves backwards. A follower whose log end offset is unknown since the leader's
  election holds it back until it fetches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

UNKNOWN_OFFSET = -1


@dataclass(frozen=True, slots=True)
class FollowerState:
    """What the leader knows about one follower, as of its last fetch."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_leader_end_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0


def reset(in_isr: bool, now_ms: int) -> FollowerState:
    """State of a follower when this broker becomes leader (Kafka ``resetReplicaState``)."""
    return FollowerState(last_caught_up_ms=now_ms if in_isr else 0)


def after_fetch(state: FollowerState, fetch_offset: int, leader_end_offset: int,
                now_ms: int) -> FollowerState:
    """The follower asked for ``fetch_offset`` at ``now_ms`` while the leader ended at
    ``leader_end_offset``."""
    if fetch_offset >= leader_end_offset:
        caught_up = max(state.last_caught_up_ms, now_ms)
    elif fetch_offset >= state.last_fetch_leader_end_offset >= 0:
        caught_up = max(state.last_caught_up_ms, state.last_fetch_ms)
    else:
        caught_up = state.last_caught_up_ms
    return replace(state, log_end_offset=fetch_offset, last_caught_up_ms=caught_up,
                   last_fetch_leader_end_offset=max(leader_end_offset,
                                                    state.last_fetch_leader_end_offset),
                   last_fetch_ms=now_ms)


def is_caught_up(state: FollowerState, leader_end_offset: int, now_ms: int,
                 lag_max_ms: int) -> bool:
    return (state.log_end_offset == leader_end_offset
            or now_ms - state.last_caught_up_ms <= lag_max_ms)


def out_of_sync(isr: Iterable[int], leader_id: int, states: Mapping[int, FollowerState],
                leader_end_offset: int, now_ms: int, lag_max_ms: int) -> list[int]:
    """Followers in ``isr`` that should leave it now (never the leader)."""
    out = []
    for replica in isr:
        if replica == leader_id:
            continue
        state = states.get(replica)
        if state is None or not is_caught_up(state, leader_end_offset, now_ms, lag_max_ms):
            out.append(replica)
    return out


def all_at_end(isr: Iterable[int], leader_id: int, states: Mapping[int, FollowerState],
               leader_end_offset: int) -> bool:
    """Every follower in ``isr`` is known to be at ``leader_end_offset``: none is out of sync
    at any time until one of these changes (``out_of_sync`` is then empty)."""
    for replica in isr:
        if replica == leader_id:
            continue
        state = states.get(replica)
        if state is None or state.log_end_offset != leader_end_offset:
            return False
    return True


def can_join(state: FollowerState, high_watermark: int, epoch_start_offset: int) -> bool:
    return (state.log_end_offset >= high_watermark
            and state.log_end_offset >= epoch_start_offset)


def maximal_isr(committed: Iterable[int], pending: Iterable[int] | None) -> set[int]:
    return set(committed) | set(pending or ())


def high_watermark(current: int, leader_id: int, leader_end_offset: int,
                   isr: Iterable[int], states: Mapping[int, FollowerState]) -> int:
    """The new high watermark: min log end offset over ``isr`` and the leader; never lower than
    ``current``. ``isr`` should be the maximal ISR."""
    candidate = leader_end_offset
    for replica in isr:
        if replica == leader_id:
            continue
        state = states.get(replica)
        leo = state.log_end_offset if state is not None else UNKNOWN_OFFSET
        candidate = min(candidate, leo)
    return max(current, candidate)
