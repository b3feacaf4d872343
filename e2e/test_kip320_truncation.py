"""KIP-320 end to end: real Kafka consumers -- librdkafka (confluent-kafka) and Kafka's Java
consumer -- detect that records they already read were lost by an unclean leader election on
Strom, and do what they do against Kafka.

The scenario (3 brokers; broker 0 is the only controller voter, so stopping the two replicas
never costs the quorum): a topic on replicas [1, 2] with ``min.insync.replicas=1`` and
``unclean.leader.election.enable=true``. Both replicas get ``before-0..9`` (acks=all); the
follower F is frozen (SIGSTOP) until the controller drops it from the ISR; the leader L alone
takes ``lost-0..9`` (offsets 10..19, acks=1) and every consumer reads them; L is killed, F thawed
and elected uncleanly (it was not in the ISR); F takes ``new-0..14`` at offsets 10..24 in a new
leader epoch. A consumer that did not validate its position would fetch from 20 and return
``new-10..14`` as if nothing happened. What each client does instead (Kafka's and librdkafka's
own code, see docs/decisions.md "KIP-320 truncation with real consumers"):

- on the leader change it sends OffsetForLeaderEpoch(epoch of the last record it read) to F,
  which answers the end of that epoch in its log: 10, below the position 20;
- librdkafka, ``auto.offset.reset=earliest``: seeks to 10 and reads ``new-0..14``;
  ``auto.offset.reset=error``: an error "Partition log truncation detected at offset 20 ...
  broker end offset is 10" (code ``_AUTO_OFFSET_RESET``: it has no position left);
- Java, ``auto.offset.reset=earliest``: resets to 10 ("Truncation detected ... resetting offset
  to the first offset known to diverge") and reads ``new-0..14``; ``auto.offset.reset=none``:
  poll() throws ``LogTruncationException`` naming 10 as the divergent offset;
- a group member of each client commits every record (offset and epoch) and stops before the
  election; a new member started after it from the commit (offset 20): Java validates the
  commit's epoch and starts at 10; librdkafka does not validate a committed offset (its issue
  #5158) and reads from 20, on Kafka as here.

The same scenario and assertions run on 3 Apache Kafka 4.3.1 nodes (``[kafka]``): the clients
behave the same there, so what is asserted is Kafka's behaviour, not a guess at it. Kafka's
nodes are all controller voters: with L dead and F frozen it has no quorum until F is thawed,
which the scenario does next. Cost: ~25 s for Strom, 70-90 s for Kafka (3 JVM nodes) at load 9-14.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from strom.testing import running_cluster
from strom.testing.kafka import require_jars, running_kafka
from strom.testing.kafka_tools import json_lines, running_java
from strom.testing.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "kip320"
REPLICAS = [1, 2]
BEFORE, LOST, NEW = 10, 10, 15
JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "TruncationConsumer.java"
#: The code librdkafka gives the error when ``auto.offset.reset=error`` leaves it no position
#: (RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET, -140); the truncation is named in its text.
AUTO_OFFSET_RESET = -140


@dataclass
class Seen:
    """What one consumer returned, in order: ("record", offset, epoch, value) and ("error",
    code, text) / ("truncation", position, divergent, message)."""

    events: list[tuple[Any, ...]] = field(default_factory=list)

    def values(self) -> list[tuple[int, str]]:
        return [(e[1], e[3]) for e in self.events if e[0] == "record"]

    def has(self, value: str) -> bool:
        return any(v == value for _, v in self.values())


class RdConsumer:
    """A librdkafka consumer of partition 0 from offset 0, polled by a thread of the test."""

    def __init__(self, bootstrap: str, reset: str, group: str | None = None,
                 name: str | None = None) -> None:
        from confluent_kafka import OFFSET_STORED, Consumer, TopicPartition

        self.name = name or f"librdkafka auto.offset.reset={reset}"
        self.seen = Seen()
        self._grouped = group is not None
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group or f"kip320-{reset}",
            "enable.auto.commit": False, "auto.offset.reset": reset,
            "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 500,
            # a frozen broker (SIGSTOP) may be the group's coordinator: give up on it in 5 s
            "socket.timeout.ms": 5000})
        # without a group: from offset 0; with one: from its committed offset and epoch
        self._consumer.assign([TopicPartition(TOPIC, 0, OFFSET_STORED if group else 0)])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                self.seen.events.append(("error", err.code(), err.str()))
            else:
                if self._grouped:  # the offset after it and its leader epoch
                    self._consumer.commit(message=msg, asynchronous=False)
                value = msg.value()
                self.seen.events.append(("record", msg.offset(), msg.leader_epoch(),
                                         value.decode() if value is not None else ""))

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


class JavaConsumer:
    """Kafka's Java consumer (e2e/java/TruncationConsumer.java), its JSON lines in a file."""

    def __init__(self, stack: ExitStack, bootstrap: str, reset: str, log: Path,
                 group: str | None = None, name: str | None = None) -> None:
        self.name = name or f"Java auto.offset.reset={reset}"
        self.log = log
        self.proc = stack.enter_context(running_java(
            str(JAVA_SOURCE), bootstrap, TOPIC, reset, "120", *([group] if group else []),
            log_path=log, name=self.name))

    @property
    def seen(self) -> Seen:
        seen = Seen()
        for e in json_lines(self.log):
            if e["event"] == "record":
                seen.events.append(("record", e["offset"], e["epoch"], e["value"]))
            elif e["event"] == "truncation":
                seen.events.append(("truncation", e["position"], e["divergent"], e["message"]))
        return seen

    def close(self) -> None:
        self.proc.stop()


Client = RdConsumer | JavaConsumer


def produce(bootstrap: str, values: list[str], acks: str) -> None:
    """Send and wait for every acknowledgement (bounded: 30 s)."""
    from confluent_kafka import KafkaException, Producer

    failed: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks,
                         "enable.idempotence": False, "message.timeout.ms": 30_000,
                         "linger.ms": 0, "max.in.flight": 1})
    for v in values:
        producer.produce(TOPIC, v.encode(), partition=0,
                         on_delivery=lambda err, _m: failed.append(str(err)) if err else None)
    left = producer.flush(35)
    if left or failed:
        raise KafkaException(f"{left} records unsent, errors {failed[:3]}")


def commit_start(bootstrap: str, group: str) -> None:
    """Commit offset 0 for ``group``, retried until its coordinator answers: the offsets topic is
    created by the first group request (COORDINATOR_NOT_AVAILABLE meanwhile), and librdkafka
    does not retry a failed committed-offset fetch of an ``assign()``ed partition."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})

    def commit() -> bool:
        try:
            consumer.commit(offsets=[TopicPartition(TOPIC, 0, 0)], asynchronous=False)
        except KafkaException:
            return False
        return True

    try:
        wait_until(commit, 60, what=f"a commit of group {group}", interval_s=0.2)
    finally:
        consumer.close()


def wait_all(clients: list[Client], done: Callable[[Seen], bool], what: str,
             timeout: float) -> None:
    try:
        wait_until(lambda: all(done(c.seen) for c in clients), timeout, what=what,
                   interval_s=0.2)
    except AssertionError as err:
        detail = {c.name: c.seen.events[-6:] for c in clients if not done(c.seen)}
        raise AssertionError(f"{err}\nnot there yet (last events): {detail}") from None


RD_GROUP, JAVA_GROUP = "kip320-rd", "kip320-java"


@contextmanager
def stopped_at_exit() -> Iterator[tuple[ExitStack, list[Client]]]:
    """An ExitStack for the Java processes and a list of clients closed at exit."""
    with ExitStack() as stack:
        clients: list[Client] = []
        stack.callback(lambda: [c.close() for c in clients])
        yield stack, clients


def group_members(stack: ExitStack, clients: list[Client], bootstrap: str, java_log: Path,
                  label: str) -> list[Client]:
    """A librdkafka member of RD_GROUP and a Java member of JAVA_GROUP, both committing every
    record, added to ``clients`` (closed at exit)."""
    members: list[Client] = []
    members.append(RdConsumer(bootstrap, "earliest", RD_GROUP, f"librdkafka group, {label}"))
    clients.append(members[-1])
    members.append(JavaConsumer(stack, bootstrap, "earliest", java_log, JAVA_GROUP,
                                f"Java group, {label}"))
    clients.append(members[-1])
    return members


@dataclass
class System:
    """Where the scenario runs: Strom's brokers or Apache Kafka's nodes, ids 0, 1, 2, the topic
    on 1 and 2 (node 0 is never stopped: it answers the Metadata the waits read)."""

    bootstrap: str
    observer: str
    pause: Callable[[int], None]
    resume: Callable[[int], None]
    kill: Callable[[int], None]

    def leader_and_isr(self) -> tuple[int, list[int]] | None:
        """The partition's leader and ISR as node 0 answers Metadata (None if it does not)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        try:
            md = AdminClient({"bootstrap.servers": self.observer}).list_topics(TOPIC, timeout=3)
            p = md.topics[TOPIC].partitions[0]
        except (KafkaException, KeyError):
            return None
        return int(p.leader), sorted(p.isrs)


TOPIC_CONFIG = {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}


@contextmanager
def strom_system(root: Path) -> Iterator[System]:
    # broker 0 the only voter: stopping the two replicas never costs the quorum
    with running_cluster(root, brokers=3, voters=[0]) as cluster, cluster.admin() as admin:
        admin.create_topic(TOPIC, 1, 2, TOPIC_CONFIG)
        # Strom chooses assignments (CreateTopics refuses explicit ones): move it onto 1 and 2
        if sorted(cluster.partition(TOPIC, 0).replicas) != REPLICAS:
            admin.alter_partition_reassignments({(TOPIC, 0): REPLICAS})
            cluster.wait_reassignments_done([TOPIC])
        yield System(cluster.kafka_bootstrap, cluster.brokers[0].kafka_bootstrap,
                     cluster.pause, cluster.resume, cluster.kill)


@contextmanager
def kafka_system(root: Path) -> Iterator[System]:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    # every Kafka node is a voter: with the leader dead and the follower frozen there is no
    # quorum until the follower is thawed, which the scenario does next
    config = {"auto.create.topics.enable": "false", "broker.session.timeout.ms": "3000",
              "broker.heartbeat.interval.ms": "300", "replica.lag.time.max.ms": "3000"}
    root.mkdir(parents=True, exist_ok=True)
    with running_kafka(3, root=root, config=config) as kafka, ExitStack() as stack:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        new = NewTopic(TOPIC, num_partitions=1, replica_assignment=[REPLICAS],
                       config=TOPIC_CONFIG)
        admin.create_topics([new])[TOPIC].result(60)

        def signal_node(node: int, sig: signal.Signals) -> None:
            process = kafka.nodes[node].process
            assert process is not None
            os.kill(process.pid, sig)

        def thaw(node: int) -> None:
            if kafka.nodes[node].is_alive():
                signal_node(node, signal.SIGCONT)

        def pause(node: int) -> None:
            signal_node(node, signal.SIGSTOP)
            # a frozen JVM would take the whole stop grace period
            stack.callback(thaw, node)

        yield System(kafka.bootstrap, kafka.nodes[0].bootstrap, pause, thaw, kafka.kill)


SYSTEMS = {"strom": strom_system, "kafka": kafka_system}


@pytest.mark.parametrize("name", [pytest.param("strom", marks=pytest.mark.timeout(150)),
                                  pytest.param("kafka", marks=pytest.mark.timeout(400))])
def test_consumers_detect_a_log_truncated_by_an_unclean_election(tmp_path: Path,
                                                                 name: str) -> None:
    require_jars()
    with SYSTEMS[name](tmp_path / name) as system, stopped_at_exit() as (stack, clients):
        state = system.leader_and_isr
        wait_until(lambda: (s := state()) and s[0] in REPLICAS and s[1] == REPLICAS, 30,
                   what=f"{TOPIC}-0 on {REPLICAS}, both in sync", interval_s=0.2)
        leader = (state() or (-1, []))[0]
        [follower] = [b for b in REPLICAS if b != leader]
        bootstrap = system.bootstrap
        produce(bootstrap, [f"before-{i}" for i in range(BEFORE)], "all")
        for group in (RD_GROUP, JAVA_GROUP):
            commit_start(bootstrap, group)
        # consumers that read through the election ...
        readers: list[Client] = [RdConsumer(bootstrap, "earliest"), RdConsumer(bootstrap, "error")]
        clients += readers
        readers += [JavaConsumer(stack, bootstrap, reset, tmp_path / f"java-{reset}.log")
                    for reset in ("earliest", "none")]
        clients += readers[2:]
        # ... and group members that commit every record (with its epoch), stopped before it
        committers = group_members(stack, clients, bootstrap, tmp_path / "java-g1.log",
                                   "committing")
        first = readers + committers
        wait_all(first, lambda s: s.has(f"before-{BEFORE - 1}"),
                 "every consumer to read the records both replicas have", 60)
        system.pause(follower)
        wait_until(lambda: state() == (leader, [leader]), 30,
                   what=f"the frozen node {follower} to leave the ISR", interval_s=0.2)
        produce(bootstrap, [f"lost-{i}" for i in range(LOST)], "1")
        wait_all(first, lambda s: s.has(f"lost-{LOST - 1}"),
                 "every consumer to read the records only the leader has", 30)
        for c in committers:
            c.close()

        system.kill(leader)
        system.resume(follower)
        wait_until(lambda: (s := state()) and s[0] == follower, 60,
                   what=f"node {follower} elected uncleanly", interval_s=0.2)
        produce(bootstrap, [f"new-{i}" for i in range(NEW)], "1")
        # the groups' next members start from the commits of offset 20 (epoch of lost-9)
        restarted = group_members(stack, clients, bootstrap, tmp_path / "java-g2.log",
                                  "restarted")

        def settled(s: Seen) -> bool:
            return s.has(f"new-{NEW - 1}") or any(e[0] != "record" for e in s.events)

        wait_all(readers + restarted, settled,
                 "every consumer to read the new leader's records or report truncation", 60)
        seen = {c.name: c.seen for c in first + restarted}

    lost_offsets = list(range(BEFORE, BEFORE + LOST))
    for c in first:
        records = seen[c.name].values()
        # every consumer read the lost records before the election, each once
        assert [o for o, v in records if v.startswith("lost-")] == lost_offsets, (c.name, records)
        assert [o for o, v in records if v.startswith("before-")] == list(range(BEFORE)), c.name
    new_records = [(BEFORE + i, f"new-{i}") for i in range(NEW)]
    for client in ("librdkafka auto.offset.reset=earliest", "Java auto.offset.reset=earliest"):
        records, s = seen[client].values(), seen[client]
        # reset to the first offset that diverges, then the new leader's records in order
        after = records[records.index((BEFORE + LOST - 1, f"lost-{LOST - 1}")) + 1:]
        assert after == new_records, (client, s.events[-20:])
        # the new records in one epoch, above the lost records' epoch
        lost_epochs = {e[2] for e in s.events if e[0] == "record" and str(e[3]).startswith("lost-")}
        epochs = {e[2] for e in s.events if e[0] == "record" and str(e[3]).startswith("new-")}
        assert len(epochs) == 1 and min(epochs) > max(lost_epochs), (client, lost_epochs, epochs)
    # Java validates the committed (offset 20, epoch of lost-9) with OffsetForLeaderEpoch and
    # starts from 10: not from 20 (new-10), not from the earliest 0
    java_restarted = seen["Java group, restarted"]
    assert java_restarted.values() == new_records, java_restarted.events[:5]
    # librdkafka (2.16) does not validate a committed offset when it starts fetching, whatever
    # its epoch (librdkafka issue #5158; its debug log says "start fetching at offset 20 (leader
    # epoch E)" and no OffsetForLeaderEpoch is sent; its Fetch carries no last_fetched_epoch):
    # it reads from 20, on Kafka as here. If this fails with new_records, librdkafka has
    # started validating: assert new_records, as for Java.
    rd_restarted = seen["librdkafka group, restarted"]
    assert rd_restarted.values() == new_records[LOST:], rd_restarted.events[:5]
    rd_error = seen["librdkafka auto.offset.reset=error"]
    errors = [e for e in rd_error.events if e[0] == "error"]
    assert errors and errors[0][1] == AUTO_OFFSET_RESET, rd_error.events[-5:]
    position, end = BEFORE + LOST, BEFORE
    assert (f"Partition log truncation detected at offset {position}" in errors[0][2]
            and f"broker end offset is {end}" in errors[0][2]), errors
    assert not any(v.startswith("new-") for _, v in rd_error.values()), rd_error.events[-5:]
    java_none = seen["Java auto.offset.reset=none"]
    [truncation] = [e for e in java_none.events if e[0] == "truncation"]
    assert truncation[1:3] == (BEFORE + LOST, BEFORE), truncation
    assert not any(v.startswith("new-") for _, v in java_none.values()), java_none.events[-5:]
