"""Admin against the fake cluster: topics, partitions, configs, cluster, offsets, retries."""

from __future__ import annotations

import pytest

from strom.client import Admin, ErrorCode, NewTopic, Producer, StromError, TopicPartition

from .conftest import FakeCluster


def test_topic_lifecycle(fake_cluster: FakeCluster) -> None:
    with Admin(fake_cluster.bootstrap) as admin:
        admin.create_topic("a", partitions=3, configs={"retention.ms": "1000"})
        results = admin.create_topics([NewTopic("b", 1), NewTopic("a", 1)],
                                      raise_on_error=False)
        assert results["b"] is None
        err = results["a"]
        assert err is not None and err.code is ErrorCode.TOPIC_ALREADY_EXISTS
        with pytest.raises(StromError) as info:
            admin.create_topic("a")
        assert info.value.code is ErrorCode.TOPIC_ALREADY_EXISTS
        assert admin.list_topics() == ["a", "b"]
        [desc] = admin.describe_topics(["a"])
        assert [p.partition for p in desc.partitions] == [0, 1, 2]
        assert desc.configs == {"retention.ms": "1000"}
        admin.create_partitions("a", 5)
        assert len(admin.describe_topics(["a"])[0].partitions) == 5
        with pytest.raises(StromError) as info:
            admin.create_partitions("a", 2)
        assert info.value.code is ErrorCode.INVALID_PARTITIONS
        admin.delete_topics(["b"])
        assert admin.list_topics() == ["a"]
        with pytest.raises(StromError) as info:
            admin.describe_topics(["b"])
        assert info.value.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_configs(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("a", 1)
    with Admin(fake_cluster.bootstrap) as admin:
        admin.alter_configs("a", set={"cleanup.policy": "compact", "x": "1"})
        admin.alter_configs("a", delete=["x"])
        entries = admin.describe_configs(topic="a")
        assert [(e.name, e.value) for e in entries] == [("cleanup.policy", "compact")]
        with pytest.raises(StromError):
            admin.describe_configs()


def test_cluster_and_retry_on_retriable_call_error(fake_cluster: FakeCluster) -> None:
    fake_cluster.call_faults["DescribeCluster"] = [ErrorCode.NOT_CONTROLLER]
    with Admin(fake_cluster.bootstrap, retry_backoff_ms=5) as admin:
        cluster = admin.describe_cluster()
    assert cluster.cluster_id == "fake" and [b.broker_id for b in cluster.brokers] == [1]


def test_list_offsets(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    with Producer(fake_cluster.bootstrap) as p:
        for i in range(10):
            p.send("t", b"x", timestamp_ms=100 + i)
    tp = TopicPartition("t", 0)
    with Admin(fake_cluster.bootstrap) as admin:
        assert admin.list_offsets({tp: "earliest"}) == {tp: 0}
        assert admin.list_offsets({tp: "latest"}) == {tp: 10}
        assert admin.list_offsets({tp: 105}) == {tp: 5}
        with pytest.raises(StromError):
            admin.list_offsets({tp: "sometime"})
        with pytest.raises(StromError) as info:
            admin.list_offsets({TopicPartition("nope", 0): "latest"})
        assert info.value.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_unreachable_cluster_times_out() -> None:
    with (
        Admin("127.0.0.1:1", request_timeout_ms=300, retry_backoff_ms=20) as admin,
        pytest.raises(StromError) as info,
    ):
        admin.list_topics()
    assert info.value.retriable
