"""A cluster's min.insync.replicas never makes its own ``__consumer_offsets`` unusable.

The issue-12 scenario: ``__consumer_offsets`` created at replication factor 1 (one broker then,
or ``offsets.topic.replication.factor=1``) in a cluster whose default ``min.insync.replicas`` is
2. The coordinator writes group metadata with acks=all; before the fix every write failed with
NOT_ENOUGH_REPLICAS and the group rebalanced forever. As in Kafka, an internal topic's effective
min ISR is capped at its replication factor.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from strom.broker.topics import effective_log_config
from strom.client import Consumer, Producer
from strom.groups.offsets import OFFSETS_TOPIC
from strom.storage.config import LogConfig
from strom.testing import running_cluster


def test_internal_topic_min_isr_is_capped_at_its_replication_factor() -> None:
    configured = LogConfig(min_insync_replicas=2)
    assert effective_log_config(OFFSETS_TOPIC, 1, configured).min_insync_replicas == 1
    assert effective_log_config(OFFSETS_TOPIC, 3, configured).min_insync_replicas == 2
    # user topics keep what was configured: acks=all to them says NOT_ENOUGH_REPLICAS
    assert effective_log_config("payments", 1, configured).min_insync_replicas == 2


@pytest.mark.integration
def test_group_works_when_offsets_topic_rf_is_below_cluster_min_isr(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=2, config={
            "min.insync.replicas": 2, "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 2, "group.initial.rebalance.delay.ms": 0}) as cluster:
        with cluster.admin() as admin:
            admin.create_topic("t", partitions=1, replication_factor=2)
        producer = Producer(cluster.bootstrap, acks=1)
        producer.send("t", value=b"hello").result(timeout=20)
        producer.close()
        consumer = Consumer(cluster.bootstrap, group_id="g5", auto_offset_reset="earliest")
        try:
            consumer.subscribe(["t"])
            got = []
            end = time.monotonic() + 25
            while not got and time.monotonic() < end:
                got += consumer.poll(200)
            assert [r.value for r in got] == [b"hello"], "the group never got its assignment"
            consumer.commit()
        finally:
            consumer.close()
        with cluster.admin() as admin:
            desc = admin.describe_topics([OFFSETS_TOPIC])[0]
            assert all(len(p.replicas) == 1 for p in desc.partitions)
