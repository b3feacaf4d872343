"""Raft in hand-driven scenarios: the cases random faults rarely hit, stepped message by message.

Each test routes messages itself (a predicate decides which are delivered, the rest are lost), so
the paper's corner cases - Figure 8, a partitioned node coming back, an isolated leader - are
reproduced exactly.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from strom.controller.messages import AppendEntries, Message, VoteRequest
from strom.controller.raft import (
    Action,
    Apply,
    BecameFollower,
    BecameLeader,
    NotLeader,
    Persist,
    Proposal,
    RaftConfig,
    RaftNode,
    RestoreSnapshot,
    Role,
    Send,
)
from strom.controller.raftlog import MemoryRaftLog, persist

ELECTION = 100
Route = Callable[[int, int, Message], bool]


def everywhere(src: int, dst: int, m: Message) -> bool:
    return True


class Net:
    def __init__(
        self, voters: Iterable[int], observers: Iterable[int] = (), **config: object
    ) -> None:
        self.voters = frozenset(voters)
        self.observers = frozenset(observers)
        self.config = config
        self.clock: dict[int, int] = {}  # each node's own clock: timeouts are per node
        self.disks = {i: MemoryRaftLog() for i in self.voters | self.observers}
        self.nodes: dict[int, RaftNode] = {}
        self.applied: dict[int, list[bytes]] = {}
        self.pending: list[tuple[int, int, Message]] = []
        self.events: list[tuple[int, Action]] = []
        for i in sorted(self.disks):
            self.restart(i)

    def restart(self, i: int) -> None:
        cfg = RaftConfig(
            node_id=i,
            voters=self.voters,
            observers=self.observers,
            election_timeout_ms=ELECTION,
            heartbeat_interval_ms=10,
            **self.config,  # type: ignore[arg-type]
        )
        now = self.clock.setdefault(i, 0)
        self.nodes[i] = RaftNode(cfg, self.disks[i].load(), now_ms=now, rng=random.Random(i))
        self.applied[i] = []
        self.handle(i, self.nodes[i].take_actions())

    def crash(self, i: int) -> None:
        del self.nodes[i]
        self.pending = [(s, d, m) for s, d, m in self.pending if d != i]

    def handle(self, i: int, actions: list[Action]) -> None:
        for a in actions:
            self.events.append((i, a))
            if isinstance(a, Persist):
                persist(self.disks[i], a)
            elif isinstance(a, Send):
                self.pending.append((i, a.to, a.message))
            elif isinstance(a, Apply):
                self.applied[i].extend(e.command for e in a.entries)
            elif isinstance(a, RestoreSnapshot):
                self.applied[i] = [b"?"] * a.snapshot.index

    def tick_one(self, i: int, ms: int) -> None:
        self.clock[i] += ms
        self.handle(i, self.nodes[i].tick(self.clock[i]))

    def timeout(self, i: int) -> None:
        """Fire node i's election timer (only its clock jumps)."""
        self.tick_one(i, 3 * ELECTION)

    def tick_all(self, ms: int, route: Route = everywhere) -> None:
        for _ in range(ms // 5):
            for i in list(self.nodes):
                self.tick_one(i, 5)
            self.flush(route)

    def flush(self, route: Route = everywhere) -> None:
        while self.pending:
            batch, self.pending = self.pending, []
            for src, dst, m in batch:
                if dst in self.nodes and route(src, dst, m):
                    self.handle(dst, self.nodes[dst].receive(m))

    def propose(self, i: int, command: bytes) -> Proposal | NotLeader:
        result = self.nodes[i].propose(command)
        self.handle(i, self.nodes[i].take_actions())
        return result

    def leader(self) -> int:
        leaders = [i for i, n in self.nodes.items() if n.is_leader]
        assert len(leaders) == 1, leaders
        return leaders[0]


def links(*pairs: tuple[int, int]) -> Route:
    allowed = {frozenset(p) for p in pairs}
    return lambda s, d, m: frozenset((s, d)) in allowed


def test_single_voter_elects_itself_and_commits_with_observers() -> None:
    net = Net([1], [2, 3])
    net.tick_all(3 * ELECTION)
    assert net.leader() == 1
    assert net.nodes[2].role is Role.FOLLOWER and net.nodes[2].leader_id == 1
    result = net.propose(1, b"x")
    assert isinstance(result, Proposal)
    assert net.nodes[1].commit_index == result.index  # no ack needed from observers
    net.tick_all(50)
    assert net.applied[2] == net.applied[3] == [b"", b"x"]
    assert net.propose(2, b"y") == NotLeader(leader_hint=1)
    assert not net.nodes[2].is_voter


def test_observers_never_count_for_commit_nor_vote() -> None:
    net = Net([1, 2, 3], [4, 5])
    net.timeout(1)
    net.flush()
    net.tick_all(50)
    assert net.leader() == 1
    net.crash(2)
    net.crash(3)
    result = net.propose(1, b"x")
    assert isinstance(result, Proposal)
    net.flush()
    assert net.nodes[4].last_index == result.index  # observers have it ...
    assert net.nodes[1].commit_index < result.index  # ... but it is not committed
    # An observer's election timer never starts a campaign.
    before = net.nodes[4].term
    net.timeout(4)
    assert net.nodes[4].term == before and not any(
        isinstance(m, VoteRequest) for s, _, m in net.pending if s == 4
    )


def test_caught_up_peers_learn_a_commit_at_once_not_at_the_next_heartbeat() -> None:
    """A committed entry reaches followers and observers by ``commit_notices`` (one empty
    AppendEntries per caught-up peer), with no tick: the heartbeat interval is liveness only."""
    net = Net([1, 2, 3], [4])
    net.timeout(1)
    net.flush()
    assert net.leader() == 1
    net.tick_all(50)  # every peer holds and applied the no-op
    result = net.propose(1, b"x")
    assert isinstance(result, Proposal)
    net.flush()  # the entry out, the acknowledgements back: committed on the leader
    assert net.nodes[1].commit_index == result.index
    assert all(net.applied[i] == [b""] for i in (2, 3, 4))  # the others were not told yet
    net.handle(1, net.nodes[1].commit_notices())
    notices = [(d, m) for s, d, m in net.pending if s == 1]
    assert sorted(d for d, _ in notices) == [2, 3, 4]
    assert all(isinstance(m, AppendEntries) and not m.entries and m.leader_commit == result.index
               for _, m in notices)
    net.flush()
    assert all(net.applied[i] == [b"", b"x"] for i in (2, 3, 4))
    assert net.nodes[1].commit_notices() == []  # told once; nothing more until a new commit
    assert net.nodes[2].commit_notices() == []  # only a leader tells


def test_figure_8_old_term_entry_is_not_committed_by_counting_replicas() -> None:
    """Raft §5.4.2: a leader never commits an entry of an earlier term by counting replicas."""
    net = Net([1, 2, 3, 4, 5], pre_vote=False, check_quorum=False, max_entries_per_append=1)
    net.timeout(1)
    net.flush()
    assert net.leader() == 1  # term 1, no-op at index 1 everywhere
    net.tick_all(20)
    # (a) S1 appends X at index 2 (term 1), replicated to S2 only.
    net.propose(1, b"X")
    net.flush(links((1, 2)))
    assert net.nodes[2].last_index == 2
    # (b) S5 wins term 2 with S3 and S4, appends its no-op at index 2, replicates nothing, dies.
    net.timeout(5)
    net.flush(lambda s, d, m: (s == 5 and d in (3, 4) and isinstance(m, VoteRequest)) or d == 5)
    assert net.nodes[5].is_leader and net.nodes[5].term == 2
    net.crash(5)
    net.pending.clear()
    # (c) S1 hears of term 2 and wins term 3; X reaches S3 and S4, the term-3 no-op nobody.
    net.tick_one(1, 20)
    net.flush(links((1, 3)))
    assert net.nodes[1].role is Role.FOLLOWER and net.nodes[1].term == 2
    net.timeout(1)

    def no_term_3(s: int, d: int, m: Message) -> bool:
        return not (isinstance(m, AppendEntries) and any(e.term == 3 for e in m.entries))

    net.flush(no_term_3)
    net.tick_one(1, 20)  # heartbeats: the followers' rejections walk S1 back to index 2
    net.flush(no_term_3)
    assert net.nodes[1].is_leader and net.nodes[1].term == 3
    assert [net.nodes[i].term_at(2) for i in (1, 2, 3, 4)] == [1, 1, 1, 1]
    assert net.nodes[1].commit_index == 1, "X (term 1) must not be committed by counting"
    net.crash(1)
    net.pending.clear()
    # (d) S5 comes back and wins term 4 with S2, S3, S4: its index 2 replaces X, legitimately.
    net.restart(5)
    net.timeout(5)  # term 3: everyone has voted for S1 already
    net.flush()
    net.timeout(5)  # term 4
    net.flush()
    assert net.nodes[5].is_leader
    net.tick_all(50)
    for i in (2, 3, 4, 5):
        assert net.applied[i][:2] == [b"", b""], "index 2 is S5's term-2 no-op, never X"


def test_a_partitioned_follower_does_not_disrupt_the_leader_when_it_returns() -> None:
    net = Net([1, 2, 3])
    net.timeout(1)
    net.flush()
    net.tick_all(50)
    term = net.nodes[1].term
    cut_off_3 = lambda s, d, m: 3 not in (s, d)  # noqa: E731
    net.tick_all(10 * ELECTION, cut_off_3)  # node 3 times out again and again (pre-votes only)
    assert net.nodes[3].term == term, "pre-vote keeps a partitioned node's term"
    net.tick_all(5 * ELECTION)
    assert net.leader() == 1 and net.nodes[1].term == term
    assert net.nodes[3].leader_id == 1


def test_without_pre_vote_the_returning_node_forces_an_election() -> None:
    net = Net([1, 2, 3], pre_vote=False)
    net.timeout(1)
    net.flush()
    net.tick_all(50)
    term = net.nodes[1].term
    net.tick_all(10 * ELECTION, lambda s, d, m: 3 not in (s, d))
    assert net.nodes[3].term > term
    net.tick_all(10 * ELECTION)
    assert net.nodes[net.leader()].term > term  # the disruption pre-vote avoids


def test_an_isolated_leader_steps_down_and_the_majority_elects_another() -> None:
    net = Net([1, 2, 3])
    net.timeout(1)
    net.flush()
    net.tick_all(50)
    isolate_1 = lambda s, d, m: 1 not in (s, d)  # noqa: E731
    net.tick_all(4 * ELECTION, isolate_1)
    assert not net.nodes[1].is_leader, "check-quorum: no majority heard, step down"
    assert any(
        isinstance(a, BecameFollower) and a.leader_id is None for i, a in net.events if i == 1
    )
    leaders = [i for i, n in net.nodes.items() if n.is_leader]
    assert len(leaders) == 1 and leaders[0] != 1
    assert isinstance(net.propose(1, b"x"), NotLeader)
    net.tick_all(2 * ELECTION)
    assert net.nodes[1].leader_id == leaders[0]


def _held_for_1(held: list[tuple[int, int, Message]]) -> Route:
    """Deliver everything but what goes to node 1, which is kept in ``held`` (on its way in)."""

    def route(src: int, dst: int, m: Message) -> bool:
        if dst == 1:
            held.append((src, dst, m))
            return False
        return True

    return route


def test_a_leader_that_listened_late_waits_a_window_for_what_was_on_its_way() -> None:
    """Issue 21 items 3/7: the followers' acknowledgements stay on their way to the leader for
    three election timeouts (its owner's loop stalled again and again, each time telling the
    node), then arrive: the leader was never deposed and its term never moved. Without
    ``listened_late`` its check-quorum found no acknowledgement and it stepped down."""
    net = Net([1, 2, 3])
    net.timeout(1)
    net.flush()
    net.tick_all(50)
    term = net.nodes[1].term
    held: list[tuple[int, int, Message]] = []
    for _ in range(6):
        net.tick_all(ELECTION // 2, _held_for_1(held))
        net.nodes[1].listened_late(net.clock[1])
    assert net.nodes[1].is_leader
    assert held, "the followers did answer"
    net.pending.extend(held)
    net.flush()
    net.tick_all(3 * ELECTION)
    assert net.leader() == 1
    assert {n.term for n in net.nodes.values()} == {term}


def test_a_leader_that_stops_listening_late_and_hears_nobody_steps_down() -> None:
    """``listened_late`` postpones check-quorum, never stops it: once the owner no longer
    stalls, a leader that hears no majority for an election timeout steps down."""
    net = Net([1, 2, 3])
    net.timeout(1)
    net.flush()
    net.tick_all(50)
    held: list[tuple[int, int, Message]] = []
    net.nodes[1].listened_late(net.clock[1])
    net.tick_all(3 * ELECTION, _held_for_1(held))
    assert not net.nodes[1].is_leader
    assert any(
        isinstance(a, BecameFollower) and a.leader_id is None for i, a in net.events if i == 1
    )


def test_listened_late_moves_nothing_on_a_follower() -> None:
    """A follower's clock pauses for a stall in its owner (the driver), its election deadline
    is not moved by ``listened_late``: a follower that hears no leader still campaigns."""
    net = Net([1, 2, 3])
    net.timeout(1)
    net.flush()
    net.tick_all(50)
    net.crash(1)
    for _ in range(6):
        net.tick_all(ELECTION // 2)
        for i in (2, 3):
            net.nodes[i].listened_late(net.clock[i])
    assert net.leader() in (2, 3)


def test_a_cut_off_leader_that_keeps_listening_late_commits_nothing() -> None:
    """The cost of ``listened_late``: a leader cut off from everyone whose owner stalls every
    half election timeout keeps claiming to lead. Raft's safety is untouched: what it appends
    meanwhile never commits, the majority elects another leader that commits, and once the
    old leader hears the new term it steps down and its entry is replaced."""
    net = Net([1, 2, 3])
    net.timeout(1)
    net.flush()
    net.tick_all(50)
    old_term = net.nodes[1].term
    assert isinstance(net.propose(1, b"before"), Proposal)
    net.tick_all(50)
    cut_off_1 = lambda s, d, m: 1 not in (s, d)  # noqa: E731
    lost = net.propose(1, b"lost")
    assert isinstance(lost, Proposal)
    for _ in range(10):
        net.tick_all(ELECTION // 2, cut_off_1)
        net.nodes[1].listened_late(net.clock[1])
    assert net.nodes[1].is_leader and net.nodes[1].term == old_term, "still claims to lead"
    new = next(i for i in (2, 3) if net.nodes[i].is_leader)
    assert net.nodes[new].term > old_term
    assert isinstance(net.propose(new, b"kept"), Proposal)
    net.tick_all(50, cut_off_1)
    assert net.nodes[1].commit_index < lost.index
    assert b"lost" not in net.applied[1]
    net.tick_all(3 * ELECTION)
    assert net.leader() == new
    for i in (1, 2, 3):
        assert net.applied[i] == [b"", b"before", b"", b"kept"], (i, net.applied[i])


def test_step_down_on_higher_term() -> None:
    net = Net([1, 2, 3], pre_vote=False, check_quorum=False)
    net.timeout(1)
    net.flush()
    net.timeout(2)  # node 2 campaigns at a higher term; the leader hears of it and steps down
    net.flush()
    assert net.nodes[1].term == net.nodes[2].term == 2
    assert net.leader() == 2
    assert any(isinstance(a, BecameLeader) and a.term == 2 for i, a in net.events if i == 2)


def test_a_follower_behind_the_compacted_log_gets_a_snapshot() -> None:
    net = Net([1, 2, 3])
    net.timeout(1)
    net.flush()
    net.crash(3)
    for k in range(20):
        net.propose(1, b"c%d" % k)
    net.tick_all(50)
    leader = net.nodes[1]
    assert leader.commit_index == 21
    net.handle(1, leader.compact(15, b"state@15"))
    assert leader.snapshot.index == 15 and len(leader.entries) == 6
    net.restart(3)
    net.tick_all(50)
    assert any(isinstance(a, RestoreSnapshot) for i, a in net.events if i == 3)
    assert net.disks[3].snapshot.data == b"state@15"
    assert net.nodes[3].last_index == 21 and net.nodes[3].commit_index == 21
    assert net.applied[3][15:] == [b"c%d" % k for k in range(14, 20)]


def test_a_restarted_node_keeps_its_vote() -> None:
    net = Net([1, 2, 3], pre_vote=False)
    net.timeout(1)
    net.flush(lambda s, d, m: d == 2)  # 2 votes for 1, the vote reply is lost
    net.pending.clear()
    assert net.nodes[2].voted_for == 1
    net.crash(2)
    net.restart(2)
    assert net.nodes[2].voted_for == 1 and net.nodes[2].term == 1


def test_a_follower_that_cannot_hear_the_leader_cannot_depose_it() -> None:
    """Leader stickiness: voters that heard from the leader recently refuse (pre-)votes."""
    net = Net([1, 2, 3])
    net.timeout(1)
    net.flush()
    net.tick_all(50)
    term = net.nodes[1].term
    net.tick_all(10 * ELECTION, lambda s, d, m: (s, d) != (1, 3))  # only 1 -> 3 is lost
    assert net.leader() == 1 and net.nodes[1].term == term
    assert net.nodes[2].term == term
