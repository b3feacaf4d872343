"""Admin over the Kafka listener with librdkafka's AdminClient and kafka-python's admin client:
topics, partitions, configs, the cluster description, and a consumer validating its position
with OffsetForLeaderEpoch."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from strom.testing import BrokerProcess

pytestmark = pytest.mark.integration


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.kafka_bootstrap})


def test_create_describe_grow_and_delete_topics(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    futures = admin.create_topics([NewTopic("adm-a", 3, 1, config={"retention.ms": "60000"}),
                                   NewTopic("adm-b", 1, 1)])
    for f in futures.values():
        f.result(20)
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topics([NewTopic("adm-a", 1, 1)])["adm-a"].result(20)
    with pytest.raises(KafkaException, match="INVALID_REPLICATION_FACTOR"):
        admin.create_topics([NewTopic("adm-c", 1, 3)])["adm-c"].result(20)
    meta = admin.list_topics(timeout=10)
    assert len(meta.topics["adm-a"].partitions) == 3
    admin.create_partitions([NewPartitions("adm-a", 5)])["adm-a"].result(20)
    with pytest.raises(KafkaException, match="INVALID_PARTITIONS"):
        admin.create_partitions([NewPartitions("adm-a", 2)])["adm-a"].result(20)
    assert len(admin.list_topics(timeout=10).topics["adm-a"].partitions) == 5
    described = admin.describe_topics(
        __import__("confluent_kafka").TopicCollection(["adm-a"]))["adm-a"].result(20)
    assert len(described.partitions) == 5
    for f in admin.delete_topics(["adm-a", "adm-b"]).values():
        f.result(20)
    assert "adm-a" not in admin.list_topics(timeout=10).topics
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        admin.delete_topics(["adm-a"])["adm-a"].result(20)


def test_describe_and_alter_topic_configs(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    admin.create_topics([NewTopic("cfg", 1, 1, config={"retention.ms": "60000"})])["cfg"] \
        .result(20)
    resource = ConfigResource(ResourceType.TOPIC, "cfg")
    configs = admin.describe_configs([resource])[resource].result(20)
    assert configs["retention.ms"].value == "60000"
    assert configs["retention.ms"].source == 1  # DYNAMIC_TOPIC_CONFIG
    assert configs["cleanup.policy"].source == 5  # DEFAULT_CONFIG
    admin.incremental_alter_configs([ConfigResource(
        ResourceType.TOPIC, "cfg", incremental_configs=[
            ConfigEntry("segment.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("cleanup.policy", "compact",
                        incremental_operation=AlterConfigOpType.APPEND)])])[resource] \
        .result(20)
    configs = admin.describe_configs([resource])[resource].result(20)
    assert configs["segment.ms"].value == "3600000"
    assert configs["retention.ms"].source == 5  # back to the default
    assert set(configs["cleanup.policy"].value.split(",")) == {"delete", "compact"}
    bad = ConfigResource(ResourceType.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        admin.incremental_alter_configs([bad])[bad].result(20)
    broker_resource = ConfigResource(ResourceType.BROKER, "0")
    broker_configs = admin.describe_configs([broker_resource])[broker_resource].result(20)
    assert broker_configs["num.partitions"].value == "1"


def test_describe_cluster_lists_kafka_listener_addresses(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    cluster = admin.describe_cluster().result(20)
    assert cluster.controller is not None and cluster.controller.id == 0
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [
        (0, "127.0.0.1", broker.kafka_port)]


def test_kafka_python_admin_creates_describes_and_alters(broker: BrokerProcess) -> None:
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.kafka_bootstrap)
    try:
        admin.create_topics([KNewTopic("kp-admin", 2, 1)])
        assert "kp-admin" in admin.list_topics()
        admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-admin",
                                             configs={"retention.ms": "120000"})])
        described = admin.describe_configs(
            [KConfigResource(ConfigResourceType.TOPIC, "kp-admin")])
        text = repr(described)
        assert "120000" in text
        assert admin.describe_cluster()["cluster_id"]
        admin.delete_topics(["kp-admin"])
    finally:
        admin.close()
