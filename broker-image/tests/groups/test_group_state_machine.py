"""The group state machine's transition table: Kafka's ``ClassicGroupState`` transitions, and a
move outside them raises instead of silently putting the group in an unreachable state."""

from __future__ import annotations

import itertools

import pytest

from strom.groups.membership import (
    VALID_PREVIOUS_STATES,
    Group,
    GroupConfig,
    GroupState,
    IllegalStateTransition,
)

S = GroupState

#: Kafka's ClassicGroupState (PreparingRebalance <- Stable, CompletingRebalance, Empty; ...).
KAFKA = {
    (S.PREPARING_REBALANCE, S.EMPTY), (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.STABLE, S.PREPARING_REBALANCE), (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.EMPTY, S.PREPARING_REBALANCE), (S.COMPLETING_REBALANCE, S.STABLE),
    *((state, S.DEAD) for state in S),
}


def _group_in(state: GroupState) -> Group:
    group = Group("g", GroupConfig(), new_member_id=lambda client: f"{client}-1")
    group.state = state
    return group


@pytest.mark.parametrize("old,new", [(a, b) for a, b in itertools.product(S, S) if a != b])
def test_only_kafkas_transitions_are_allowed(old: GroupState, new: GroupState) -> None:
    group = _group_in(old)
    if (old, new) in KAFKA:
        group._set_state(new)
        assert group.state is new
    else:
        with pytest.raises(IllegalStateTransition, match=f"{old.value} -> {new.value}"):
            group._set_state(new)
        assert group.state is old


def test_the_table_is_kafkas() -> None:
    table = {(old, new) for new, olds in VALID_PREVIOUS_STATES.items() for old in olds}
    assert table - {(s, s) for s in S} == KAFKA - {(s, s) for s in S}
