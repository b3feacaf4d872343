"""Two real brokers, RF 2: a broker whose log directory fails writes reports it to the
controller, which moves its partitions' leadership and ISR membership to the other in-sync
replica (Kafka's log directory failure handling); any broker's metadata and DescribeCluster
show the directory and the replica offline; produce keeps working through the other broker
and nothing acknowledged is lost; a replica fetcher that fails is restarted and the broker
stays ready."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from strom import supervision
from strom.cli.cluster import cluster_table, cluster_to_dict
from strom.client import Admin, Consumer, Producer
from strom.client.models import TopicPartition
from strom.protocol.records import Record
from strom.storage import fileops
from strom.testing.cluster import Cluster

pytestmark = pytest.mark.integration


def test_offline_log_dir_moves_leadership_and_loses_nothing(tmp_path: Path) -> None:
    faulty = {fileops.ENV: "ENOSPC:pwrite,pwritev:/t-0/"}  # broker 0's copy of t-0 only
    cluster = Cluster(tmp_path, 2, env={0: faulty})
    try:
        cluster.start()
        cluster.wait_all_registered()
        with cluster.admin() as admin:
            admin.create_topic("t", partitions=1, replication_factor=2)
        cluster.wait_for_isr("t", 0, 2, timeout=30)
        if cluster.leader_of("t", 0) != 0:  # make broker 0 (the faulty one) the leader
            with cluster.admin() as admin:
                admin.alter_partition_reassignments({("t", 0): [0, 1]})
                cluster.wait_reassignments_done(["t"])
                cluster.wait_for_isr("t", 0, 2, timeout=30)
                admin.elect_leaders([("t", 0)], raise_on_error=False)
            cluster.wait_until(lambda: cluster.leader_of("t", 0) == 0 or None, timeout=30,
                               what="broker 0 leads t-0")
        first = cluster.leader_of("t", 0)
        sent = []
        with Producer(cluster.bootstrap, acks="all", retries=20) as producer:
            for i in range(20):
                value = f"v{i}".encode()
                producer.send("t", value, partition=0).result(timeout=30)
                sent.append(value)
        # Whichever broker led, broker 0 failed its write: broker 1 leads alone now.
        leader = cluster.wait_until(lambda: cluster.leader_of("t", 0) == 1 or None,
                                    timeout=30, what="broker 1 leads t-0")
        assert leader
        cluster.wait_until(lambda: cluster.isr_of("t", 0) == [1] or None, timeout=30,
                           what="the ISR of t-0 is [1]")
        metrics = urllib.request.urlopen(cluster.brokers[0].metrics_url, timeout=5).read()
        assert b"strom_broker_offline_log_dirs 1.0" in metrics
        assert [r.value for r in _read(cluster, "t", len(sent))] == sent
        assert all(b.is_ready() for b in cluster.brokers.values())
        # The cluster metadata knows, whichever broker is asked (here broker 1, not broker 0).
        assert list(cluster.partition("t", 0, via=1).offline_replicas) == [0]
        assert _kafka_offline_replicas(cluster.brokers[1].kafka_port, "t") == [0]
        with Admin(cluster.brokers[1].bootstrap) as admin:
            described = admin.describe_cluster()
            [topic] = admin.describe_topics(["t"])
        assert described.answered_by == 1 and described.offline_log_dirs == []
        dirs = {b.broker_id: b.offline_log_dirs for b in described.brokers}
        assert dirs[1] == () and len(dirs[0]) == 1, dirs
        assert dirs[0][0].startswith(str(cluster.brokers[0].log_dir)) and "ENOSPC" in dirs[0][0]
        assert topic.partitions[0].offline_replicas == [0]
        text = cluster_table(cluster_to_dict(described, [topic]))
        assert f"OfflineLogDir (broker 0): {cluster.brokers[0].log_dir}" in text, text
        assert "OfflineReplicas: 1" in text, text
        log0 = cluster.brokers[0].stderr_path.read_text()
        assert "reported offline log directories" in log0
        logs = "".join(b.stderr_path.read_text() for b in cluster.brokers.values())
        assert first == 0 and "is in an offline log directory" in logs
    finally:
        cluster.stop()


def _kafka_offline_replicas(port: int, topic: str) -> list[int]:
    """Partition 0's offline replicas in a Kafka-protocol Metadata answer (what Kafka clients
    and tools see)."""
    from kio.schema.metadata.v12 import request as req
    from kio.schema.metadata.v12 import response as resp

    from ..kafka.conftest import kafka_call

    body = req.MetadataRequest(topics=(req.MetadataRequestTopic(topic_id=None, name=topic),),  # type: ignore[arg-type]
                               allow_auto_topic_creation=False,
                               include_topic_authorized_operations=False)
    answer = kafka_call(port, 3, 12, body, resp.MetadataResponse)
    [part] = [p for t in answer.topics for p in t.partitions if p.partition_index == 0]
    return [int(r) for r in part.offline_replicas]


def _read(cluster: Cluster, topic: str, want: int) -> list[Record]:
    out: list[Record] = []
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        for _ in range(60):
            out += consumer.poll(timeout_ms=500)
            if len(out) >= want:
                break
    return out


def test_a_failed_replica_fetcher_is_restarted(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2, env={1: {supervision.FAULT_ENV: "replica-fetcher-0@0.5"},
                                        0: {supervision.FAULT_ENV: "replica-fetcher-1@0.5"}})
    try:
        cluster.start()
        cluster.wait_all_registered()
        with cluster.admin() as admin:
            admin.create_topic("f", partitions=2, replication_factor=2)
        for p in range(2):
            cluster.wait_for_isr("f", p, 2, timeout=30)
        cluster.wait_until(
            lambda: any("task replica-fetcher-" in b.stderr_path.read_text()
                        for b in cluster.brokers.values()) or None,
            timeout=30, what="an injected fetcher failure")
        with Producer(cluster.bootstrap, acks="all") as producer:
            for p in range(2):
                producer.send("f", b"x", partition=p).result(timeout=30)
        for p in range(2):
            cluster.wait_for_isr("f", p, 2, timeout=30)
        for b in cluster.brokers.values():
            assert b.is_alive() and b.is_ready()
            assert "exits with status 1" not in b.stderr_path.read_text()
    finally:
        cluster.stop()
