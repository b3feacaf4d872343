"""Kafka's own ``VerifiableProducer`` and ``VerifiableConsumer`` (the tools Kafka's system tests
judge a broker with) against 3 Apache Kafka nodes and against 3 Strom brokers, with the leader
of a partition killed (``kill -9``) while both run: on both, every record the producer saw
acknowledged is consumed, with the offset it was acknowledged at, each partition in offset
order.

Both tools print one JSON event per line: ``producer_send_success`` (value, partition, offset)
for every acknowledged record, ``record_data`` for every record the consumer returned
(``--verbose``). The comparison is :func:`check_delivery`, pure. The producer retries
idempotently (the tool's own default is ``retries=0``, overridden by its config file), so
every record is acknowledged once and stored once.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from strom.testing import running_cluster
from strom.testing.kafka import require_jars, running_kafka
from strom.testing.kafka_tools import json_lines, running_java

# 3 nodes, two JVMs and a kill: ~60 s (Strom) and ~120 s (Kafka: JVM nodes, 9 s fencing) at
# load 10-25 on 2 cores
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(480)]

TOOLS = "org.apache.kafka.tools."
RECORDS, RATE = 3000, 300
#: The kill comes once this many records are acknowledged (a third of the run).
KILL_AFTER = 1000
PARTITIONS = 3


def events(path: Path, name: str) -> list[dict[str, Any]]:
    """The tool's JSON events called ``name`` (log lines and partial lines are skipped)."""
    return [event for event in json_lines(path) if event.get("name") == name]


def check_delivery(acked: Iterable[dict[str, Any]], consumed: Iterable[dict[str, Any]]
                   ) -> list[str]:
    """What is wrong, in words (empty: nothing). Every acknowledged (partition, offset, value)
    is consumed with that value; the records of a partition come in offset order (a re-read
    after a rebalance may repeat offsets already seen, never skip or reorder new ones)."""
    problems: list[str] = []
    seen: dict[tuple[int, int], str] = {}
    last: dict[int, int] = {}
    for record in consumed:
        p, off, value = int(record["partition"]), int(record["offset"]), str(record["value"])
        key = (p, off)
        if key in seen:
            if seen[key] != value:
                problems.append(f"partition {p} offset {off} read as {seen[key]!r}, then "
                                f"{value!r}")
            continue
        if off < last.get(p, -1):
            problems.append(f"partition {p}: new offset {off} after offset {last[p]}")
        seen[key] = value
        last[p] = max(off, last.get(p, -1))
    missing = []
    for record in acked:
        p, off, value = int(record["partition"]), int(record["offset"]), str(record["value"])
        got = seen.get((p, off))
        if got is None:
            missing.append(f"{p}:{off}")
        elif got != value:
            problems.append(f"acknowledged {value!r} at {p}:{off} was consumed as {got!r}")
    if missing:
        problems.append(f"{len(missing)} acknowledged record(s) never consumed, e.g. "
                        f"{missing[:10]}")
    return problems


def test_check_delivery_finds_loss_reorder_and_changed_values() -> None:
    acked = [{"partition": 0, "offset": i, "value": str(i)} for i in range(3)]
    assert check_delivery(acked, acked + acked[:1]) == []
    assert "never consumed" in check_delivery(acked, acked[:2])[0]
    assert "after offset" in check_delivery(acked, [acked[0], acked[2], acked[1]])[0]
    changed = [*acked[:2], {"partition": 0, "offset": 2, "value": "x"}]
    assert "consumed as 'x'" in check_delivery(acked, changed)[0]


def _wait(what: str, predicate: Any, timeout: float, *procs: Any) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        for proc in procs:
            proc.check_running()
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.2)


@dataclass
class Side:
    """A 3-node cluster of either system: its Kafka bootstrap and a kill -9 by node id."""

    bootstrap: str
    kill: Callable[[int], None]


@contextlib.contextmanager
def three_nodes(system: str, root: Path) -> Iterator[Side]:
    if system == "kafka":  # Kafka's production failure detection (a broker fenced after 9 s)
        with running_kafka(3, root=root, config={"auto.create.topics.enable": "false"}) as kafka:
            yield Side(kafka.bootstrap, kafka.kill)
    else:  # strom.testing's test timeouts (a broker fenced after 2 s)
        with running_cluster(root, brokers=3) as cluster:
            yield Side(cluster.kafka_bootstrap, cluster.kill)


def _partition_state(admin: Any, topic: str) -> list[tuple[int, int]]:
    """(leader, ISR size) of each partition, as the cluster's Metadata says."""
    meta = admin.list_topics(topic, timeout=5).topics.get(topic)
    if meta is None or meta.error is not None:
        return []
    return [(p.leader, len(p.isrs)) for _, p in sorted(meta.partitions.items())]


@pytest.mark.parametrize("system", ["kafka", "strom"])
def test_every_acknowledged_record_is_consumed_across_a_leader_kill(system: str,
                                                                    tmp_path: Path) -> None:
    require_jars()
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic, group = "verifiable", "verifiable-group"
    (tmp_path / system).mkdir()
    with three_nodes(system, tmp_path / system) as side:
        admin = AdminClient({"bootstrap.servers": side.bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={
            "min.insync.replicas": "2"})])[topic].result(60)
        _wait("every partition led with 3 replicas in sync", lambda: _partition_state(
            admin, topic) and all(leader >= 0 and isr == 3
                                  for leader, isr in _partition_state(admin, topic)), 60)
        server = ("--bootstrap-server", side.bootstrap)
        consumer_log, producer_log = tmp_path / "consumer.log", tmp_path / "producer.log"
        with running_java(TOOLS + "VerifiableConsumer", *server, "--topic", topic,
                          "--group-id", group, "--verbose", "--reset-policy", "earliest",
                          log_path=consumer_log, name="VerifiableConsumer") as consumer:
            _wait("the consumer's partitions assigned",
                  lambda: events(consumer_log, "partitions_assigned"), 120, consumer)
            # the tool sets retries=0 (Kafka's system tests count failed sends); its config
            # file comes after, so this producer retries, idempotently, as Kafka's default one
            config = tmp_path / "producer.properties"
            config.write_text("retries=2147483647\nenable.idempotence=true\n"
                              "delivery.timeout.ms=120000\n")
            with running_java(TOOLS + "VerifiableProducer", *server, "--topic", topic,
                              "--max-messages", str(RECORDS), "--throughput", str(RATE),
                              "--acks", "-1", "--command-config", str(config),
                              log_path=producer_log,
                              name="VerifiableProducer") as producer:
                _wait(f"{KILL_AFTER} records acknowledged", lambda: len(
                    events(producer_log, "producer_send_success")) >= KILL_AFTER, 120, producer)
                victim = _partition_state(admin, topic)[0][0]
                side.kill(victim)
                _wait("the producer's end", lambda: not producer.is_alive(), 180)
            acked = events(producer_log, "producer_send_success")
            errors = events(producer_log, "producer_send_error")
            after_kill = len(acked) - KILL_AFTER
            assert after_kill > 0, f"nothing acknowledged after the kill:\n{producer_log}"
            acked_keys = {(int(r["partition"]), int(r["offset"])) for r in acked}

            def all_consumed() -> bool:
                got = {(int(r["partition"]), int(r["offset"]))
                       for r in events(consumer_log, "record_data")}
                return acked_keys <= got

            with contextlib.suppress(AssertionError):  # check_delivery says what is missing
                _wait("every acknowledged record consumed", all_consumed, 120, consumer)
        consumed = events(consumer_log, "record_data")
        problems = check_delivery(acked, consumed)
        assert problems == [], (problems, consumer.log_tail(), producer.log_tail())
        # the producer's idempotent retries got every record through the failover, once
        assert (len(acked), errors) == (RECORDS, []), (len(acked), errors[:5])
        stored = {(int(r["partition"]), int(r["offset"])): str(r["value"]) for r in consumed}
        assert sorted(stored.values(), key=int) == [str(i) for i in range(RECORDS)]
