"""Consumer groups over the Kafka listener with librdkafka: several members share partitions and
rebalance, commits survive a restart of the consumers, admin tools list/describe/delete groups,
and a group mixes a Kafka-protocol member with a Strom (gRPC) member."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.client import Consumer as StromConsumer
from strom.testing import BrokerProcess

from .conftest import new_topic

pytestmark = pytest.mark.integration


def _fill(broker: BrokerProcess, topic: str, partitions: int, n: int) -> None:
    p = Producer({"bootstrap.servers": broker.kafka_bootstrap})
    for i in range(n):
        p.produce(topic, value=b"%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


_open: list[Consumer] = []


@pytest.fixture(autouse=True)
def _close_consumers() -> Iterator[None]:
    """Every consumer a test opened is closed, also after a failed assertion."""
    yield
    while _open:
        with contextlib.suppress(RuntimeError):
            _open.pop().close()


def _consumer(broker: BrokerProcess, group: str, **extra: object) -> Consumer:
    c = Consumer({"bootstrap.servers": broker.kafka_bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, **extra})
    _open.append(c)
    return c


def _until(check: Callable[[], bool], timeout: float, step: Callable[[], None]) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        step()
        if check():
            return True
    return False


def test_three_members_share_partitions_rebalance_and_resume_from_commits(
        broker: BrokerProcess) -> None:
    topic = new_topic(broker, partitions=6)
    _fill(broker, topic, 6, 600)
    group = f"{topic}-g"
    members = [_consumer(broker, group) for _ in range(3)]
    seen: dict[int, set[bytes]] = {0: set(), 1: set(), 2: set()}
    for c in members:
        c.subscribe([topic])

    def poll_all() -> None:
        for i, c in enumerate(members):
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                seen[i].add(m.value())

    assert _until(lambda: all(len(c.assignment()) == 2 for c in members), 60, poll_all), \
        [c.assignment() for c in members]
    assigned = [tp.partition for c in members for tp in c.assignment()]
    assert sorted(assigned) == list(range(6))
    def caught_up() -> bool:
        # every partition's owner is at its end (100 records each): a rebalance in between
        # (a metadata change may start one) re-delivers, so count positions, not records
        positions = [tp for c in members for tp in c.position(c.assignment())]
        return (len(positions) == 6 and all(tp.offset == 100 for tp in positions)
                and set().union(*seen.values()) == {b"%d" % i for i in range(600)})

    assert _until(caught_up, 60, poll_all)
    for c in members:
        c.commit(asynchronous=False)
    members[2].close()  # leaves: its partitions move to the others
    members = members[:2]
    assert _until(lambda: sorted(tp.partition for c in members for tp in c.assignment())
                  == list(range(6)), 60, poll_all)
    for c in members:
        c.close()
    _fill(broker, topic, 6, 60)  # 60 more; a new consumer resumes after the commits
    again = _consumer(broker, group)
    again.subscribe([topic])
    values: list[bytes] = []

    def poll_one() -> None:
        m = again.poll(0.2)
        if m is not None and m.error() is None:
            values.append(m.value())

    def read_to_the_end() -> bool:
        """Every partition's position is its high watermark: nothing more can arrive, so a
        record delivered twice would already be in ``values``."""
        assigned = again.assignment()
        return len(assigned) == 6 and all(
            tp.offset == again.get_watermark_offsets(tp, timeout=10)[1]
            for tp in again.position(assigned))

    assert _until(lambda: len(values) >= 60 and read_to_the_end(), 60, poll_one)
    again.close()
    assert sorted(values) == sorted(b"%d" % i for i in range(60))


def test_admin_lists_describes_and_deletes_groups_and_reads_their_offsets(
        broker: BrokerProcess) -> None:
    topic = new_topic(broker, partitions=2)
    _fill(broker, topic, 2, 20)
    group = f"{topic}-admin"
    c = _consumer(broker, group)
    c.subscribe([topic])
    got: list[int] = []

    def poll() -> None:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append(m.partition())

    assert _until(lambda: len(got) == 20, 60, poll), got
    c.commit(asynchronous=False)
    admin = AdminClient({"bootstrap.servers": broker.kafka_bootstrap})
    listed = admin.list_consumer_groups().result(10)
    assert group in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups([group])[group].result(10)

    def stable() -> bool:
        nonlocal described
        described = admin.describe_consumer_groups([group])[group].result(10)
        return str(described.state).endswith("STABLE")

    # a metadata change may start one more rebalance; the member rejoins while it polls
    assert _until(stable, 30, poll), described.state
    assert len(described.members) == 1
    assert {tp.partition for tp in described.members[0].assignment.topic_partitions} == {0, 1}
    from confluent_kafka import ConsumerGroupTopicPartitions
    offsets = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(10)
    assert {(tp.partition, tp.offset) for tp in offsets.topic_partitions} == {(0, 10), (1, 10)}
    busy = admin.delete_consumer_groups([group])[group]
    with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
        busy.result(10)
    c.close()
    admin.delete_consumer_groups([group])[group].result(10)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}


def test_commits_from_a_kafka_consumer_are_read_by_a_strom_consumer(
        broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    _fill(broker, topic, 1, 10)
    group = f"{topic}-shared"
    c = _consumer(broker, group)
    c.assign([TopicPartition(topic, 0, 0)])
    c.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
    c.close()
    with StromConsumer(broker.bootstrap, group_id=group, auto_offset_reset="earliest") as s:
        s.subscribe([topic])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 3 and time.monotonic() < deadline:
            values += [r.value for r in s.poll(200)]
    assert values == [b"7", b"8", b"9"]


def test_a_kafka_member_and_a_strom_member_share_one_group_at_once(
        broker: BrokerProcess) -> None:
    """Issue 14: one group, two live members on two protocols (librdkafka over the Kafka
    listener, Strom's client over gRPC), one coordinator: the range assignor gives each one
    partition, and together they read every record once."""
    topic = new_topic(broker, partitions=2)
    group = f"{topic}-mixed"
    kafka = _consumer(broker, group)
    kafka.subscribe([topic])
    kafka_values: list[bytes] = []
    strom_values: list[bytes] = []
    with StromConsumer(broker.bootstrap, group_id=group, auto_offset_reset="earliest",
                       enable_auto_commit=False) as strom:
        strom.subscribe([topic])

        def step() -> None:
            m = kafka.poll(0.1)
            if m is not None and m.error() is None:
                kafka_values.append(m.value())
            strom_values.extend(r.value for r in strom.poll(100))

        shared = _until(lambda: len(kafka.assignment()) == 1 == len(strom.assignment()), 60,
                        step)
        assert shared, (kafka.assignment(), strom.assignment())
        _fill(broker, topic, 2, 40)  # after the rebalance: no partition changes hands now
        assert _until(lambda: len(kafka_values) + len(strom_values) >= 40, 60, step), (
            len(kafka_values), len(strom_values))
        assert {tp.partition for tp in kafka.assignment()} | {
            tp.partition for tp in strom.assignment()} == {0, 1}
    assert sorted(kafka_values + strom_values) == sorted(b"%d" % i for i in range(40))
    assert len(kafka_values) == len(strom_values) == 20  # one partition each
