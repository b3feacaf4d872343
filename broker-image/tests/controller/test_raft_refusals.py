"""Peer requests that must never reach the Raft state machine, and requests a leader refuses
instead of crashing: a non-voter (or this node's own id) carrying the leader's term, entries
that do not follow their predecessor, a second leader in one term, a rewrite of a committed entry.
Before these checks one such AppendEntries raised AssertionError in the Raft loop and left a
zombie controller."""

from __future__ import annotations

from strom.controller.messages import (
    AppendEntries,
    AppendEntriesResponse,
    InstallSnapshot,
    LogEntry,
)
from strom.controller.raft import RaftConfig, RaftNode, Send
from strom.controller.raftlog import MemoryRaftLog

from .test_raft_scenarios import Net


def _leader_of_three() -> tuple[Net, RaftNode]:
    net = Net([1, 2, 3])
    net.timeout(1)
    net.flush()
    assert net.leader() == 1
    net.propose(1, b"x")
    net.flush()
    return net, net.nodes[1]


def test_non_voter_and_self_are_refused_and_change_nothing() -> None:
    _, leader = _leader_of_three()
    term, last = leader.term, leader.last_index
    for sender in (7, 1):
        bad = AppendEntries(sender, term, last, term, (), last)
        assert leader.refusal(bad) is not None
        assert leader.receive(bad) == []
        snap = InstallSnapshot(sender, term + 5, 100, term + 5, b"{}")
        assert leader.refusal(snap) is not None
        assert leader.receive(snap) == []
    assert "not a voter" in (leader.refusal(AppendEntries(7, term, 0, 0, (), 0)) or "")
    assert leader.is_leader and leader.term == term and leader.last_index == last


def test_entries_that_do_not_follow_are_refused() -> None:
    _, leader = _leader_of_three()
    t = leader.term
    gap = AppendEntries(2, t, 5, t, (LogEntry(t, 7, b"a"),), 0)
    assert "does not follow" in (leader.refusal(gap) or "")
    future = AppendEntries(2, t, 5, t, (LogEntry(t + 1, 6, b"a"),), 0)
    assert leader.refusal(future) is not None
    backwards = AppendEntries(2, t, 5, t, (LogEntry(t, 6, b"a"), LogEntry(t - 1, 7, b"b")), 0)
    assert leader.refusal(backwards) is not None
    good = AppendEntries(2, t, 5, t, (LogEntry(t, 6, b"a"), LogEntry(t, 7, b"b")), 0)
    assert leader.refusal(good) is None


def test_second_leader_in_the_same_term_is_refused_not_fatal() -> None:
    _, leader = _leader_of_three()
    term, last = leader.term, leader.last_index
    actions = leader.receive(AppendEntries(2, term, last, term, (), last))
    replies = [a.message for a in actions if isinstance(a, Send)]
    assert len(replies) == 1
    reply = replies[0]
    assert isinstance(reply, AppendEntriesResponse) and not reply.success
    assert leader.is_leader and leader.term == term
    snap = leader.receive(InstallSnapshot(3, term, 50, term, b"{}"))
    assert leader.is_leader and any(isinstance(a, Send) for a in snap)


def test_rewriting_a_committed_entry_is_refused() -> None:
    net, leader = _leader_of_three()
    follower = net.nodes[2]
    committed = follower.commit_index
    assert committed >= 1
    old_term = follower.term_at(committed)
    assert old_term is not None
    new_term = leader.term + 1
    rewrite = AppendEntries(3, new_term, committed - 1, follower.term_at(committed - 1) or 0,
                            (LogEntry(new_term, committed, b"evil"),), committed)
    actions = follower.receive(rewrite)
    replies = [a.message for a in actions if isinstance(a, Send)]
    assert replies and isinstance(replies[0], AppendEntriesResponse) and not replies[0].success
    assert follower.term_at(committed) == old_term


def test_single_node_ignores_requests_from_itself() -> None:
    node = RaftNode(RaftConfig(node_id=0, voters=frozenset({0})), MemoryRaftLog().load(),
                    now_ms=0)
    assert node.refusal(AppendEntries(0, 1, 0, 0, (), 0)) is not None
