"""Three brokers, RF=3: librdkafka routes by the Kafka listener's advertised addresses, acks=all
waits for every in-sync replica, and consumers read every partition from its leader."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strom.testing import running_cluster

pytestmark = pytest.mark.integration


def test_three_brokers_rf3_produce_all_and_consume_through_the_kafka_listener(
        tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=3) as cluster, cluster.admin() as admin:
        admin.create_topic("orders", partitions=6, replication_factor=3)
        p = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all",
                      "enable.idempotence": True})
        meta = p.list_topics("orders", timeout=20)
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
