"""A sans-I/O Raft state machine for the controller quorum (h11 style: events in, actions out).

Why it exists: the metadata log must be agreed on by 1 or 3 voters, survive crashes, and never
lose a committed entry. Keeping the consensus rules free of sockets, clocks and disks lets the
simulation tests drive thousands of elections with loss, reordering, partitions and crashes in a
few seconds, deterministically.

Inputs (each returns the actions it produced, in order; ``propose`` leaves its actions queued for
the next call or for ``take_actions()``, so several proposals can share one ``Persist``):

- ``tick(now_ms)``: the clock moved. Drives election timeouts, heartbeats and check-quorum.
  ``next_tick_ms()`` says when a tick next has something to do, so the owner need not wake
  on a fixed period.
- ``receive(message, now_ms=None)``: a message from a peer (``strom.controller.messages``).
- ``propose(command) -> Proposal(index, term) | NotLeader(leader_hint)``: append to the log.
- ``compact(index, data)``: the caller's state machine snapshot as of applied ``index``.
- ``set_observers(ids)``: the non-voting replicas (brokers) the leader replicates to.
- ``commit_notices()``: tell caught-up peers of a commit index they have not been sent yet
  (the owner calls it when no input waits; heartbeats then only prove liveness).
- ``listened_late(now_ms)``: the owner could not run the node for a while; a leader's next
  check-quorum waits a whole election timeout for what is still on its way in.

Outputs (``Action``):

- ``Persist(term, voted_for, snapshot, truncate_from, entries)``: durably store, in this order, the
  hard state, the snapshot (dropping log entries up to its index), the truncation of the log suffix
  from ``truncate_from``, and the appended entries. ``strom.controller.raftlog.persist`` does it.
- ``Send(to, message)``.
- ``Apply(entries)``: committed entries, in index order, exactly once per node lifetime. An entry
  with an empty command is a leader's no-op; state machines skip it but may record its index.
- ``RestoreSnapshot(snapshot)``: replace the state machine with the snapshot's data (the leader
  sent an InstallSnapshot because this node was behind the leader's compacted log).
- ``BecameLeader(term)`` / ``BecameFollower(term, leader_id)``: leadership changed as seen by this
  node; ``leader_id`` is ``None`` while no leader is known (elections in progress).

THE CONTRACT: the driver carries out the actions of a list in order, and a ``Persist`` must be
durable (fsync'd) before any later action of the same list is carried out - in particular before
the ``Send`` of a vote or of an AppendEntries acknowledgement, which promise that the state is on
disk. If the process dies part way, whatever was not yet carried out is simply lost; on restart
the node is rebuilt from what ``RaftLog.load()`` returns, and the state machine from the snapshot
(replaying committed entries again as ``Apply`` actions once the commit index is relearned).

What is implemented: randomized election timeouts (injectable ``random.Random``), pre-vote (a
partitioned node cannot disrupt a healthy leader when it returns), leader stickiness (voters that
heard from a leader within an election timeout ignore vote requests), log replication with the
AppendEntries consistency check and fast backtracking (conflict term/index), pipelined appends,
commitment only of current-term entries (Raft §5.4.2), a no-op entry on election, heartbeats,
step-down on a higher term, check-quorum (a leader that has not heard from a majority of voters
within an election timeout steps down), 1 or 3 (any odd or even number of) voters plus non-voting
observers that receive the log but never vote nor count for commitment, snapshots and log
compaction, InstallSnapshot for followers behind the compacted log.

What is not: membership changes of the voter set (the voters are static configuration), chunked
snapshots (a snapshot travels in one message), leadership transfer, read leases for linearizable
reads (``is_leader`` plus check-quorum bounds staleness to an election timeout).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Iterable
from dataclasses import dataclass

from strom.controller.messages import (
    AppendEntries,
    AppendEntriesResponse,
    InstallSnapshot,
    InstallSnapshotResponse,
    LogEntry,
    Message,
    VoteRequest,
    VoteResponse,
)

__all__ = [
    "Action",
    "Apply",
    "BecameFollower",
    "BecameLeader",
    "NotLeader",
    "Persist",
    "PersistentState",
    "Proposal",
    "RaftConfig",
    "RaftNode",
    "RestoreSnapshot",
    "Role",
    "Send",
    "Snapshot",
]


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The state machine as of ``index`` (whose entry had ``term``)."""

    index: int
    term: int
    data: bytes


EMPTY_SNAPSHOT = Snapshot(0, 0, b"")


@dataclass(frozen=True, slots=True)
class PersistentState:
    """What survives a crash: what ``RaftLog.load()`` returns and ``RaftNode`` starts from."""

    term: int = 0
    voted_for: int | None = None
    snapshot: Snapshot = EMPTY_SNAPSHOT
    entries: tuple[LogEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class RaftConfig:
    node_id: int
    voters: frozenset[int]
    observers: frozenset[int] = frozenset()
    election_timeout_ms: int = 1000
    """Base election timeout; each wait is drawn from [base, 2 x base)."""
    heartbeat_interval_ms: int = 250
    """How often a leader tells every peer it is alive (an AppendEntries, empty when the peer
    holds the whole log). Liveness only: peers learn of a commit at once
    (``commit_notices``). A quarter of the election timeout, as KRaft's fetch wait (500 ms)
    to its fetch timeout (2 s)."""
    max_entries_per_append: int = 256
    pre_vote: bool = True
    check_quorum: bool = True

    def __post_init__(self) -> None:
        if not self.voters:
            raise ValueError("a Raft group needs at least one voter")
        if self.voters & self.observers:
            both = sorted(self.voters & self.observers)
            raise ValueError(f"nodes {both} are both voters and observers")
        if self.heartbeat_interval_ms >= self.election_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be smaller than election_timeout_ms")


# ---- actions ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    to: int
    message: Message


@dataclass(frozen=True, slots=True)
class Persist:
    term: int
    voted_for: int | None
    snapshot: Snapshot | None = None
    truncate_from: int | None = None
    entries: tuple[LogEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class Apply:
    entries: tuple[LogEntry, ...]


@dataclass(frozen=True, slots=True)
class RestoreSnapshot:
    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class BecameLeader:
    term: int


@dataclass(frozen=True, slots=True)
class BecameFollower:
    term: int
    leader_id: int | None


Action = Send | Persist | Apply | RestoreSnapshot | BecameLeader | BecameFollower


@dataclass(frozen=True, slots=True)
class Proposal:
    """The command was appended at ``index`` in ``term``; it is committed when an ``Apply``
    carries an entry at ``index`` with this ``term`` (another term there means it was lost)."""

    index: int
    term: int


@dataclass(frozen=True, slots=True)
class NotLeader:
    leader_hint: int | None


@dataclass(slots=True)
class _Progress:
    next_index: int
    match_index: int = 0
    active: bool = False
    snapshot_until_ms: int = -1
    """While a snapshot is in flight, do not resend it before this time."""
    commit_sent: int = 0
    """The commit index the last AppendEntries to this peer carried (``commit_notices``)."""


@dataclass(slots=True)
class _Notified:
    term: int = -1
    leader: int | None = None
    is_leader: bool = False


class RaftNode:
    """One member (voter or observer) of a Raft group. Not thread-safe: one task owns it."""

    def __init__(
        self,
        config: RaftConfig,
        state: PersistentState | None = None,
        *,
        now_ms: int = 0,
        rng: random.Random | None = None,
    ) -> None:
        state = state or PersistentState()
        self._cfg = config
        self._id = config.node_id
        self._voters = config.voters
        self._majority = len(config.voters) // 2 + 1
        self._observers = set(config.observers)
        self._rng = rng or random.Random()
        self._term = state.term
        self._voted_for = state.voted_for
        self._snap = state.snapshot
        self._entries: list[LogEntry] = [e for e in state.entries if e.index > self._snap.index]
        for k, e in enumerate(self._entries):
            if e.index != self._snap.index + 1 + k:
                raise ValueError(f"log entries are not contiguous after index {self._snap.index}")
        self._role = Role.FOLLOWER
        self._leader: int | None = None
        self._commit = self._snap.index
        self._applied = self._snap.index
        self._now = now_ms
        self._last_leader_contact = now_ms
        self._election_deadline = 0
        self._votes: set[int] = set()
        self._progress: dict[int, _Progress] = {}
        self._next_heartbeat = 0
        self._next_quorum_check = 0
        self._out: list[Action] = []
        self._notified = _Notified()
        self._reset_election_timer()

    # ---- introspection -----------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self._id

    @property
    def role(self) -> Role:
        return self._role

    @property
    def is_leader(self) -> bool:
        return self._role is Role.LEADER

    @property
    def is_voter(self) -> bool:
        return self._id in self._voters

    @property
    def term(self) -> int:
        return self._term

    @property
    def voted_for(self) -> int | None:
        return self._voted_for

    @property
    def leader_id(self) -> int | None:
        return self._leader

    @property
    def commit_index(self) -> int:
        return self._commit

    @property
    def last_applied(self) -> int:
        return self._applied

    @property
    def last_index(self) -> int:
        return self._snap.index + len(self._entries)

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self._snap.term

    @property
    def snapshot(self) -> Snapshot:
        return self._snap

    @property
    def entries(self) -> tuple[LogEntry, ...]:
        """The log after the snapshot (for tests and diagnostics)."""
        return tuple(self._entries)

    def term_at(self, index: int) -> int | None:
        """The term of the entry at ``index``; ``None`` if compacted away or beyond the log."""
        if index == self._snap.index:
            return self._snap.term
        k = index - self._snap.index - 1
        if 0 <= k < len(self._entries):
            return self._entries[k].term
        return None

    def next_tick_ms(self) -> int | None:
        """The earliest time at which ``tick`` has something to do, or None when no time
        ever will (an observer only follows messages).

        Why: ``tick`` only acts on three deadlines - the leader's next heartbeat, its next
        check-quorum, a voter's election deadline - so an owner that ticks exactly then (and
        again after any input, which may move them) behaves as one that ticks every few ms,
        without waking 100 times a second on an idle cluster. A tick before this time is
        harmless (it does nothing); a tick later is late by as much, as with a fixed period.
        """
        if self._role is Role.LEADER:
            if self._cfg.check_quorum:
                return min(self._next_heartbeat, self._next_quorum_check)
            return self._next_heartbeat
        if self.is_voter:
            return self._election_deadline
        return None

    # ---- inputs ------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> list[Action]:
        self._advance(now_ms)
        if self._role is Role.LEADER:
            if self._cfg.check_quorum and self._now >= self._next_quorum_check:
                self._check_quorum()
            if self._role is Role.LEADER and self._now >= self._next_heartbeat:
                self._next_heartbeat = self._now + self._cfg.heartbeat_interval_ms
                for peer in self._progress:
                    self._send_append(peer)
        elif self.is_voter and self._now >= self._election_deadline:
            self._campaign()
        return self.take_actions()

    def refusal(self, m: Message) -> str | None:
        """Why a peer request must not reach this node, or None when it may.

        Only a voter can campaign or lead, so Vote, AppendEntries and InstallSnapshot from any
        other node id (or from this node's own id) are refused, as are AppendEntries whose
        entries are not a run of consecutive indexes after ``prev_log_index`` with terms that
        never decrease nor pass the request's term. Node ids are not authenticated: this keeps a
        stray or hostile request from moving the state machine, not a forged voter id.
        """
        if not isinstance(m, VoteRequest | AppendEntries | InstallSnapshot):
            return None
        if m.sender == self._id:
            return f"the request claims to come from node {m.sender}, which is this node"
        if m.sender not in self._voters:
            return (f"node {m.sender} is not a voter (voters: "
                    f"{', '.join(str(v) for v in sorted(self._voters))})")
        if isinstance(m, AppendEntries):
            if m.prev_log_term > m.term:
                return f"prev_log_term {m.prev_log_term} is past the request's term {m.term}"
            expected, last_term = m.prev_log_index + 1, m.prev_log_term
            for e in m.entries:
                if e.index != expected or e.term < last_term or e.term > m.term:
                    return (f"entry at index {e.index} (term {e.term}) does not follow index "
                            f"{expected - 1} (term {last_term}) in term {m.term}")
                expected, last_term = expected + 1, e.term
        return None

    def receive(self, message: Message, now_ms: int | None = None) -> list[Action]:
        if now_ms is not None:
            self._advance(now_ms)
        if self.refusal(message) is not None:
            return self.take_actions()
        if self._check_term(message):
            if isinstance(message, VoteRequest):
                self._on_vote_request(message)
            elif isinstance(message, VoteResponse):
                self._on_vote_response(message)
            elif isinstance(message, AppendEntries):
                self._on_append(message)
            elif isinstance(message, AppendEntriesResponse):
                self._on_append_response(message)
            elif isinstance(message, InstallSnapshot):
                self._on_install_snapshot(message)
            else:
                self._on_install_snapshot_response(message)
        return self.take_actions()

    def propose(self, command: bytes) -> Proposal | NotLeader:
        if self._role is not Role.LEADER:
            return NotLeader(self._leader)
        if not command:
            raise ValueError("an empty command is reserved for the leader's no-op entry")
        entry = self._append_local(command)
        for peer, pr in self._progress.items():
            if pr.next_index == entry.index:
                self._send_append(peer)
        self._maybe_commit()
        return Proposal(entry.index, entry.term)

    def compact(self, index: int, data: bytes) -> list[Action]:
        """Replace the log up to ``index`` (already applied) by the state machine ``data``."""
        if index <= self._snap.index:
            return self.take_actions()
        if index > self._applied:
            raise ValueError(f"cannot snapshot at {index}: only applied up to {self._applied}")
        term = self.term_at(index)
        assert term is not None
        del self._entries[: index - self._snap.index]
        self._snap = Snapshot(index, term, data)
        self._persist(snapshot=self._snap)
        return self.take_actions()

    def set_observers(self, observers: Iterable[int]) -> list[Action]:
        new = set(observers) - self._voters
        if self._role is Role.LEADER:
            for gone in self._observers - new:
                self._progress.pop(gone, None)
            for added in new - self._observers:
                if added != self._id:
                    self._progress[added] = _Progress(next_index=self.last_index + 1)
                    self._send_append(added)
        self._observers = new
        return self.take_actions()

    def listened_late(self, now_ms: int) -> None:
        """The owner could not run this node for a while (its event loop stalled, the stall
        taken off the clock): the next check-quorum comes no sooner than a whole election
        timeout from now, counting every acknowledgement since the last one.

        Why: the acknowledgements the followers sent meanwhile are still on their way in
        (in sockets, behind the loop), so a check at the first tick after the stall found
        none and the leader stepped down for its own deafness. At 10,000 partitions RF 3
        under an acks=all produce every term change of a measured run began so: the leader
        stepped down at the first tick after its loop was 1.5-1.9 s late and campaigned
        again (the followers, whose pre-votes failed, never moved the term). Check-quorum
        is for liveness only (a leader cut off from its majority stops claiming to lead); a
        deposed leader commits nothing either way. The cost: a leader both cut off and
        stalling more than a heartbeat interval every election timeout keeps claiming to
        lead until it hears a higher term."""
        if self._role is Role.LEADER and self._cfg.check_quorum:
            self._advance(now_ms)
            self._next_quorum_check = max(self._next_quorum_check,
                                          self._now + self._cfg.election_timeout_ms)

    def commit_notices(self) -> list[Action]:
        """On a leader, an AppendEntries without entries to every peer that holds the whole
        log (nothing in flight to it) but was last sent an older commit index.

        Why: a follower or observer learns that an entry committed only from the next
        AppendEntries; without this, that is the next heartbeat, so every metadata change
        reached the other brokers up to a heartbeat interval after it committed, and the
        heartbeat interval could not grow without slowing every change (a fencing, a new
        leader) by as much. KRaft's leader likewise answers a follower's pending Fetch as soon
        as its high watermark moves. The owner calls this when it has no input waiting (the
        driver: an empty inbox), so the commits of a burst of acknowledgements share one
        notice per peer. A peer with entries in flight is told by their next AppendEntries."""
        if self._role is Role.LEADER:
            for peer, pr in self._progress.items():
                if pr.commit_sent < self._commit and pr.match_index == self.last_index:
                    self._send_append(peer)
        return self.take_actions()

    def take_actions(self) -> list[Action]:
        self._notify()
        out, self._out = self._out, []
        return out

    # ---- timers and transitions --------------------------------------------------------------

    def _advance(self, now_ms: int) -> None:
        self._now = max(self._now, now_ms)

    def _reset_election_timer(self) -> None:
        base = self._cfg.election_timeout_ms
        self._election_deadline = self._now + base + self._rng.randrange(base)

    def _in_lease(self) -> bool:
        if not self._cfg.check_quorum or self._leader is None:
            return False
        if self._leader == self._id:
            return True
        return self._now - self._last_leader_contact < self._cfg.election_timeout_ms

    def _persist(
        self,
        *,
        snapshot: Snapshot | None = None,
        truncate_from: int | None = None,
        entries: tuple[LogEntry, ...] = (),
    ) -> None:
        self._out.append(Persist(self._term, self._voted_for, snapshot, truncate_from, entries))

    def _send(self, to: int, message: Message) -> None:
        self._out.append(Send(to, message))

    def _notify(self) -> None:
        n = self._notified
        now = (self._term, self._leader, self._role is Role.LEADER)
        if (n.term, n.leader, n.is_leader) == now:
            return
        if now[2]:
            self._out.append(BecameLeader(self._term))
        else:
            self._out.append(BecameFollower(self._term, self._leader))
        n.term, n.leader, n.is_leader = now

    def _become_follower(self, term: int, leader: int | None) -> None:
        if term > self._term:
            self._term = term
            self._voted_for = None
            self._persist()
        self._role = Role.FOLLOWER
        self._leader = leader
        self._progress = {}
        self._votes = set()
        self._reset_election_timer()

    def _campaign(self) -> None:
        if self._cfg.pre_vote:
            self._role = Role.PRE_CANDIDATE
            self._leader = None
            self._votes = {self._id}
            self._reset_election_timer()
            if len(self._votes) >= self._majority:
                self._become_candidate()
                return
            self._request_votes(pre_vote=True)
        else:
            self._become_candidate()

    def _become_candidate(self) -> None:
        self._role = Role.CANDIDATE
        self._term += 1
        self._voted_for = self._id
        self._leader = None
        self._votes = {self._id}
        self._reset_election_timer()
        self._persist()
        if len(self._votes) >= self._majority:
            self._become_leader()
            return
        self._request_votes(pre_vote=False)

    def _request_votes(self, *, pre_vote: bool) -> None:
        term = self._term + 1 if pre_vote else self._term
        request = VoteRequest(self._id, term, self.last_index, self.last_term, pre_vote)
        for voter in sorted(self._voters):
            if voter != self._id:
                self._send(voter, request)

    def _become_leader(self) -> None:
        self._role = Role.LEADER
        self._leader = self._id
        self._votes = set()
        self._notify()
        peers = (self._voters | self._observers) - {self._id}
        self._progress = {p: _Progress(next_index=self.last_index + 1) for p in sorted(peers)}
        self._append_local(b"")
        self._next_heartbeat = self._now + self._cfg.heartbeat_interval_ms
        self._next_quorum_check = self._now + self._cfg.election_timeout_ms
        for peer in self._progress:
            self._send_append(peer)
        self._maybe_commit()

    def _check_quorum(self) -> None:
        heard = 1 + sum(1 for p, pr in self._progress.items() if pr.active and p in self._voters)
        for pr in self._progress.values():
            pr.active = False
        self._next_quorum_check = self._now + self._cfg.election_timeout_ms
        if heard < self._majority:
            self._become_follower(self._term, None)

    # ---- log ---------------------------------------------------------------------------------

    def _append_local(self, command: bytes) -> LogEntry:
        entry = LogEntry(self._term, self.last_index + 1, command)
        self._entries.append(entry)
        self._persist(entries=(entry,))
        return entry

    def _slice(self, first: int, last: int) -> tuple[LogEntry, ...]:
        base = self._snap.index + 1
        return tuple(self._entries[first - base : last - base + 1])

    def _maybe_commit(self) -> None:
        if self._role is not Role.LEADER:
            return
        matches = sorted(
            (self.last_index if v == self._id else self._progress[v].match_index)
            for v in self._voters
        )
        candidate = matches[len(matches) - self._majority]
        if candidate > self._commit and self.term_at(candidate) == self._term:
            self._commit = candidate
            self._apply()

    def _apply(self) -> None:
        if self._commit > self._applied:
            entries = self._slice(self._applied + 1, self._commit)
            self._applied = self._commit
            self._out.append(Apply(entries))

    # ---- message handling --------------------------------------------------------------------

    def _check_term(self, m: Message) -> bool:
        """The term rules common to every message; False when the message is dealt with."""
        if m.term > self._term:
            if isinstance(m, VoteRequest):
                if self._in_lease():
                    # Leader stickiness: a leader we heard from recently is still alive.
                    self._send(m.sender, VoteResponse(self._id, self._term, False, m.pre_vote))
                    return False
                if m.pre_vote:
                    return True
                self._become_follower(m.term, None)
            elif isinstance(m, VoteResponse) and m.pre_vote and m.granted:
                return True
            else:
                leader = m.sender if isinstance(m, AppendEntries | InstallSnapshot) else None
                self._become_follower(m.term, leader)
            return True
        if m.term < self._term:
            # Tell a stale leader or candidate about the newer term so it steps down.
            if isinstance(m, AppendEntries):
                reply = AppendEntriesResponse(self._id, self._term, False, 0, m.prev_log_index)
                self._send(m.sender, reply)
            elif isinstance(m, InstallSnapshot):
                self._send(m.sender, InstallSnapshotResponse(self._id, self._term, 0))
            elif isinstance(m, VoteRequest):
                self._send(m.sender, VoteResponse(self._id, self._term, False, m.pre_vote))
            return False
        return True

    def _on_vote_request(self, m: VoteRequest) -> None:
        up_to_date = (m.last_log_term, m.last_log_index) >= (self.last_term, self.last_index)
        can_vote = (
            self._voted_for == m.sender
            or (self._voted_for is None and self._leader is None)
            or (m.pre_vote and m.term > self._term)
        )
        if self.is_voter and m.sender in self._voters and can_vote and up_to_date:
            if m.pre_vote:
                self._send(m.sender, VoteResponse(self._id, m.term, True, True))
            else:
                self._voted_for = m.sender
                self._persist()
                self._reset_election_timer()
                self._send(m.sender, VoteResponse(self._id, self._term, True, False))
        else:
            self._send(m.sender, VoteResponse(self._id, self._term, False, m.pre_vote))

    def _on_vote_response(self, m: VoteResponse) -> None:
        if not m.granted or m.sender not in self._voters:
            return
        if m.pre_vote:
            if self._role is Role.PRE_CANDIDATE and m.term == self._term + 1:
                self._votes.add(m.sender)
                if len(self._votes) >= self._majority:
                    self._become_candidate()
        elif self._role is Role.CANDIDATE and m.term == self._term:
            self._votes.add(m.sender)
            if len(self._votes) >= self._majority:
                self._become_leader()

    def _follow(self, leader: int) -> None:
        if self._role is not Role.FOLLOWER or self._leader != leader:
            self._become_follower(self._term, leader)
        else:
            self._reset_election_timer()
        self._last_leader_contact = self._now

    def _on_append(self, m: AppendEntries) -> None:
        if self._role is Role.LEADER:
            # Two leaders in one term cannot happen among honest voters: refuse, never crash.
            self._send(m.sender, AppendEntriesResponse(
                self._id, self._term, False, 0, m.prev_log_index, self.last_index + 1, 0))
            return
        self._follow(m.sender)
        prev, prev_term, entries = m.prev_log_index, m.prev_log_term, m.entries
        if prev < self._snap.index:
            # Entries up to our snapshot are committed, so they match the leader's.
            entries = tuple(e for e in entries if e.index > self._snap.index)
            prev, prev_term = self._snap.index, self._snap.term
        mine = self.term_at(prev)
        if mine is None:
            self._send(
                m.sender,
                AppendEntriesResponse(
                    self._id, self._term, False, 0, m.prev_log_index, self.last_index + 1, 0
                ),
            )
            return
        if mine != prev_term:
            first = prev
            while first - 1 > self._snap.index and self.term_at(first - 1) == mine:
                first -= 1
            self._send(
                m.sender,
                AppendEntriesResponse(
                    self._id, self._term, False, 0, m.prev_log_index, first, mine
                ),
            )
            return
        truncate_from: int | None = None
        new: tuple[LogEntry, ...] = ()
        for k, e in enumerate(entries):
            t = self.term_at(e.index)
            if t is None:
                new = entries[k:]
                break
            if t != e.term:
                if e.index <= self._commit:
                    # A committed entry never changes: a request that says otherwise is refused.
                    self._send(m.sender, AppendEntriesResponse(
                        self._id, self._term, False, 0, m.prev_log_index, self._commit + 1, 0))
                    return
                truncate_from = e.index
                new = entries[k:]
                break
        if truncate_from is not None:
            del self._entries[truncate_from - self._snap.index - 1 :]
        if new:
            self._entries.extend(new)
        if truncate_from is not None or new:
            self._persist(truncate_from=truncate_from, entries=new)
        match = prev + len(entries)
        if m.leader_commit > self._commit:
            self._commit = max(self._commit, min(m.leader_commit, match))
            self._apply()
        self._send(
            m.sender, AppendEntriesResponse(self._id, self._term, True, match, m.prev_log_index)
        )

    def _on_append_response(self, m: AppendEntriesResponse) -> None:
        pr = self._progress.get(m.sender)
        if self._role is not Role.LEADER or pr is None:
            return
        pr.active = True
        if m.success:
            if m.match_index > pr.match_index:
                pr.match_index = m.match_index
                self._maybe_commit()
            pr.next_index = max(pr.next_index, pr.match_index + 1)
            if pr.next_index <= self.last_index:
                self._send_append(m.sender)
            return
        if m.prev_log_index < pr.match_index:
            return  # a rejection older than what we know matches
        nxt = m.conflict_index
        if m.conflict_term:
            for e in reversed(self._entries):
                if e.term == m.conflict_term:
                    nxt = e.index + 1
                    break
                if e.term < m.conflict_term:
                    break
        pr.next_index = max(pr.match_index + 1, min(nxt, self.last_index + 1))
        self._send_append(m.sender)

    def _send_append(self, peer: int) -> None:
        pr = self._progress[peer]
        if pr.next_index <= self._snap.index:
            if self._now < pr.snapshot_until_ms:
                return
            pr.snapshot_until_ms = self._now + self._cfg.election_timeout_ms
            s = self._snap
            self._send(peer, InstallSnapshot(self._id, self._term, s.index, s.term, s.data))
            return
        prev = pr.next_index - 1
        prev_term = self.term_at(prev)
        assert prev_term is not None
        last = min(self.last_index, pr.next_index + self._cfg.max_entries_per_append - 1)
        entries = self._slice(pr.next_index, last)
        message = AppendEntries(self._id, self._term, prev, prev_term, entries, self._commit)
        self._send(peer, message)
        pr.commit_sent = self._commit
        if entries:
            pr.next_index = entries[-1].index + 1

    def _on_install_snapshot(self, m: InstallSnapshot) -> None:
        if self._role is Role.LEADER:  # as in _on_append: refuse, never crash
            self._send(m.sender, InstallSnapshotResponse(self._id, self._term, 0))
            return
        self._follow(m.sender)
        if m.last_included_index > self._commit:
            snap = Snapshot(m.last_included_index, m.last_included_term, m.data)
            truncate_from: int | None = None
            if self.term_at(snap.index) == snap.term:
                del self._entries[: snap.index - self._snap.index]
            else:
                self._entries = []
                truncate_from = snap.index + 1
            self._snap = snap
            self._commit = self._applied = snap.index
            self._persist(snapshot=snap, truncate_from=truncate_from)
            self._out.append(RestoreSnapshot(snap))
        self._send(m.sender, InstallSnapshotResponse(self._id, self._term, m.last_included_index))

    def _on_install_snapshot_response(self, m: InstallSnapshotResponse) -> None:
        pr = self._progress.get(m.sender)
        if self._role is not Role.LEADER or pr is None:
            return
        pr.active = True
        pr.snapshot_until_ms = -1
        if m.match_index > pr.match_index:
            pr.match_index = m.match_index
            self._maybe_commit()
        pr.next_index = max(pr.next_index, pr.match_index + 1)
        if pr.next_index <= self.last_index:
            self._send_append(m.sender)
