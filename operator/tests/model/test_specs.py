"""Parsing specs: defaults, and errors that name the field and the fix."""

from __future__ import annotations

import pytest

from strom_operator.model import specs
from strom_operator.model.errors import SpecError


def errors_of(fn, spec):
    with pytest.raises(SpecError) as err:
        fn(spec)
    return {e.path: e.message for e in err.value.errors}


def test_minimal_cluster_gets_defaults():
    spec = specs.parse_cluster({"storage": {"size": "10Gi"}})
    assert spec.brokers.replicas == 3
    assert spec.controllers.replicas == 1
    assert spec.listeners.port == 9092 and spec.metrics.port == 9404
    assert spec.rack is None and spec.storage.delete_claim is False


def test_missing_storage_names_the_field_and_fix():
    errs = errors_of(specs.parse_cluster, {})
    assert "spec.storage" in errs and "10Gi" in errs["spec.storage"]


def test_every_bad_field_is_reported_at_once():
    errs = errors_of(
        specs.parse_cluster,
        {
            "storage": {"size": "ten gigs"},
            "brokers": {"replicas": 0},
            "imagePullPolicy": "Sometimes",
            "replicas": 3,
        },
    )
    assert "spec.storage.size" in errs and "quantity" in errs["spec.storage.size"]
    assert "spec.brokers.replicas" in errs and ">= 1" in errs["spec.brokers.replicas"]
    assert "spec.imagePullPolicy" in errs and "'Always'" in errs["spec.imagePullPolicy"]
    assert "spec.replicas" in errs and "known fields" in errs["spec.replicas"]


def test_booleans_are_not_integers():
    errs = errors_of(
        specs.parse_cluster, {"storage": {"size": "1Gi"}, "brokers": {"replicas": True}}
    )
    assert "spec.brokers.replicas" in errs


def test_broker_config_rules():
    errs = errors_of(
        specs.parse_cluster,
        {
            "storage": {"size": "1Gi"},
            "brokers": {"replicas": 3},
            "config": {"broker.id": 7},
        },
    )
    assert "spec.config" in errs and "broker.id" in errs["spec.config"]
    errs = errors_of(
        specs.parse_cluster,
        {
            "storage": {"size": "1Gi"},
            "brokers": {"replicas": 3},
            "config": {
                "default.replication.factor": 5,
                "min.insync.replicas": "x",
                "num.partitons": 3,
            },
        },
    )
    assert "lower it or add brokers" in errs["spec.config[default.replication.factor]"]
    assert "integer" in errs["spec.config[min.insync.replicas]"]
    assert "num.partitions" in errs["spec.config[num.partitons]"]


def test_quorum_must_fit_in_brokers():
    errs = errors_of(
        specs.parse_cluster,
        {
            "storage": {"size": "1Gi"},
            "brokers": {"replicas": 1},
            "controllers": {"replicas": 3},
        },
    )
    assert "spec.controllers.replicas" in errs


def test_topic_spec_errors():
    errs = errors_of(
        specs.parse_topic,
        {
            "partitions": 0,
            "config": {"retention.msec": 1, "retention.ms": "soon"},
            "topicName": "bad name!",
        },
    )
    assert "spec.clusterRef" in errs and "my-cluster" in errs["spec.clusterRef"]
    assert "spec.partitions" in errs
    assert "spec.topicName" in errs
    assert "spec.config[retention.ms]" in errs


def test_topic_min_isr_above_rf():
    errs = errors_of(
        specs.parse_topic,
        {
            "clusterRef": {"name": "c"},
            "replicationFactor": 2,
            "config": {"min.insync.replicas": 3},
        },
    )
    assert "min.insync.replicas" in errs["spec.config"]


def test_consumer_group_errors():
    errs = errors_of(
        specs.parse_consumer_group,
        {
            "clusterRef": {"name": "c"},
            "topics": [],
            "resetOffsets": {"to": "timestamp"},
            "autoscale": {
                "target": {"name": "w"},
                "minReplicas": 5,
                "maxReplicas": 2,
                "lagPerReplica": 0,
            },
        },
    )
    assert "spec.topics" in errs and "at least 1" in errs["spec.topics"]
    assert "spec.autoscale.lagPerReplica" in errs


def test_consumer_group_cross_field_rules():
    errs = errors_of(
        specs.parse_consumer_group,
        {
            "clusterRef": {"name": "c"},
            "topics": ["t"],
            "resetOffsets": {"to": "offset"},
            "autoscale": {
                "target": {"name": "w"},
                "minReplicas": 5,
                "maxReplicas": 2,
                "lagPerReplica": 10,
            },
        },
    )
    assert "spec.resetOffsets" in errs
    assert "spec.autoscale.minReplicas" in errs


def test_transition_rules():
    old = specs.parse_topic({"clusterRef": {"name": "c"}, "partitions": 6})
    new = specs.parse_topic({"clusterRef": {"name": "d"}, "partitions": 3})
    paths = {e.path for e in specs.check_transition(new, old)}
    assert paths == {"spec.partitions", "spec.clusterRef"}
    grown = specs.parse_topic({"clusterRef": {"name": "c"}, "partitions": 12})
    assert specs.check_transition(grown, old) == []

    a = specs.parse_cluster({"storage": {"size": "10Gi", "storageClassName": "fast"}})
    b = specs.parse_cluster({"storage": {"size": "5Gi", "storageClassName": "slow"}})
    messages = " ".join(e.message for e in specs.check_transition(b, a))
    assert "only grow" in messages and "storageClassName" in messages
    assert specs.check_transition(a, b) == [
        e for e in specs.check_transition(a, b) if "storageClassName" in e.message
    ]


def test_config_accepts_integers_and_strings_and_names_the_fix_for_the_rest():
    from strom_operator.model.fields import CONFIG_MAX_KEYS

    base = {"storage": {"size": "10Gi"}}
    ok = specs.parse_cluster({**base, "config": {"num.partitions": 3, "log.retention.ms": "1000"}})
    assert ok.config == {"num.partitions": 3, "log.retention.ms": "1000"}
    with pytest.raises(specs.SpecError) as err:
        specs.parse_cluster({**base, "config": {"auto.create.topics.enable": True,
                                                "num.partitions": 1.5}})
    text = str(err.value)
    assert 'spec.config[auto.create.topics.enable]' in text
    assert 'quote it: auto.create.topics.enable: "true"' in text
    assert 'quote it: num.partitions: "1.5"' in text
    many = {f"k{i}": "v" for i in range(CONFIG_MAX_KEYS + 1)}
    with pytest.raises(specs.SpecError, match=f"at most {CONFIG_MAX_KEYS}"):
        specs.parse_topic({"clusterRef": {"name": "c"}, "partitions": 1, "config": many})
