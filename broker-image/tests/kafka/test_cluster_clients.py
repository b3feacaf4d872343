"""Three brokers, RF=3: librdkafka routes by the Kafka listener's advertised addresses, acks=all
waits for every in-sync replica, and consumers read every partition from its leader."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strom.testing import Cluster, running_cluster

from .conftest import kafka_call, read_in_group

pytestmark = pytest.mark.integration


def test_three_brokers_rf3_produce_all_and_consume_through_the_kafka_listener(
        tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=3) as cluster, cluster.admin() as admin:
        admin.create_topic("orders", partitions=6, replication_factor=3)
        p = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all",
                      "enable.idempotence": True})
        meta = _metadata_with_partitions(p, "orders", 6)
        assert {(b.id, b.host, b.port) for b in meta.brokers.values()} == {
            (bid, "127.0.0.1", b.kafka_port) for bid, b in cluster.brokers.items()}
        topic = meta.topics["orders"]
        assert len(topic.partitions) == 6
        assert all(len(pm.replicas) == 3 and len(pm.isrs) == 3
                   for pm in topic.partitions.values())
        assert len({pm.leader for pm in topic.partitions.values()}) > 1  # leaders spread
        errors: list[object] = []
        for i in range(600):
            p.produce("orders", value=b"o%d" % i, key=b"%d" % (i % 37),
                      on_delivery=lambda err, _m: errors.append(err) if err else None)
        assert p.flush(60) == 0 and errors == []
        c = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "x",
                      "enable.auto.commit": False})
        c.assign([TopicPartition("orders", i, 0) for i in range(6)])
        values = set()
        deadline = time.monotonic() + 60
        while len(values) < 600 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                values.add(m.value())
        c.close()
        assert values == {b"o%d" % i for i in range(600)}
        _reorder_replicas_and_elect_the_new_preferred_leader(cluster)


def _metadata_with_partitions(p: Producer, topic: str, count: int, timeout: float = 30.0
                              ) -> Any:
    """Metadata once the broker librdkafka asks knows the new topic (as in Kafka, CreateTopics
    answers when the controller committed it; a broker may apply it a moment later)."""
    deadline = time.monotonic() + timeout
    while True:
        meta = p.list_topics(topic, timeout=10)
        t = meta.topics[topic]
        if t.error is None and len(t.partitions) == count:
            return meta
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {topic} not in metadata after {timeout}s: {t.error}")
        time.sleep(0.2)


def _reorder_replicas_and_elect_the_new_preferred_leader(cluster: Cluster) -> None:
    """AlterPartitionReassignments, ListPartitionReassignments and ElectLeaders over the Kafka
    listener: partition 0's replica order changes (v1 with KIP-860's guard, which first refuses a
    target of two replicas), and a preferred election moves its leader."""
    from kio.schema.alter_partition_reassignments.v1 import request as apr_req
    from kio.schema.alter_partition_reassignments.v1 import response as apr_resp
    from kio.schema.elect_leaders.v2 import request as el_req
    from kio.schema.elect_leaders.v2 import response as el_resp
    from kio.schema.list_partition_reassignments.v0 import request as lpr_req
    from kio.schema.list_partition_reassignments.v0 import response as lpr_resp

    port = next(iter(cluster.brokers.values())).kafka_port
    meta = Producer({"bootstrap.servers": cluster.kafka_bootstrap}).list_topics("orders", 20)
    replicas = list(meta.topics["orders"].partitions[0].replicas)
    target = replicas[1:] + replicas[:1]  # same set, another preferred leader

    def reassign(replicas: list[int]) -> Any:  # v1 with KIP-860's guard on
        return kafka_call(port, 45, 1, apr_req.AlterPartitionReassignmentsRequest(
            allow_replication_factor_change=False, topics=(apr_req.ReassignableTopic(
                name="orders", partitions=(apr_req.ReassignablePartition(
                    partition_index=0, replicas=tuple(replicas)),)),)),
            apr_resp.AlterPartitionReassignmentsResponse)

    refused = reassign(target[:2])  # RF 3 -> 2: refused with Kafka's code and message
    assert refused.allow_replication_factor_change is False and int(refused.error_code) == 0
    assert [(t.name, p.partition_index, int(p.error_code), p.error_message)
            for t in refused.responses for p in t.partitions] == [
        ("orders", 0, 38, "The replication factor is changed from 3 to 2")]
    moved = reassign(target)  # the same three replicas in another order: allowed
    assert [int(p.error_code) for t in moved.responses for p in t.partitions] == [0]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ongoing = kafka_call(port, 46, 0, lpr_req.ListPartitionReassignmentsRequest(topics=None),
                             lpr_resp.ListPartitionReassignmentsResponse)
        if not ongoing.topics:
            break
        time.sleep(0.2)
    assert not ongoing.topics
    leader = -1
    while time.monotonic() < deadline and leader != target[0]:
        elected = kafka_call(port, 43, 2, el_req.ElectLeadersRequest(
            election_type=0, topic_partitions=(
                el_req.TopicPartitions(topic="orders", partitions=(0,)),)),
            el_resp.ElectLeadersResponse)
        assert int(elected.error_code) == 0
        meta = Producer({"bootstrap.servers": cluster.kafka_bootstrap}).list_topics("orders", 20)
        leader = meta.topics["orders"].partitions[0].leader
        time.sleep(0.2)
    assert list(meta.topics["orders"].partitions[0].replicas) == target
    assert leader == target[0]


def test_idempotent_librdkafka_producer_survives_kill_9_of_the_leader(tmp_path: Path) -> None:
    """Every acknowledged record is in the log exactly once and in send order after the
    partition leader is killed with SIGKILL mid-stream (acks=all, min.insync.replicas=2)."""
    with running_cluster(tmp_path, brokers=3) as cluster, cluster.admin() as admin:
        admin.create_topic("ledger", partitions=1, replication_factor=3,
                           configs={"min.insync.replicas": "2"})
        cluster.wait_for_isr("ledger", 0, 3)
        acked: list[int] = []
        failed: list[object] = []

        def on_delivery(err: object, msg: object) -> None:
            if err is not None:
                failed.append(err)
            else:
                acked.append(int(msg.value()))  # type: ignore[attr-defined]

        p = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "enable.idempotence": True,
                      "acks": "all", "linger.ms": 2, "message.timeout.ms": 60000,
                      "retry.backoff.ms": 100})
        leader = cluster.leader_of("ledger", 0)
        for i in range(3000):
            p.produce("ledger", value=b"%d" % i, on_delivery=on_delivery)
            p.poll(0)
            if i == 1000:
                p.flush(30)
                cluster.kill(leader)
        assert p.flush(90) == 0
        assert failed == []
        assert acked == list(range(3000))  # acknowledged in send order
        survivor = next(b for bid, b in cluster.brokers.items() if bid != leader)
        c = Consumer({"bootstrap.servers": survivor.kafka_bootstrap, "group.id": "audit",
                      "enable.auto.commit": False})
        c.assign([TopicPartition("ledger", 0, 0)])
        values: list[int] = []
        deadline = time.monotonic() + 60
        while len(values) < 3000 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                values.append(int(m.value()))
        c.close()
        assert values == list(range(3000))  # once each, in order, nothing lost


def test_kafka_python_and_aiokafka_on_three_brokers_rf3(tmp_path: Path) -> None:
    """Issue 14's other two PyPI clients at 3 brokers, RF=3 (their 1-broker tests are in
    test_produce_fetch_clients): each produces with acks=all to 6 partitions led by different
    brokers (routed by the listener's advertised addresses), and each reads what both wrote,
    kafka-python by assign, aiokafka in a group that commits."""
    import asyncio

    from aiokafka import AIOKafkaProducer
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    with running_cluster(tmp_path, brokers=3) as cluster, cluster.admin() as admin:
        admin.create_topic("both", partitions=6, replication_factor=3)
        meta = _metadata_with_partitions(Producer({"bootstrap.servers": cluster.kafka_bootstrap}),
                                         "both", 6)
        assert len({pm.leader for pm in meta.topics["both"].partitions.values()}) > 1
        bootstrap = cluster.kafka_bootstrap
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        futures = [producer.send("both", b"kp%d" % i, partition=i % 6) for i in range(120)]
        producer.flush(60)
        assert sorted(f.get(30).offset for f in futures) == sorted(
            o for _ in range(6) for o in range(20))
        producer.close()

        async def aio() -> tuple[list[bytes], int | None]:
            p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                 enable_idempotence=True)
            await p.start()
            try:
                for i in range(120):
                    await p.send("both", b"aio%d" % i, partition=i % 6)
                await p.flush()
            finally:
                await p.stop()
            return await read_in_group(bootstrap, "both", "both-aio", 240)

        got, committed = asyncio.run(aio())
        expected = {b"kp%d" % i for i in range(120)} | {b"aio%d" % i for i in range(120)}
        assert sorted(got) == sorted(expected) and committed == 40
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                 consumer_timeout_ms=10_000)
        consumer.assign([KTP("both", p) for p in range(6)])
        read: list[bytes] = []
        for m in consumer:
            read.append(m.value)
            if len(read) == 240:
                break
        consumer.close()
        assert sorted(read) == sorted(expected)
