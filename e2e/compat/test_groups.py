"""Consumer groups, compared between Apache Kafka and Strom with the same client code.

Observed on both: the partitions the range assignor gives two members, the generation a member
sees as members join and leave (kafka-python keeps it; librdkafka does not show it), the group's
description (state, assignor, members), committed offsets read back by another client, and the
errors for deleting a group that is in use or does not exist.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]
from kafka import KafkaConsumer

from strom.testing.compat import polled, topic_with_records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

#: Rebalances within seconds: heartbeats every 300 ms, the smallest session Kafka allows.
FAST = {"heartbeat.interval.ms": 300, "session.timeout.ms": 6000}
#: What a commit answers while the group starts another round (librdkafka's _NO_OFFSET: the
#: member's assignment was revoked, so it had nothing to commit).
REBALANCING = {KafkaError._NO_OFFSET, KafkaError.REBALANCE_IN_PROGRESS,
               KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID}


def member(bootstrap: str, group: str, topic: str) -> Any:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "partition.assignment.strategy": "range", **FAST})
    consumer.subscribe([topic])
    return consumer


def poll_until(consumers: list[Any], done: Callable[[], bool], what: str,
               timeout: float = 40) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not {what} after {timeout} s"
        for c in consumers:
            c.poll(0.1)


def group_state(admin: Any, group: str) -> dict[str, Any]:
    desc = admin.describe_consumer_groups([group])[group].result(30)
    return {"state": desc.state.name, "assignor": desc.partition_assignor,
            "simple": desc.is_simple_consumer_group, "members": len(desc.members),
            "assigned": sorted(sorted(tp.partition for tp in m.assignment.topic_partitions)
                               for m in desc.members)}


def committed(admin: Any, group: str) -> list[tuple[int, int]]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    result = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(30)
    return sorted((tp.partition, tp.offset) for tp in result.topic_partitions)


def deletion(admin: Any, group: str) -> str:
    try:
        admin.delete_consumer_groups([group])[group].result(30)
    except KafkaException as err:
        return str(err.args[0].name())
    return "ok"


def group_scenario(bootstrap: str, topic: str, group: str) -> dict[str, Any]:
    topic_with_records(bootstrap, topic, 4, 5)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    seen: dict[str, Any] = {}
    first = member(bootstrap, group, topic)
    second = None
    try:
        poll_until([first], lambda: len(first.assignment()) == 4, "assigned 4 partitions")
        second = member(bootstrap, group, topic)
        poll_until([first, second],
                   lambda: len(first.assignment()) == 2 and len(second.assignment()) == 2,
                   "rebalanced to 2 + 2")
        seen["assignment"] = sorted(sorted(tp.partition for tp in c.assignment())
                                    for c in (first, second))
        # describe once the group says STABLE, bounded (seen once on Strom: PREPARING_REBALANCE
        # right after both had 2, the partition-count round explained below, now fixed)
        states: list[dict[str, Any]] = []

        def settled() -> bool:
            states.append(group_state(admin, group))
            return (states[-1]["state"] == "STABLE" and len(first.assignment()) == 2
                    and len(second.assignment()) == 2)

        # A group may start another round at any moment under load, on either server (a
        # heartbeat later than the 6 s session). The round seen on Strom at load 11-14 (a
        # member held no partitions when it committed, "No offset stored") was not that: its
        # coordinator compared the topic's partition count against a once-a-second snapshot
        # taken before the topic existed, fixed (docs/decisions.md "Consumer groups in the
        # compat suite"). Then the commit is refused or has nothing to commit, and the round
        # is awaited again, bounded: the comparison is of what a settled group does.
        for attempt in range(3):
            poll_until([first, second], settled, "described STABLE with 2 + 2", timeout=30)
            try:
                for c in (first, second):  # each member commits its own partitions (which
                    # member gets which is up to the member ids, random on both servers)
                    c.commit(offsets=[TopicPartition(topic, tp.partition, tp.partition + 1)
                                      for tp in c.assignment()], asynchronous=False)
                break
            except KafkaException as err:
                if attempt == 2 or err.args[0].code() not in REBALANCING:
                    raise
        seen["described"] = states[-1]
        seen["committed"] = committed(admin, group)
        seen["delete in use"] = deletion(admin, group)
        seen["listed"] = group in {g.group_id for g in
                                   admin.list_consumer_groups().result(30).valid}
    finally:
        first.close()
        if second is not None:
            second.close()
    seen["described after close"] = group_state(admin, group)
    seen["committed after close"] = committed(admin, group)
    seen["delete"] = deletion(admin, group)
    seen["delete again"] = deletion(admin, group)
    return seen


def test_range_assignment_commits_and_group_lifecycle(pair: Any,
                                                      name: Callable[[str], str]) -> None:
    topic, group = name("grp"), name("g")
    kafka = group_scenario(pair.kafka.bootstrap, topic, group)
    strom = group_scenario(pair.strom.bootstrap, topic, group)
    assert strom == kafka
    assert kafka["assignment"] == [[0, 1], [2, 3]]
    assert kafka["described"]["state"] == "STABLE"
    assert kafka["committed"] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert kafka["delete in use"] == "NON_EMPTY_GROUP"
    assert kafka["described after close"]["state"] == "EMPTY"
    assert kafka["delete again"] == "GROUP_ID_NOT_FOUND"


def generations(bootstrap: str, topic: str, group: str) -> list[tuple[str, int, int]]:
    """(event, generation, partitions of the first member) as members come and go.

    Each consumer is polled from its own thread (:func:`strom.testing.compat.polled`):
    kafka-python drops a rebalance round that completes outside its ``poll()``, and two
    consumers polled in turns kept a leader re-joining round after round (on both servers)."""
    topic_with_records(bootstrap, topic, 2, 1)

    def consumer() -> KafkaConsumer:
        c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                          enable_auto_commit=False, heartbeat_interval_ms=300,
                          session_timeout_ms=6000)
        # a leader assigns from its own metadata: without the topic's, kafka-python assigns
        # nothing and re-joins once it learns them (a round it may lose, see polled)
        assert c.partitions_for_topic(topic) == {0, 1}
        return c

    def gen(c: KafkaConsumer) -> int:
        return int(c._coordinator._generation.generation_id)  # kafka-python keeps it here

    def wait(cond: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 40
        while not cond():
            assert time.monotonic() < deadline, f"not {what} after 40 s"
            time.sleep(0.05)

    events = []
    a = consumer()
    try:
        with polled(a):
            wait(lambda: len(a.assignment()) == 2, "a has both partitions")
            events.append(("a joined", gen(a), len(a.assignment())))
            b = consumer()
            try:
                with polled(b):
                    wait(lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1
                         and gen(a) == gen(b), "a and b have one partition each")
                    events.append(("b joined", gen(a), len(a.assignment())))
            finally:
                b.close()
            wait(lambda: len(a.assignment()) == 2, "a has both partitions again")
            events.append(("b left", gen(a), len(a.assignment())))
    finally:
        a.close()
    return events


def test_generations_follow_joins_and_leaves(pair: Any, name: Callable[[str], str]) -> None:
    topic, group = name("gen"), name("g")
    kafka = generations(pair.kafka.bootstrap, topic, group)
    strom = generations(pair.strom.bootstrap, topic, group)
    # the events and assignments are the same; a generation is a new one at every event on
    # both. The numbers are compared by their order only: under load Kafka itself took one or
    # two more rounds (a rejoin after the topic's metadata changed, a late rejoin that starts
    # another round), first generations of 1 and 3 were both seen against it
    assert [(e, n) for e, _, n in strom] == [(e, n) for e, _, n in kafka] == [
        ("a joined", 2), ("b joined", 1), ("b left", 2)]
    for events in (kafka, strom):
        gens = [g for _, g, _ in events]
        assert gens == sorted(set(gens)), events
