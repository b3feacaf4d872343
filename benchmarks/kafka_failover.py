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

The leader is asked of the cluster with the same client (Metadata through confluent-kafka's
admin client), so nothing here depends on a system's own API.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from benchmarks.background_writer import BackgroundWriter

TOPIC = "failover"
#: Longest a run waits for writes to resume before it records the cap.
RESUME_CAP_S = 90.0


class Target(Protocol):
    """What a run needs of a cluster: its nodes' Kafka addresses, kill and restart by id."""

    name: str

    def addresses(self) -> dict[int, str]: ...
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


def _whole(target: Target) -> int:
    """Wait until the partition has a leader and all three replicas in sync; the leader."""
    everyone = ",".join(target.addresses().values())

    def check() -> int | None:
        state = partition_state(everyone)
        return state[0] if state is not None and state[0] >= 0 and len(state[1]) == 3 \
            else None

    return int(_wait("a leader with 3 replicas in sync", check, 180))


def create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = _admin(bootstrap)  # kept while the future runs: a dropped client cancels it
    futures = admin.create_topics([NewTopic(
        TOPIC, num_partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})])
    futures[TOPIC].result(timeout=60)


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


def measure(target: Target, runs: int, progress: Callable[[str], None]) -> tuple[list[Run], int,
                                                                                  int]:
    """``runs`` kills of the partition's leader, one after the other, under one writer; then
    the read-back. Returns the runs, the acknowledged count and the lost count."""
    addresses = target.addresses()
    everyone = ",".join(addresses.values())
    create_topic(everyone)
    _whole(target)
    out: list[Run] = []
    with Writer(everyone) as writer:
        _wait("the writer's first acknowledgement",
              lambda: writer.first_ack_of_record_sent_after(0.0), 60)
        for k in range(runs):
            time.sleep(2.0)
            victim = _whole(target)
            others = [a for node, a in addresses.items() if node != victim]
            errors_before = len(writer.errors)
            progress(f"{target.name} failover {k + 1}/{runs}: node {victim} leads, kill -9")
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
                      new_leader_s, len(writer.errors) - errors_before)
            seen = "never" if new_leader_s is None else f"{new_leader_s:.2f} s"
            progress(f"  writes resumed after {run.resume_s:.2f} s (another leader in the "
                     f"metadata after {seen}); restarting node {victim}")
            out.append(run)
            target.restart(victim)
        _whole(target)
        time.sleep(1.0)
    lost = lost_records(everyone, writer.acks)
    _ADMINS.clear()
    progress(f"{target.name}: {len(writer.acks):,} of {writer.sent:,} records acknowledged, "
             f"{lost} acknowledged record(s) missing on read-back")
    return out, len(writer.acks), lost


class KafkaTarget:
    name = "kafka"

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def addresses(self) -> dict[int, str]:
        return {i: n.bootstrap for i, n in self.cluster.nodes.items()}

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

    def kill(self, node: int) -> None:
        self.cluster.kill(node)

    def restart(self, node: int) -> None:
        self.cluster.start_broker(node)


@dataclass
class Outcome:
    system: str
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


def compare(root: Path, runs: int, progress: Callable[[str], None]) -> list[Outcome]:
    """Kafka first, then Strom, each on a fresh 3-node cluster (never both at once: the
    machine has 2 cores)."""
    out = []
    for name, start in (("kafka", _kafka), ("strom", _strom)):
        progress(f"failover beside Kafka: starting 3 {name} nodes")
        (root / name).mkdir(parents=True, exist_ok=True)
        with start(root / name) as target:
            found, acked, lost = measure(target, runs, progress)
        out.append(Outcome(name, found, acked, lost))
    return out


if __name__ == "__main__":  # python -m benchmarks.kafka_failover [runs]
    import sys
    import tempfile

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory(prefix="strom-kafka-failover-") as tmp:
        for o in compare(Path(tmp), n, lambda m: print(m, flush=True)):
            print(o.system, f"median {o.median_s:.2f} s", [round(r.resume_s, 2) for r in o.runs],
                  f"acked {o.acked} lost {o.lost}")
