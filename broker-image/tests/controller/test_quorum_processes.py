"""Controller quorums of real ``python -m strom.controller`` processes on 127.0.0.1.

Checks, through the ``Quorum`` gRPC service: one voter elects itself and survives a restart;
three voters elect exactly one leader and apply the same image; after ``kill -9`` of the leader a
new one is elected and nothing committed is lost, and the killed node catches up from its disk log
(and a snapshot); a paused (SIGSTOP) leader is replaced by one with a higher term and steps down
when resumed, without losing an entry committed in its term; broker heartbeats reach the active
controller on whichever voter leads, before and after ``kill -9`` of the leader.

Every child process is killed in the fixture finalizer; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from strom.controller.metadata import (
    CreateTopic,
    Endpoint,
    MetadataImage,
    RegisterBroker,
    encode_command,
)
from strom.controller.quorum_client import QuorumClient
from strom.protocol.errors import ErrorCode, Handling, StromError, codes_with
from strom.protocol.v1 import quorum_pb2
from strom.testing.controller import controller_process
from strom.testing.process import ManagedProcess, free_ports
from strom.transport.v1 import quorum_pb2_grpc

pytestmark = pytest.mark.integration

ELECTION_MS = 500
HEARTBEAT_MS = 50


@dataclass
class Node:
    node_id: int
    address: str
    data_dir: Path
    log_path: Path
    proc: ManagedProcess | None = None
    channel: grpc.Channel | None = None
    stub: Any = None


@dataclass
class Quorum:
    root: Path
    compact_every: int
    nodes: dict[int, Node] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()

    @property
    def voters_arg(self) -> str:
        return ",".join(f"{n.node_id}@{n.address}" for n in self.nodes.values())

    def start(self, node_id: int) -> None:
        n = self.nodes[node_id]
        if n.proc is None:
            n.proc = controller_process(
                node_id, self.voters_arg, n.data_dir, n.log_path,
                "--election-timeout-ms", str(ELECTION_MS),
                "--heartbeat-interval-ms", str(HEARTBEAT_MS),
                "--compact-every", str(self.compact_every), *self.extra_args)
        n.proc.start()
        if n.channel is None:
            n.channel = grpc.insecure_channel(
                n.address,
                options=[
                    ("grpc.initial_reconnect_backoff_ms", 100),
                    ("grpc.min_reconnect_backoff_ms", 100),
                    ("grpc.max_reconnect_backoff_ms", 500),
                ],
            )
            n.stub = quorum_pb2_grpc.QuorumStub(n.channel)  # type: ignore[no-untyped-call]

    def kill(self, node_id: int) -> None:
        p = self.nodes[node_id].proc
        assert p is not None
        p.kill()

    def signal(self, node_id: int, sig: signal.Signals) -> None:
        p = self.nodes[node_id].proc
        assert p is not None
        p.send_signal(sig)

    def close(self) -> None:
        for n in self.nodes.values():
            if n.proc is not None:
                n.proc.send_signal(signal.SIGCONT)  # a paused node still dies on SIGKILL
                n.proc.kill()
            if n.channel is not None:
                n.channel.close()

    def logs(self) -> str:
        return "\n".join(
            f"--- node {n.node_id} ---\n{n.log_path.read_text(errors='replace')[-4000:]}"
            for n in self.nodes.values()
            if n.log_path.exists()
        )

    # ---- RPCs ----------------------------------------------------------------------------

    def describe(self, node_id: int, timeout: float = 0.5) -> Any | None:
        try:
            return self.nodes[node_id].stub.DescribeQuorum(
                quorum_pb2.DescribeQuorumRequest(), timeout=timeout
            )
        except grpc.RpcError:
            return None

    def metadata(self, node_id: int, timeout: float = 0.5) -> Any | None:
        try:
            return self.nodes[node_id].stub.DescribeMetadata(
                quorum_pb2.DescribeMetadataRequest(), timeout=timeout
            )
        except grpc.RpcError:
            return None

    def wait_for_leader(
        self, among: list[int], timeout: float = 10.0, min_term: int = 0
    ) -> tuple[int, int]:
        """(leader, term) once every node in ``among`` names the same leader at the same term,
        checking on every poll that no term has two leaders."""
        leaders_by_term: dict[int, set[int]] = {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            views = [self.describe(i) for i in among]
            for v in views:
                if v is not None and v.role == "leader":
                    leaders_by_term.setdefault(v.term, set()).add(v.node_id)
            for term, leaders in leaders_by_term.items():
                assert len(leaders) == 1, f"two leaders in term {term}: {leaders}"
            if all(v is not None for v in views):
                claims = {(v.leader_id, v.term) for v in views if v is not None}
                if len(claims) == 1:
                    leader, term = claims.pop()
                    if leader >= 0 and term >= min_term:
                        return leader, term
            time.sleep(0.05)
        raise AssertionError(f"no agreed leader among {among} in {timeout}s\n{self.logs()}")

    def propose(self, command: bytes, among: list[int], timeout: float = 15.0) -> int:
        """Propose through whichever node leads, following NOT_CONTROLLER hints."""
        deadline = time.monotonic() + timeout
        target = among[0]
        retried = False
        while time.monotonic() < deadline:
            try:
                r = self.nodes[target].stub.Propose(
                    quorum_pb2.ProposeRequest(command=command), timeout=5
                )
            except grpc.RpcError:
                target = among[(among.index(target) + 1) % len(among)]
                retried = True
                time.sleep(0.1)
                continue
            if not r.HasField("error"):
                return int(r.index)
            code = ErrorCode(r.error.code)
            if code is ErrorCode.TOPIC_ALREADY_EXISTS and retried:
                return 0  # an earlier attempt committed after all
            if code not in codes_with(Handling.FIND_CONTROLLER):
                raise AssertionError(f"proposal failed: {r.error}")
            retried = True
            if r.leader_hint in among and r.leader_hint != target:
                target = r.leader_hint
            else:
                target = among[(among.index(target) + 1) % len(among)]
                time.sleep(0.1)
        raise AssertionError(f"proposal did not commit in {timeout}s\n{self.logs()}")

    def wait_for(self, predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}\n{self.logs()}")
            time.sleep(0.05)

    def wait_same_image(self, among: list[int], topics: set[str], timeout: float = 15.0) -> bytes:
        """The image once every node in ``among`` has applied the same one, holding ``topics``."""
        deadline = time.monotonic() + timeout
        last: list[Any] = []
        while time.monotonic() < deadline:
            last = [self.metadata(i) for i in among]
            if all(m is not None for m in last):
                images = {m.image for m in last}
                if len(images) == 1 and topics <= set(last[0].topics):
                    return bytes(last[0].image)
            time.sleep(0.1)
        raise AssertionError(
            f"images differ or lack {sorted(topics)}: "
            f"{[(m.offset, list(m.topics)) if m else None for m in last]}\n{self.logs()}"
        )


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[Callable[..., Quorum]]:
    made: list[Quorum] = []

    def make(voters: int, compact_every: int = 1000, extra_args: tuple[str, ...] = ()) -> Quorum:
        q = Quorum(tmp_path / f"q{len(made)}", compact_every, extra_args=extra_args)
        made.append(q)
        for i, port in enumerate(free_ports(voters)):
            q.nodes[i] = Node(i, f"127.0.0.1:{port}", q.root / f"node{i}", q.root / f"node{i}.log")
        q.root.mkdir(parents=True)
        for i in q.nodes:
            q.start(i)
        return q

    yield make
    for q in made:
        q.close()


def _content(image: bytes) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(image)
    body.pop("offset")
    return body


def _register(broker_id: int) -> bytes:
    endpoint = Endpoint("PLAINTEXT", "127.0.0.1", 9092 + broker_id)
    return encode_command(RegisterBroker(broker_id, uuid.uuid4().hex, (endpoint,)))


def _topic(name: str) -> bytes:
    return encode_command(CreateTopic(name, uuid.uuid4().hex, ((0, 1, 2), (1, 2, 0))))


def _setup_brokers(q: Quorum, among: list[int]) -> None:
    for b in range(3):
        q.propose(_register(b), among)


ALL = [0, 1, 2]


def test_single_voter_elects_itself_commits_and_restarts(quorum: Callable[..., Quorum]) -> None:
    q = quorum(1)
    leader, term = q.wait_for_leader([0])
    assert leader == 0 and term >= 1
    _setup_brokers(q, [0])
    first = q.propose(_topic("solo"), [0])
    assert first > 0

    # The active controller writes the cluster id on its first leadership, concurrently.
    def has_cluster_id() -> bool:
        m = q.metadata(0)
        return m is not None and json.loads(m.image)["cluster_id"] != ""

    q.wait_for(has_cluster_id, "a cluster id")
    again = q.nodes[0].stub.Propose(quorum_pb2.ProposeRequest(command=_topic("solo")), timeout=5)
    assert ErrorCode(again.error.code) is ErrorCode.TOPIC_ALREADY_EXISTS
    before = q.wait_same_image([0], {"solo"})

    q.signal(0, signal.SIGTERM)
    proc = q.nodes[0].proc
    assert proc is not None
    assert proc.wait_stopped(10) and proc.returncode == 0
    q.start(0)
    q.wait_for_leader([0], min_term=term + 1)
    after = q.wait_same_image([0], {"solo"})
    # The same brokers and topics; only the offset moved (the new term's no-op entry).
    assert _content(after) == _content(before)
    assert "strom controller 0 is the leader in term" in q.logs()


def test_three_voters_one_leader_same_image(quorum: Callable[..., Quorum]) -> None:
    q = quorum(3)
    leader, _ = q.wait_for_leader(ALL)
    _setup_brokers(q, ALL)
    names = {f"t{k}" for k in range(5)}
    indexes = [q.propose(_topic(name), ALL) for name in sorted(names)]
    assert indexes == sorted(indexes) and len(set(indexes)) == len(indexes)
    data = q.wait_same_image(ALL, names)
    image = MetadataImage.from_snapshot(data)
    assert set(image.brokers) == {0, 1, 2}
    assert image.topics["t0"].partitions[1].replicas == [1, 2, 0]

    follower = next(i for i in ALL if i != leader)
    r = q.nodes[follower].stub.Propose(quorum_pb2.ProposeRequest(command=_topic("x")), timeout=5)
    assert ErrorCode(r.error.code) is ErrorCode.NOT_CONTROLLER
    assert r.leader_hint == leader
    assert r.leader_address == q.nodes[leader].address

    view = q.describe(leader)
    assert view is not None and view.role == "leader"
    assert [v.node_id for v in view.voters] == ALL
    assert next(v for v in view.voters if v.node_id == leader).match_index == view.last_index
    assert view.commit_index >= max(indexes)


def test_kill_leader_new_leader_and_restart_catches_up(quorum: Callable[..., Quorum]) -> None:
    q = quorum(3, compact_every=4)
    leader, term = q.wait_for_leader(ALL)
    _setup_brokers(q, ALL)
    before = {f"a{k}" for k in range(4)}
    for name in sorted(before):
        q.propose(_topic(name), ALL)
    q.wait_same_image(ALL, before)

    q.kill(leader)
    killed_at = time.monotonic()
    rest = [i for i in ALL if i != leader]
    new_leader, new_term = q.wait_for_leader(rest, timeout=10, min_term=term + 1)
    assert new_leader != leader and new_term > term
    assert time.monotonic() - killed_at < 8
    after = {f"b{k}" for k in range(8)}  # more than compact_every: the leader snapshots
    for name in sorted(after):
        q.propose(_topic(name), rest)
    q.wait_same_image(rest, before | after)

    q.start(leader)
    image = q.wait_same_image(ALL, before | after, timeout=20)
    assert before | after <= set(MetadataImage.from_snapshot(image).topics)
    assert q.wait_for_leader(ALL)[0] == new_leader


def test_paused_leader_is_replaced_and_steps_down(quorum: Callable[..., Quorum]) -> None:
    q = quorum(3)
    leader, term = q.wait_for_leader(ALL)
    _setup_brokers(q, ALL)
    before = {f"p{k}" for k in range(3)}
    for name in sorted(before):
        q.propose(_topic(name), ALL)
    q.wait_same_image(ALL, before)

    q.signal(leader, signal.SIGSTOP)
    try:
        rest = [i for i in ALL if i != leader]
        new_leader, new_term = q.wait_for_leader(rest, timeout=10, min_term=term + 1)
        assert new_leader != leader and new_term > term
        during = {f"q{k}" for k in range(3)}
        for name in sorted(during):
            q.propose(_topic(name), rest)
    finally:
        q.signal(leader, signal.SIGCONT)

    agreed, agreed_term = q.wait_for_leader(ALL, timeout=10, min_term=new_term)
    assert agreed == new_leader and agreed_term >= new_term
    old = q.describe(leader)
    assert old is not None and old.role == "follower"
    q.wait_same_image(ALL, before | during)


async def test_quorum_client_follows_the_leader_through_failover(
    quorum: Callable[..., Quorum],
) -> None:
    q = quorum(3)
    leader, term = q.wait_for_leader(ALL)
    voters = {i: n.address for i, n in q.nodes.items()}
    async with QuorumClient(voters) as client:
        client.leader = next(i for i in ALL if i != leader)  # a stale guess: it must follow
        for b in range(3):
            await client.propose(_register(b))
        assert client.leader == leader
        await client.propose(_topic("c0"))
        with pytest.raises(StromError) as info:
            await client.propose(_topic("c0"))
        assert info.value.code is ErrorCode.TOPIC_ALREADY_EXISTS

        q.kill(leader)
        index = await client.propose(_topic("c1"), timeout_s=20)
        assert client.leader != leader and index > 0
        image = await client.describe_metadata(client.leader)
        assert {"c0", "c1"} <= set(image.topics)
        view = await client.describe_quorum(client.leader)
        assert view.role == "leader" and view.term > term


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A port that accepts connections, as a live broker's does: the controller's liveness
    probe finds it open, so only the session timeout fences a silent simulated broker."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


async def test_broker_heartbeats_reach_the_active_controller_through_failover(
    quorum: Callable[..., Quorum], listening_port: int,
) -> None:
    session_ms = 1500
    q = quorum(3, extra_args=("--session-timeout-ms", str(session_ms), "--cluster-id", "c-1"))
    leader, _ = q.wait_for_leader(ALL)
    voters = {i: n.address for i, n in q.nodes.items()}
    endpoint = Endpoint("PLAINTEXT", "127.0.0.1", listening_port)
    async with QuorumClient(voters) as client:
        client.leader = next(i for i in ALL if i != leader)  # a stale guess: it must follow
        epochs = {}
        for b in (0, 1):
            command = encode_command(RegisterBroker(b, f"inc-{b}", (endpoint,)))
            epochs[b] = await client.propose(command)
        for b in (0, 1):
            r = await client.heartbeat(b, f"inc-{b}", epochs[b], epochs[b] - 1)
            assert r.fenced and not r.shutdown_ready  # not caught up with its registration
            r = await client.heartbeat(b, f"inc-{b}", epochs[b], epochs[b])
            assert not r.fenced and r.leader_hint == leader
        assert client.leader == leader
        with pytest.raises(StromError) as info:
            await client.heartbeat(0, "inc-old", epochs[0], epochs[0])
        assert info.value.code is ErrorCode.STALE_BROKER_EPOCH
        image = await client.describe_metadata(leader)
        assert image.cluster_id == "c-1"
        assert not image.brokers[0].fenced and not image.brokers[1].fenced

        q.kill(leader)
        r = await client.heartbeat(0, "inc-0", epochs[0], epochs[0], timeout_s=20)
        assert not r.fenced and client.leader is not None and client.leader != leader
        # Broker 0 keeps heartbeating and stays unfenced; silent broker 1 is fenced by the new
        # active controller once its fresh session expires.
        deadline = time.monotonic() + 3 * session_ms / 1000 + 10
        while True:
            r = await client.heartbeat(0, "inc-0", epochs[0], epochs[0], timeout_s=5)
            assert not r.fenced
            assert client.leader is not None
            image = await client.describe_metadata(client.leader)
            if image.brokers[1].fenced:
                break
            assert time.monotonic() < deadline, f"broker 1 never fenced\n{q.logs()}"
            await asyncio.sleep(0.2)
        assert not image.brokers[0].fenced and image.cluster_id == "c-1"
        assert "fencing broker 1: no heartbeat" in q.logs()
