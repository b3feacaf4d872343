"""Raft on a deterministic simulated network: the safety properties hold after every step.

A seeded simulator delivers messages with loss, duplication, random delays (so reordering),
network partitions (split brain), and crashes nodes - sometimes in the middle of carrying out an
action list, so a vote or entry persisted but not yet announced is the realistic torn case - then
restarts them from exactly what they persisted (``MemoryRaftLog``). Nodes compact their logs at
random, so lagging followers get InstallSnapshot. After each event it checks:

- Election Safety: at most one leader per term.
- Log Matching: an (index, term) pair always names the same command and the same previous term,
  which by induction makes two logs with a common (index, term) identical up to there; the live
  logs are also compared directly at the end.
- Leader Completeness: a new leader's log (or snapshot) holds every entry committed so far.
- State Machine Safety: no two nodes apply different commands at one index, applies are dense,
  and restored snapshots agree with what was applied.
- Liveness: once the network heals and every node is up, a leader is elected and a new proposal
  is applied by every voter and observer within a bounded time.

With ``due_ticks`` a node is ticked only once its ``next_tick_ms()`` has come, as the driver
does, and at one in ten steps where it is not due a copy of it is ticked to show that nothing
would have happened: the properties above hold with ticks only when due.
"""

from __future__ import annotations

import copy
import heapq
import json
import random
from dataclasses import dataclass, field

import pytest

from strom.controller.messages import LogEntry, Message
from strom.controller.raft import (
    Action,
    Apply,
    BecameLeader,
    Persist,
    Proposal,
    RaftConfig,
    RaftNode,
    RestoreSnapshot,
    Send,
)
from strom.controller.raftlog import MemoryRaftLog, persist

STEP_MS = 5
ELECTION_MS = 100
HEARTBEAT_MS = 20


class SafetyViolation(AssertionError):
    pass


@dataclass
class SimNode:
    config: RaftConfig
    disk: MemoryRaftLog = field(default_factory=MemoryRaftLog)
    raft: RaftNode | None = None
    applied: list[bytes] = field(default_factory=list)  # the state machine: command per index

    @property
    def up(self) -> bool:
        return self.raft is not None


def _encode_sm(applied: list[bytes]) -> bytes:
    return json.dumps([c.hex() for c in applied]).encode()


def _decode_sm(data: bytes) -> list[bytes]:
    return [bytes.fromhex(h) for h in json.loads(data)] if data else []


class Simulation:
    def __init__(
        self,
        seed: int,
        voters: list[int],
        observers: list[int] = (),  # type: ignore[assignment]
        *,
        loss: float = 0.05,
        duplicate: float = 0.03,
        max_delay_ms: int = 40,
        crash_rate: float = 0.015,
        restart_rate: float = 0.03,
        partition_rate: float = 0.01,
        heal_rate: float = 0.02,
        propose_rate: float = 0.15,
        compact_rate: float = 0.01,
        pre_vote: bool = True,
        max_entries_per_append: int = 8,
        due_ticks: bool = False,
    ) -> None:
        self.rng = random.Random(seed)
        self.due_ticks = due_ticks
        self.early_check = random.Random(seed + 1)  # which not-due ticks are tried on a copy
        self.seed = seed
        self.now = 0
        self.loss, self.duplicate, self.max_delay_ms = loss, duplicate, max_delay_ms
        self.crash_rate, self.restart_rate = crash_rate, restart_rate
        self.partition_rate, self.heal_rate = partition_rate, heal_rate
        self.propose_rate, self.compact_rate = propose_rate, compact_rate
        self.voters = frozenset(voters)
        self.nodes: dict[int, SimNode] = {}
        for nid in [*voters, *observers]:
            cfg = RaftConfig(
                node_id=nid,
                voters=self.voters,
                observers=frozenset(observers),
                election_timeout_ms=ELECTION_MS,
                heartbeat_interval_ms=HEARTBEAT_MS,
                max_entries_per_append=max_entries_per_append,
                pre_vote=pre_vote,
            )
            self.nodes[nid] = SimNode(cfg)
            self._start(nid)
        self.queue: list[tuple[int, int, int, Message]] = []
        self.seq = 0
        self.group: dict[int, int] = dict.fromkeys(self.nodes, 0)
        # Global knowledge for the checks.
        self.leaders: dict[int, int] = {}  # term -> leader
        self.committed: dict[int, bytes] = {}  # index -> command, as applied by anyone
        self.seen: dict[tuple[int, int], tuple[bytes, int]] = {}  # (index, term) -> (cmd, prev)
        self.proposed = 0
        self.max_commit = 0

    # ---- node lifecycle ------------------------------------------------------------------

    def _start(self, nid: int) -> None:
        n = self.nodes[nid]
        state = n.disk.load()
        n.raft = RaftNode(n.config, state, now_ms=self.now, rng=random.Random(self.rng.random()))
        n.applied = _decode_sm(state.snapshot.data)
        self.run(nid, n.raft.take_actions())

    def crash(self, nid: int) -> None:
        self.nodes[nid].raft = None
        self.nodes[nid].applied = []

    # ---- carrying out actions --------------------------------------------------------------

    def run(self, nid: int, actions: list[Action]) -> None:
        n = self.nodes[nid]
        crash_at = (
            self.rng.randrange(len(actions) + 1)
            if actions and self.rng.random() < self.crash_rate / 4
            else None
        )
        for k, a in enumerate(actions):
            if k == crash_at:
                self.crash(nid)
                return
            if isinstance(a, Persist):
                persist(n.disk, a)
                self._check_persisted(nid, a)
            elif isinstance(a, Send):
                self._send(nid, a.to, a.message)
            elif isinstance(a, Apply):
                self._check_apply(nid, a.entries)
            elif isinstance(a, RestoreSnapshot):
                n.applied = _decode_sm(a.snapshot.data)
                if len(n.applied) != a.snapshot.index:
                    raise SafetyViolation(f"snapshot at {a.snapshot.index} has {len(n.applied)}")
                self._check_state_machine(nid)
            elif isinstance(a, BecameLeader):
                self._check_new_leader(nid, a.term)

    def _send(self, src: int, dst: int, message: Message) -> None:
        if self.rng.random() < self.loss:
            return
        copies = 2 if self.rng.random() < self.duplicate else 1
        for _ in range(copies):
            at = self.now + 1 + self.rng.randrange(self.max_delay_ms)
            self.seq += 1
            heapq.heappush(self.queue, (at, self.seq, dst, message))

    # ---- checks ------------------------------------------------------------------------------

    def _check_persisted(self, nid: int, p: Persist) -> None:
        disk = self.nodes[nid].disk
        if not p.entries:
            return
        base = disk.snapshot.index
        for e in p.entries:
            k = e.index - base - 1
            prev_term = disk.entries[k - 1].term if k > 0 else disk.snapshot.term
            if disk.entries[k] != e:
                raise SafetyViolation(f"node {nid}: persisted log does not hold {e}")
            key = (e.index, e.term)
            got = self.seen.setdefault(key, (e.command, prev_term))
            if got != (e.command, prev_term):
                raise SafetyViolation(f"Log Matching: {key} is {got} elsewhere, {nid} has {e}")

    def _check_apply(self, nid: int, entries: tuple[LogEntry, ...]) -> None:
        n = self.nodes[nid]
        for e in entries:
            if e.index != len(n.applied) + 1:
                raise SafetyViolation(f"node {nid} applied {e.index} after {len(n.applied)}")
            known = self.committed.setdefault(e.index, e.command)
            if known != e.command:
                raise SafetyViolation(
                    f"State Machine Safety: index {e.index} is {known!r}, {nid} applied {e!r}"
                )
            n.applied.append(e.command)
            self.max_commit = max(self.max_commit, e.index)

    def _check_state_machine(self, nid: int) -> None:
        for i, cmd in enumerate(self.nodes[nid].applied, start=1):
            known = self.committed.setdefault(i, cmd)
            if known != cmd:
                raise SafetyViolation(f"node {nid}: snapshot has {cmd!r} at {i}, not {known!r}")

    def _check_new_leader(self, nid: int, term: int) -> None:
        other = self.leaders.setdefault(term, nid)
        if other != nid:
            raise SafetyViolation(f"Election Safety: {other} and {nid} both lead term {term}")
        raft = self.nodes[nid].raft
        assert raft is not None
        snap = raft.snapshot
        in_snapshot = _decode_sm(snap.data)
        for index, cmd in self.committed.items():
            if index <= snap.index:
                ok = in_snapshot[index - 1] == cmd
            else:
                k = index - snap.index - 1
                ok = k < len(raft.entries) and raft.entries[k].command == cmd
            if not ok:
                raise SafetyViolation(f"Leader Completeness: leader {nid} lacks committed {index}")

    def check_logs_match(self) -> None:
        live = [n.raft for n in self.nodes.values() if n.raft is not None]
        for i, a in enumerate(live):
            for b in live[i + 1 :]:
                common = min(a.last_index, b.last_index)
                lo = max(a.snapshot.index, b.snapshot.index) + 1
                # the highest index where both have the same term
                top = next(
                    (k for k in range(common, lo - 1, -1) if a.term_at(k) == b.term_at(k)), 0
                )
                for k in range(lo, top + 1):
                    ea = a.entries[k - a.snapshot.index - 1]
                    eb = b.entries[k - b.snapshot.index - 1]
                    if ea != eb:
                        raise SafetyViolation(f"Log Matching: {ea} vs {eb}")

    # ---- the world ---------------------------------------------------------------------------

    def connected(self, a: int, b: int) -> bool:
        return self.group[a] == self.group[b]

    def step(self, *, chaos: bool = True) -> None:
        self.now += STEP_MS
        rng = self.rng
        if chaos:
            self._chaos()
        for nid, n in self.nodes.items():
            if n.raft is None:
                continue
            if self.due_ticks:
                due = n.raft.next_tick_ms()
                if due is None or self.now < due:
                    if self.early_check.random() < 0.1 and (early := copy.deepcopy(n.raft).tick(
                            self.now)):
                        raise SafetyViolation(
                            f"seed {self.seed}: node {nid} ticked at {self.now} before its due "
                            f"time {due} would have done {early}")
                    continue
            self.run(nid, n.raft.tick(self.now))
        while self.queue and self.queue[0][0] <= self.now:
            _, _, dst, message = heapq.heappop(self.queue)
            n = self.nodes[dst]
            if n.raft is None or not self.connected(message.sender, dst):
                continue
            self.run(dst, n.raft.receive(message, self.now))
        if rng.random() < self.propose_rate:
            self.propose()

    def _chaos(self) -> None:
        rng = self.rng
        ids = sorted(self.nodes)
        if rng.random() < self.crash_rate:
            up = [i for i in ids if self.nodes[i].up]
            if up:
                self.crash(rng.choice(up))
        if rng.random() < self.restart_rate:
            down = [i for i in ids if not self.nodes[i].up]
            if down:
                self._start(rng.choice(down))
        if rng.random() < self.partition_rate:
            self.group = {i: rng.randrange(2) for i in ids}
        if rng.random() < self.heal_rate:
            self.group = dict.fromkeys(ids, 0)
        if rng.random() < self.compact_rate:
            nid = rng.choice(ids)
            n = self.nodes[nid]
            if n.raft is not None and n.raft.last_applied > n.raft.snapshot.index:
                index = n.raft.last_applied
                self.run(nid, n.raft.compact(index, _encode_sm(n.applied[:index])))

    def propose(self) -> Proposal | None:
        for nid, n in self.nodes.items():
            if n.raft is not None and n.raft.is_leader:
                self.proposed += 1
                result = n.raft.propose(b"cmd-%d" % self.proposed)
                self.run(nid, n.raft.take_actions())
                assert isinstance(result, Proposal)
                return result
        return None

    def heal_and_check_liveness(self, within_ms: int = 5000) -> None:
        self.group = dict.fromkeys(self.nodes, 0)
        self.crash_rate = 0.0
        for nid, n in self.nodes.items():
            if not n.up:
                self._start(nid)
        deadline = self.now + within_ms
        proposal: Proposal | None = None
        command = b""
        while self.now < deadline:
            self.step(chaos=False)
            if proposal is None or self.committed.get(proposal.index, command) != command:
                proposal = self.propose()  # none yet, or lost to a change of leader
                command = b"cmd-%d" % self.proposed
                continue
            index = proposal.index
            if all(len(n.applied) >= index for n in self.nodes.values()) and all(
                n.applied[:index] == self.nodes[1].applied[:index] for n in self.nodes.values()
            ):
                return
        raise AssertionError(
            f"seed {self.seed}: no progress within {within_ms} ms after healing "
            f"(roles {[(i, n.raft.role.value if n.raft else '-') for i, n in self.nodes.items()]})"
        )


def run_seed(seed: int, voters: list[int], observers: list[int], steps: int, **kw: float) -> None:
    sim = Simulation(seed, voters, observers, **kw)  # type: ignore[arg-type]
    for _ in range(steps):
        sim.step()
    sim.check_logs_match()
    # Safety is checked as it runs; liveness once the faults stop.
    sim.loss = 0.01
    sim.duplicate = 0.0
    sim.heal_and_check_liveness()
    sim.check_logs_match()
    assert sim.max_commit > 0


@pytest.mark.parametrize("seed", range(200))
def test_three_voters_two_observers_under_faults(seed: int) -> None:
    run_seed(seed, [1, 2, 3], [4, 5], steps=600)


@pytest.mark.parametrize("seed", range(60))
def test_ticked_only_when_due(seed: int) -> None:
    """The driver ticks a node only at ``next_tick_ms()``: safety and liveness hold so, and a
    tick any earlier would have done nothing (a due time too late would fail liveness or
    check-quorum; one too early would not be caught, it only costs a wake-up)."""
    run_seed(seed, [1, 2, 3], [4, 5], steps=600, due_ticks=True)


@pytest.mark.parametrize("seed", range(40))
def test_one_voter_with_observers_under_faults(seed: int) -> None:
    run_seed(seed, [1], [2, 3], steps=300)


@pytest.mark.parametrize("seed", range(60))
def test_five_voters_without_pre_vote(seed: int) -> None:
    run_seed(
        seed,
        [1, 2, 3, 4, 5],
        [],
        steps=500,
        pre_vote=False,
        crash_rate=0.04,
        restart_rate=0.05,
        partition_rate=0.02,
        max_delay_ms=80,
        max_entries_per_append=1,
    )


@pytest.mark.parametrize("seed", range(30))
def test_heavy_loss_and_frequent_partitions(seed: int) -> None:
    run_seed(
        seed,
        [1, 2, 3],
        [4],
        steps=400,
        loss=0.3,
        duplicate=0.1,
        partition_rate=0.03,
        crash_rate=0.03,
    )


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1000, 1500))
def test_long_sweep(seed: int) -> None:
    run_seed(seed, [1, 2, 3], [4, 5], steps=1500, partition_rate=0.01, crash_rate=0.01)
