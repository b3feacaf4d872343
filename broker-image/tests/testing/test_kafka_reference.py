"""Apache Kafka as the reference cluster: real Kafka 4.x nodes from Maven's jars on 127.0.0.1.

A 1-node and a 3-node KRaft cluster start, answer a confluent-kafka producer and consumer, and
leave no process or directory behind. Without Java or Maven these skip on a developer machine
and fail under CI=true (``.ci/run`` installs both and fetches the jars).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from strom.testing.kafka import (
    KafkaCluster,
    KafkaNode,
    api_versions_ok,
    random_cluster_id,
    require_jars,
    running_kafka,
)
from strom.testing.kafka_jars import is_fetched, kafka_version, libs_dir, pom_path
from strom.testing.process import ProcessStartError, free_port, pid_alive


def test_cluster_ids_are_kafka_uuids() -> None:
    ids = {random_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cid in ids:
        assert len(cid) == 22 and not cid.startswith("-")
        assert set(cid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_node_properties_keep_the_keys_the_cluster_needs(tmp_path: Path) -> None:
    node = KafkaNode(1, tmp_path, 9001, 9101)
    props = node.properties("0@127.0.0.1:9100,1@127.0.0.1:9101,2@127.0.0.1:9102", 3,
                            {"num.partitions": "4", "node.id": "7",
                             "offsets.topic.replication.factor": "1"})
    assert props["node.id"] == "1"  # fixed keys win over overrides
    assert props["num.partitions"] == "4"
    assert props["offsets.topic.replication.factor"] == "1"  # defaults give way
    assert props["transaction.state.log.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["process.roles"] == "broker,controller"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9001,CONTROLLER://127.0.0.1:9101"
    assert props["log.dirs"] == str(tmp_path / "node-1" / "data")


def test_a_cluster_needs_one_to_nine_nodes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nodes=0"):
        KafkaCluster(tmp_path, 0)
    cluster = KafkaCluster(tmp_path, 3)
    ports = [p for n in cluster.nodes.values() for p in (n.port, n.controller_port)]
    assert len(set(ports)) == 6
    assert cluster.voters.count("@127.0.0.1:") == 3


def test_api_versions_probe_is_false_where_nothing_listens() -> None:
    assert not api_versions_ok("127.0.0.1", free_port(), timeout=0.5)


def test_the_pom_pins_a_kafka_4_version() -> None:
    version = kafka_version()
    assert version.split(".")[0] == "4"
    assert pom_path().name == "pom.xml"
    assert libs_dir().parts[-3:] == ("kafka", version, "libs")


def round_trip(bootstrap: str, topic: str, replication: int, records: int = 200) -> None:
    """Create a topic, produce keyed records with headers (acks=all), read them all back."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=2,
                                            replication_factor=replication)])
    futures[topic].result(timeout=60)
    meta = admin.list_topics(topic, timeout=10)
    assert len(meta.brokers) == replication
    assert all(len(p.replicas) == replication for p in meta.topics[topic].partitions.values())

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failures: list[str] = []

    def report(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    sent = {f"k{i}": f"value-{i}".encode() for i in range(records)}
    for key, value in sent.items():
        producer.produce(topic, value=value, key=key.encode(), headers=[("h", key.encode())],
                         on_delivery=report)
    assert producer.flush(60) == 0 and not failures

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: dict[str, bytes] = {}
    offsets: dict[int, list[int]] = {}
    deadline = time.monotonic() + 90
    try:
        while len(got) < records and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            key = msg.key().decode()
            assert msg.headers() == [("h", key.encode())]
            got[key] = msg.value()
            offsets.setdefault(msg.partition(), []).append(msg.offset())
    finally:
        consumer.close()
    assert got == sent
    for partition_offsets in offsets.values():  # per partition: 0, 1, 2, ... in order
        assert partition_offsets == list(range(len(partition_offsets)))


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("nodes", [1, 3])
def test_kafka_cluster_round_trip_and_nothing_left_behind(tmp_path: Path, nodes: int) -> None:
    require_jars()
    assert is_fetched()
    started = time.monotonic()
    with running_kafka(nodes, root=tmp_path) as kafka:
        took = time.monotonic() - started
        pids = [n.process.pid for n in kafka.nodes.values() if n.process is not None]
        assert len(pids) == nodes and all(pid_alive(p) for p in pids)
        for node in kafka.nodes.values():
            assert api_versions_ok("127.0.0.1", node.port)
        root = kafka.root
        round_trip(kafka.bootstrap, "reference", replication=nodes)
    print(f"kafka {kafka_version()}: {nodes} node(s) ready in {took:.1f} s")
    assert not any(pid_alive(p) for p in pids)
    assert not root.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
@pytest.mark.slow
def test_a_node_that_cannot_start_fails_with_its_log_and_leaves_nothing(tmp_path: Path) -> None:
    require_jars()
    started = time.monotonic()
    with pytest.raises(ProcessStartError) as info, \
            running_kafka(1, root=tmp_path, config={"num.network.threads": "zero"}):
        pass
    assert time.monotonic() - started < 120
    message = str(info.value)
    assert message.startswith("kafka node 0")
    assert "num.network.threads" in message
    assert list(tmp_path.iterdir()) == []


def test_each_pom_has_its_own_cache_directory(tmp_path: Path) -> None:
    from strom.testing.kafka_jars import cache_name, spark_kafka_pom

    assert cache_name() == kafka_version()
    spark = cache_name(spark_kafka_pom())
    assert spark.startswith("spark-sql-kafka-") and "${" not in spark
    assert libs_dir(spark) != libs_dir(kafka_version())
    pom = tmp_path / "pom.xml"
    pom.write_text('<project xmlns="http://maven.apache.org/POM/4.0.0"><properties>'
                   "<a>1</a><strom.cache.name>x-${a}-${missing}</strom.cache.name>"
                   "</properties></project>")
    assert cache_name(pom) == "x-1-${missing}"
