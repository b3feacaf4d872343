"""Failover beside Apache Kafka: how long acks=all writes to a partition stop when its leader is
killed (``kill -9``), on a 3-node Kafka (KRaft, combined mode) and on 3 Strom brokers, with the
same client (confluent-kafka) and the same load, and whether any acknowledged record is lost.

Both clusters run their production defaults for failure detection (Kafka: a broker is fenced
9 s after its last heartbeat, ``broker.session.timeout.ms``; Strom: 3 s, plus the controller's
connection-refused probe, see docs/decisions.md "Failover"). One partition, RF 3,
``min.insync.replicas=2``. A producer thread (acks=all, idempotent, ``linger.ms=0``) sends one
numbered record every ``interval_s``; the figure of a run is the time from the kill to the first
acknowledgement of a record *sent after* the kill (the partition takes writes again). The victim
is restarted and the ISR whole again before the next run. At the end the partition is read from
the start and every acknowledged (offset, value) must be there: lost records are counted.

Faults (:data:`FAULTS`):

- ``kill``: ``kill -9`` of whichever node leads the partition (in KRaft combined mode it is
  also the active controller in about one run of three; each run records whether it was);
- ``kill-controller``: the partition's leader is first moved to the node that is the active
  controller, then killed: the quorum must elect a new controller before anyone can fence the
  dead broker and elect a new partition leader (the same fault as ``failover.py``'s).

The leader is asked of the cluster with the same client (Metadata through confluent-kafka's
admin client), and moved with the same client on both systems (kafka-python's admin client:
AlterPartitionReassignments to put the controller first in the replica list, then a preferred
ElectLeaders; confluent-kafka 2.16 has ElectLeaders but no AlterPartitionReassignments). Only
*which node is the active controller* is asked each system its own way (:meth:`Target.
controller`): Kafka answers Metadata with a random broker as the controller id in KRaft, so its
own ``MetadataQuorumCommand`` (``describe --status``, LeaderId: the quorum leader is the active
controller) is asked; Strom's DescribeCluster names its active controller.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from benchmarks.background_writer import BackgroundWriter

TOPIC = "failover"
FAULTS = ("kill", "kill-controller")
#: Longest a run waits for writes to resume before it records the cap.
RESUME_CAP_S = 90.0


class Target(Protocol):
    """What a run needs of a cluster: its nodes' Kafka addresses, its active controller, kill
    and restart by id."""

    name: str

    def addresses(self) -> dict[int, str]: ...
    def controller(self) -> int:
        """The node that is the active controller now, asked the system's own way (no Kafka
        client API names it: KRaft answers Metadata with a random broker)."""
        ...
    def kill(self, node: int) -> None: ...
    def restart(self, node: int) -> None: ...


@dataclass
class Run:
    victim: int
    resume_s: float
    """Kill to the first acknowledgement of a record sent after the kill (the cap if never)."""
    new_leader_s: float | None
    """Kill to a surviving node's Metadata naming another leader (None: not seen)."""
    failed_sends: int
    fault: str = "kill"
    controller: int = -1
    """The active controller as the system named it just before the kill."""
    controller_after: int = -1
    """The active controller as the system named it once writes had resumed (before the
    restart): another node when the victim was the controller."""
    load_1m: float = 0.0
    """The machine's 1-minute load average at the kill."""

    @property
    def victim_was_controller(self) -> bool:
        return self.victim == self.controller


@dataclass
class Writer(BackgroundWriter):
    """One numbered record every ``interval_s`` (acks=all, idempotent); every acknowledgement
    kept as (send time, ack time, partition offset, value)."""

    sent: int = 0

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 0,
                             "error_cb": lambda err: self.error(str(err))})
        deadline = self.deadline()
        while self.running(deadline):
            value = str(self.sent).encode()
            sent = time.monotonic()
            producer.produce(TOPIC, value, partition=0,
                             on_delivery=lambda err, msg, t=sent: self._done(t, err, msg))
            self.sent += 1
            producer.poll(0)
            time.sleep(self.interval_s)
        producer.flush(150)

    def _done(self, sent: float, err: Any, msg: Any) -> None:
        if err is None:
            with self.lock:
                self.acks.append((sent, time.monotonic(), msg.offset(), msg.value()))
        else:
            self.error(str(err))


_ADMINS: dict[str, Any] = {}


def _admin(bootstrap: str) -> Any:
    """One admin client per address list, kept (a client per poll would connect each time);
    its connection-refused lines while a node is down are the expected state, not logged."""
    from confluent_kafka.admin import AdminClient

    if bootstrap not in _ADMINS:
        _ADMINS[bootstrap] = AdminClient({"bootstrap.servers": bootstrap,
                                          "socket.timeout.ms": 2000, "log_level": 2})
    return _ADMINS[bootstrap]


def partition_state(bootstrap: str) -> tuple[int, list[int]] | None:
    """(leader, ISR) of ``failover-0`` as the node(s) at ``bootstrap`` report it."""
    try:
        meta = _admin(bootstrap).list_topics(TOPIC, timeout=2).topics.get(TOPIC)
    except Exception:
        return None
    if meta is None or meta.error is not None or 0 not in meta.partitions:
        return None
    p = meta.partitions[0]
    return int(p.leader), sorted(int(r) for r in p.isrs)


def _wait(what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got is not None and got is not False:
            return got
        if time.monotonic() > deadline:
            raise RuntimeError(f"failover benchmark: {what} not within {timeout:.0f} s")
        time.sleep(0.1)


def wait_whole(target: Target) -> int:
    """Wait until the partition has a leader and all three replicas in sync; the leader."""
    everyone = ",".join(target.addresses().values())

    def check() -> int | None:
        state = partition_state(everyone)
        return state[0] if state is not None and state[0] >= 0 and len(state[1]) == 3 \
            else None

    return int(_wait("a leader with 3 replicas in sync", check, 180))


def create_topic(bootstrap: str) -> None:
    """Create ``failover`` (1 partition, RF 3, ``min.insync.replicas=2``) unless it exists (the
    second fault measured on a cluster writes on after the first)."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = _admin(bootstrap)  # kept while the future runs: a dropped client cancels it
    if TOPIC in admin.list_topics(timeout=10).topics:
        return
    futures = admin.create_topics([NewTopic(
        TOPIC, num_partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})])
    futures[TOPIC].result(timeout=60)


def lead_from(target: Target, node: int, timeout: float = 60.0) -> None:
    """Make ``node`` the leader of ``failover-0`` (its replicas stay the three nodes): the same
    Kafka Admin API calls on both systems, through kafka-python's admin client --
    AlterPartitionReassignments puts ``node`` first in the replica list (a reorder, no data
    moves), then a preferred ElectLeaders until the Metadata names ``node``. The ISR must be
    whole (a preferred replica out of the ISR cannot be elected)."""
    from kafka import KafkaAdminClient, TopicPartition

    everyone = ",".join(target.addresses().values())
    state = partition_state(everyone)
    if state is not None and state[0] == node:
        return
    replicas = [node, *sorted(n for n in target.addresses() if n != node)]
    admin = KafkaAdminClient(bootstrap_servers=everyone.split(","),
                             client_id="strom-failover-bench", request_timeout_ms=10_000)
    try:
        tp = TopicPartition(TOPIC, 0)
        err = admin.alter_partition_reassignments({tp: replicas}).get(tp)
        if err is not None:
            raise RuntimeError(f"failover benchmark: reassigning {TOPIC}-0 to {replicas} on "
                               f"{target.name} failed: {err.__name__}")
        _wait(f"the reassignment of {TOPIC}-0 to {replicas} to finish",
              lambda: not admin.list_partition_reassignments({TOPIC: [0]}), timeout)

        def elected() -> bool:
            admin.elect_leaders(0, {TOPIC: [0]}, raise_errors=False)  # 0: preferred
            now = partition_state(everyone)
            return now is not None and now[0] == node

        _wait(f"node {node} to lead {TOPIC}-0 on {target.name}", elected, timeout)
    finally:
        admin.close()


def lead_from_the_controller(target: Target, attempts: int = 3) -> int:
    """Move the partition's leader to the active controller and wait until the ISR is whole;
    the leader (= the controller). Tried again if the controller changed meanwhile; an error
    if it never holds."""
    for _ in range(attempts):
        wait_whole(target)  # the restarted node back in the ISR: any node can be preferred
        controller = target.controller()
        if controller < 0:  # an election in progress
            time.sleep(2.0)
            continue
        lead_from(target, controller)
        leader = wait_whole(target)
        if leader == controller == target.controller():  # asked again after the move
            return leader
    raise RuntimeError(f"failover benchmark: could not put {TOPIC}-0's leader on the active "
                       f"controller of {target.name} in {attempts} attempts")


def lost_records(bootstrap: str, acks: list[tuple[Any, ...]],
                 timeout_s: float = 120.0) -> int:
    """How many acknowledged (offset, value) pairs the partition does not hold, read from the
    start once the cluster is whole again."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    want = {offset: value for _, _, offset, value in acks}
    if not want:
        return 0
    last = max(want)
    consumer = Consumer({"bootstrap.servers": bootstrap,
                         "group.id": f"failover-check-{time.time_ns()}",
                         "enable.auto.commit": False})
    got: dict[int, bytes] = {}
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (not got or max(got) < last):
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                if msg.error() is None:
                    got[msg.offset()] = msg.value()
    finally:
        consumer.close()
    return sum(1 for offset, value in want.items() if got.get(offset) != value)


def measure(target: Target, runs: int, progress: Callable[[str], None],
            fault: str = "kill") -> tuple[list[Run], int, int]:
    """``runs`` kills of the partition's leader (``fault`` in :data:`FAULTS`), one after the
    other, under one writer; then the read-back. Returns the runs, the acknowledged count and
    the lost count."""
    if fault not in FAULTS:
        raise ValueError(f"fault={fault!r}: the Kafka failover comparison knows "
                         f"{', '.join(FAULTS)}")
    addresses = target.addresses()
    everyone = ",".join(addresses.values())
    create_topic(everyone)
    wait_whole(target)
    out: list[Run] = []
    with Writer(everyone) as writer:
        _wait("the writer's first acknowledgement",
              lambda: writer.first_ack_of_record_sent_after(0.0), 60)
        for k in range(runs):
            time.sleep(2.0)
            if fault == "kill-controller":  # confirmed the controller after the move
                victim = controller = lead_from_the_controller(target)
            else:
                victim = wait_whole(target)
                controller = target.controller()
            others = [a for node, a in addresses.items() if node != victim]
            errors_before = len(writer.errors)
            role = "leads and is the active controller" if controller == victim else \
                f"leads (node {controller} is the active controller)"
            progress(f"{target.name} failover {fault} {k + 1}/{runs}: node {victim} {role}, "
                     f"kill -9")
            load = os.getloadavg()[0]
            target.kill(victim)
            t0 = time.monotonic()
            new_leader_s: float | None = None
            resumed: float | None = None
            while time.monotonic() - t0 < RESUME_CAP_S:
                if new_leader_s is None:
                    for address in others:
                        state = partition_state(address)
                        if state is not None and state[0] not in (-1, victim):
                            new_leader_s = time.monotonic() - t0
                            break
                resumed = writer.first_ack_of_record_sent_after(t0)
                if resumed is not None and new_leader_s is not None:
                    break
                time.sleep(0.02)
            run = Run(victim, (resumed - t0) if resumed is not None else RESUME_CAP_S,
                      new_leader_s, len(writer.errors) - errors_before, fault, controller,
                      _controller_after(target), load)
            seen = "never" if new_leader_s is None else f"{new_leader_s:.2f} s"
            progress(f"  writes resumed after {run.resume_s:.2f} s (another leader in the "
                     f"metadata after {seen}; active controller now node "
                     f"{run.controller_after}); restarting node {victim}")
            out.append(run)
            target.restart(victim)
        wait_whole(target)
        time.sleep(1.0)
    lost = lost_records(everyone, writer.acks)
    _ADMINS.clear()
    progress(f"{target.name}: {len(writer.acks):,} of {writer.sent:,} records acknowledged, "
             f"{lost} acknowledged record(s) missing on read-back")
    return out, len(writer.acks), lost


def _controller_after(target: Target) -> int:
    """The active controller after the kill, -1 if none is named within 30 s."""
    try:
        return int(_wait("an active controller after the kill",
                         lambda: (c if (c := target.controller()) >= 0 else None), 30))
    except RuntimeError:
        return -1


_QUORUM_LEADER = re.compile(r"^LeaderId:\s+(-?\d+)\s*$", re.MULTILINE)


def parse_quorum_leader(output: str) -> int:
    """The ``LeaderId`` of ``MetadataQuorumCommand describe --status``: the node leading the
    metadata quorum, i.e. the active controller."""
    match = _QUORUM_LEADER.search(output)
    if match is None:
        raise ValueError(f"MetadataQuorumCommand printed no LeaderId line: {output[-800:]!r}")
    return int(match.group(1))


def kafka_active_controller(bootstrap: str, timeout: float = 60.0) -> int:
    """Kafka's active controller, asked with Kafka's own tool (``kafka-metadata-quorum.sh
    --bootstrap-server B describe --status``; a broker forwards DescribeQuorum to the
    controller)."""
    from strom.testing.kafka_tools import run_tool

    result = run_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server",
                      bootstrap, "describe", "--status", timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"MetadataQuorumCommand exited {result.returncode}:\n"
                           f"{(result.stdout + result.stderr)[-2000:]}")
    return parse_quorum_leader(result.stdout)


class KafkaTarget:
    name = "kafka"

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def addresses(self) -> dict[int, str]:
        return {i: n.bootstrap for i, n in self.cluster.nodes.items()}

    def controller(self) -> int:
        live = ",".join(n.bootstrap for n in self.cluster.nodes.values() if n.is_alive())
        return kafka_active_controller(live)

    def kill(self, node: int) -> None:
        self.cluster.kill(node)
        self.cluster.nodes[node].process.wait_stopped(10)

    def restart(self, node: int) -> None:
        self.cluster.start_node(node)


class StromTarget:
    name = "strom"

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def addresses(self) -> dict[int, str]:
        return {i: b.kafka_bootstrap for i, b in self.cluster.brokers.items()}

    def controller(self) -> int:
        """Strom's own cluster API (DescribeCluster over gRPC names the active controller; its
        Kafka listener has no DescribeQuorum)."""
        return int(self.cluster.controller_id())

    def kill(self, node: int) -> None:
        self.cluster.kill(node)

    def restart(self, node: int) -> None:
        self.cluster.start_broker(node)


@dataclass
class Outcome:
    system: str
    fault: str
    runs: list[Run]
    acked: int
    lost: int

    @property
    def median_s(self) -> float:
        return statistics.median(r.resume_s for r in self.runs)


@contextmanager
def _kafka(root: Path) -> Iterator[KafkaTarget]:
    from strom.testing.kafka import running_kafka

    with running_kafka(3, root=root, config={"auto.create.topics.enable": "false"}) as kafka:
        yield KafkaTarget(kafka)


@contextmanager
def _strom(root: Path) -> Iterator[StromTarget]:
    from benchmarks.failover import production_defaults
    from strom.testing import running_cluster

    with running_cluster(root, brokers=3, config=production_defaults()) as cluster:
        yield StromTarget(cluster)


def compare(root: Path, runs: int, progress: Callable[[str], None],
            faults: tuple[str, ...] = FAULTS) -> list[Outcome]:
    """Kafka first, then Strom, each on a fresh 3-node cluster (never both at once: the
    machine has 2 cores); on each, ``runs`` runs of every fault in ``faults``, in order."""
    out = []
    for name, start in (("kafka", _kafka), ("strom", _strom)):
        progress(f"failover beside Kafka: starting 3 {name} nodes")
        (root / name).mkdir(parents=True, exist_ok=True)
        with start(root / name) as target:
            for fault in faults:
                found, acked, lost = measure(target, runs, progress, fault)
                out.append(Outcome(name, fault, found, acked, lost))
    return out


if __name__ == "__main__":  # python -m benchmarks.kafka_failover [runs] [faults...]
    import sys
    import tempfile

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    chosen = tuple(sys.argv[2:]) or FAULTS
    with tempfile.TemporaryDirectory(prefix="strom-kafka-failover-") as tmp:
        for o in compare(Path(tmp), n, lambda m: print(m, flush=True), chosen):
            print(o.system, o.fault, f"median {o.median_s:.2f} s",
                  [round(r.resume_s, 2) for r in o.runs],
                  "victim was controller", [r.victim_was_controller for r in o.runs],
                  "load", [round(r.load_1m, 1) for r in o.runs],
                  f"acked {o.acked} lost {o.lost}")
