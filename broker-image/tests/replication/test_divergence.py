"""Divergence (KIP-320/595) on both sides, with Kafka's cases, without logs or sockets."""

from __future__ import annotations

import pytest

from strom.replication.divergence import (
    StaleLeader,
    end_offset_for,
    find_divergence,
    truncation_offset,
    with_current_epoch,
)

LEADER = [(0, 0), (2, 10), (4, 20)]  # epochs 0 (0..9), 2 (10..19), 4 (20..)


@pytest.mark.parametrize(("epoch", "expected"), [
    (-1, (-1, -1)),   # undefined
    (4, (4, 30)),     # latest: log end offset
    (2, (2, 20)),     # ends where the next epoch starts
    (3, (2, 20)),     # unknown in between: the largest epoch below it
    (0, (0, 10)),
    (5, (-1, -1)),    # newer than anything known
])
def test_end_offset_for(epoch: int, expected: tuple[int, int]) -> None:
    assert end_offset_for(LEADER, 30, epoch) == expected


def test_end_offset_for_epoch_older_than_all_and_empty_history() -> None:
    assert end_offset_for([(3, 5), (6, 9)], 12, 1) == (1, 5)
    assert end_offset_for([], 0, 1) == (-1, -1)


def test_follower_in_step_does_not_diverge() -> None:
    assert find_divergence(LEADER, 30, 4, 25) is None
    assert find_divergence(LEADER, 30, 4, 30) is None
    assert find_divergence(LEADER, 30, 2, 20) is None  # at the end of epoch 2 exactly


def test_follower_ahead_in_an_old_epoch() -> None:
    # The follower has epoch 2 up to 25, but the leader ended epoch 2 at 20.
    assert find_divergence(LEADER, 30, 2, 25) == (2, 20)


def test_follower_epoch_unknown_to_leader() -> None:
    # Follower's last epoch 3 never existed on the leader: largest below is 2, ended at 20.
    assert find_divergence(LEADER, 30, 3, 22) == (2, 20)
    assert find_divergence(LEADER, 30, 3, 20) == (2, 20)  # epoch 3 itself is unknown


def test_follower_beyond_leader_end_in_current_epoch() -> None:
    assert find_divergence(LEADER, 30, 4, 33) == (4, 30)


def test_empty_follower_never_diverges() -> None:
    assert find_divergence(LEADER, 30, -1, 0) is None
    assert find_divergence(LEADER, 30, -1, 40) is None


def test_empty_leader_history_leaves_it_to_offsets() -> None:
    assert find_divergence([], 0, -1, 0) is None


def test_follower_newer_than_leader_means_stale_leader() -> None:
    with pytest.raises(StaleLeader):
        find_divergence(LEADER, 30, 7, 40)


def test_current_epoch_added_at_election_offset() -> None:
    # New leader in epoch 6 at offset 25, nothing appended yet.
    entries = with_current_epoch([(0, 0), (4, 20)], 6, 25)
    assert entries == [(0, 0), (4, 20), (6, 25)]
    # Follower A led epoch 5 (unknown to the new leader) and wrote 25..29: diverges at 25.
    assert find_divergence(entries, 25, 5, 30) == (4, 25)
    assert with_current_epoch(entries, 6, 25) == entries  # already there


def test_truncation_follower_knows_the_epoch() -> None:
    follower = [(0, 0), (2, 10)]  # it wrote epoch 2 up to 25
    assert truncation_offset(follower, 25, 2, 20) == 20


def test_truncation_follower_lacks_the_epoch_then_converges() -> None:
    follower = [(0, 0), (1, 8), (3, 12)]   # leader: epochs 0 (0..9), 2 (10..19), 4 (20..24)
    leader = LEADER
    first = find_divergence(leader, 25, 3, 15)
    assert first == (2, 20)
    cut = truncation_offset(follower, 15, *first)   # no epoch 2 here: end of epoch 1 = 12
    assert cut == 12
    follower2 = [(0, 0), (1, 8)]
    second = find_divergence(leader, 25, 1, cut)   # leader's largest <= 1 is 0, ended at 10
    assert second == (0, 10)
    cut2 = truncation_offset(follower2, cut, *second)
    assert cut2 == 8   # end of follower's epoch 0
    assert find_divergence(leader, 25, 0, cut2) is None


def test_truncation_never_beyond_own_end() -> None:
    assert truncation_offset([(0, 0)], 5, 0, 9) == 5
