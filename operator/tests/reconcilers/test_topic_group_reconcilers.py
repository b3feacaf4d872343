"""StromTopic and StromConsumerGroup reconciles against a fake cluster."""

from __future__ import annotations

import datetime

import pytest

from strom_operator.model.groups import GroupView, PartitionLag
from strom_operator.reconcilers.cluster import ReconcileError
from strom_operator.reconcilers.group import GroupReconciler
from strom_operator.reconcilers.topic import TopicReconciler
from tests.reconcilers.fake import FakeApi
from tests.reconcilers.fake_admin import FakeCluster


def _api():
    api = FakeApi()
    api.put(
        {
            "apiVersion": "strom.dev/v1alpha1",
            "kind": "StromCluster",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
            "spec": {"storage": {"size": "1Gi"}},
        }
    )
    return api


def _topic(api, spec, generation=1, name="orders"):
    live = api.find("StromTopic", name)
    return {
        "apiVersion": "strom.dev/v1alpha1",
        "kind": "StromTopic",
        "metadata": {"name": name, "namespace": "ns", "generation": generation},
        "spec": {"clusterRef": {"name": "c"}, **spec},
        "status": (live or {}).get("status") or {},
    }


def _ready(api, kind, name):
    return next(c for c in api.find(kind, name)["status"]["conditions"] if c["type"] == "Ready")


def test_topic_create_grow_config_and_replication_factor():
    api, fake = _api(), FakeCluster(range(3))
    r = TopicReconciler(api, fake)
    spec = {"partitions": 3, "replicationFactor": 1, "config": {"retention.ms": 60000}}
    out = r.reconcile(_topic(api, spec))
    assert ("create", "orders", 3, 1, {"retention.ms": "60000"}) in fake.calls
    status = api.find("StromTopic", "orders")["status"]
    assert status["partitions"] == 3 and status["replicationFactor"] == 1
    assert status["config"] == {"retention.ms": "60000"} and status["observedGeneration"] == 1
    assert _ready(api, "StromTopic", "orders")["status"] == "True" and not out.requeue

    spec = {"partitions": 5, "replicationFactor": 1, "config": {"cleanup.policy": "compact"}}
    r.reconcile(_topic(api, spec, 2), {"clusterRef": {"name": "c"}, "partitions": 3})
    assert ("grow", "orders", 5) in fake.calls
    assert ("config", "orders", {"cleanup.policy": "compact"}, ["retention.ms"]) in fake.calls
    assert api.find("StromTopic", "orders")["status"]["partitions"] == 5

    spec = {**spec, "replicationFactor": 3}
    out = r.reconcile(_topic(api, spec, 3))
    (call,) = [c for c in fake.calls if c[0] == "reassign"]
    assert call[2] == 0, "keeps the cluster's throttle"
    assert all(len(set(rs)) == 3 for rs in call[1].values()) and len(call[1]) == 5
    assert _ready(api, "StromTopic", "orders")["reason"] == "Reassigning" and out.requeue
    r.reconcile(_topic(api, spec, 3))
    assert len([c for c in fake.calls if c[0] == "reassign"]) == 1, "one reassignment"
    fake.finish()
    out = r.reconcile(_topic(api, spec, 3))
    assert api.find("StromTopic", "orders")["status"]["replicationFactor"] == 3
    assert _ready(api, "StromTopic", "orders")["status"] == "True" and not out.requeue


def test_topic_shrink_and_too_high_rf_are_rejected_in_status():
    api, fake = _api(), FakeCluster(range(3))
    r = TopicReconciler(api, fake)
    r.reconcile(_topic(api, {"partitions": 4, "replicationFactor": 3}))
    out = r.reconcile(_topic(api, {"partitions": 2, "replicationFactor": 3}, 2))
    ready = _ready(api, "StromTopic", "orders")
    assert ready["reason"] == "PartitionsCannotShrink" and "only grow" in ready["message"]
    assert out.events[0].type == "Warning"
    assert not any(c[0] == "grow" for c in fake.calls)
    r.reconcile(_topic(api, {"partitions": 4, "replicationFactor": 5}, 3))
    assert _ready(api, "StromTopic", "orders")["reason"] == "NotEnoughBrokers"


def test_topic_admin_failure_is_retryable_with_status():
    api, fake = _api(), FakeCluster(range(3))
    fake.reachable = False
    with pytest.raises(ReconcileError) as err:
        TopicReconciler(api, fake).reconcile(_topic(api, {"partitions": 1}))
    assert not err.value.permanent and err.value.reason == "AdminApiError"
    assert "NETWORK_EXCEPTION" in _ready(api, "StromTopic", "orders")["message"]


def test_topic_deletion_policy():
    api, fake = _api(), FakeCluster(range(3))
    r = TopicReconciler(api, fake)
    r.reconcile(_topic(api, {"partitions": 1, "replicationFactor": 1}))
    events = r.delete(_topic(api, {"partitions": 1, "deletionPolicy": "Retain"}))
    assert not any(c[0] == "delete" for c in fake.calls) and "orders" in fake.configs
    assert events[0].reason == "TopicRetained"
    events = r.delete(_topic(api, {"partitions": 1, "deletionPolicy": "Delete"}))
    assert ("delete", "orders") in fake.calls and not fake.topic(None, None, "orders").live
    assert events[0].reason == "TopicDeleted"
    fake.reachable = False
    with pytest.raises(ReconcileError):
        r.delete(_topic(api, {"partitions": 1, "deletionPolicy": "Delete"}))


# -- consumer groups ------------------------------------------------------------------------------


def _group(api, spec, generation=1, name="billing"):
    live = api.find("StromConsumerGroup", name)
    return {
        "apiVersion": "strom.dev/v1alpha1",
        "kind": "StromConsumerGroup",
        "metadata": {"name": name, "namespace": "ns", "generation": generation},
        "spec": {"clusterRef": {"name": "c"}, "topics": ["orders"], **spec},
        "status": (live or {}).get("status") or {},
    }


def _lags(*lags):
    return tuple(PartitionLag("orders", p, 10, 10 + lag, lag) for p, lag in enumerate(lags))


def _gcond(api, type_):
    obj = api.find("StromConsumerGroup", "billing")
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


def test_group_status_has_members_and_lag():
    api, fake = _api(), FakeCluster(range(3))
    lags = (*_lags(5, 7), PartitionLag("other", 0, None, 100, 100))
    fake.group_view = GroupView("Stable", 2, lags, 2)
    GroupReconciler(api, fake).reconcile(_group(api, {}))
    status = api.find("StromConsumerGroup", "billing")["status"]
    assert status["state"] == "Stable" and status["members"] == 2
    assert status["totalLag"] == 12, "only the spec's topics"
    assert status["partitionLag"][1] == {
        "topic": "orders",
        "partition": 1,
        "committedOffset": 10,
        "endOffset": 17,
        "lag": 7,
    }


def test_offset_reset_waits_for_an_empty_group_and_applies_once():
    api, fake = _api(), FakeCluster(range(3))
    r = GroupReconciler(api, fake)
    spec = {"resetOffsets": {"to": "earliest"}}
    fake.group_view = GroupView("Stable", 1, _lags(3), 1)
    out = r.reconcile(_group(api, spec))
    assert not fake.resets and out.requeue
    c = _gcond(api, "OffsetsReset")
    assert c["reason"] == "WaitingForEmptyGroup" and "1 member" in c["message"]

    fake.group_view = GroupView("Empty", 0, _lags(3), 1)
    r.reconcile(_group(api, spec))
    assert fake.resets == [("billing", ["orders"], ("earliest", 0))]
    status = api.find("StromConsumerGroup", "billing")["status"]
    assert status["appliedResetGeneration"] == 1 and status["appliedResetHash"]
    r.reconcile(_group(api, spec, 2))
    assert len(fake.resets) == 1, "same resetOffsets: not again"

    spec = {"resetOffsets": {"to": "timestamp", "timestamp": "2026-01-01T00:00:00Z"}}
    r.reconcile(_group(api, spec, 3))
    assert fake.resets[-1] == ("billing", ["orders"], ("datetime", 1767225600000))


def _deployment(api, replicas):
    api.put(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "worker", "namespace": "ns"},
            "spec": {"replicas": replicas},
        }
    )


def test_lag_autoscaling_is_capped_and_cools_down():
    api, fake = _api(), FakeCluster(range(3))
    now = [datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)]
    r = GroupReconciler(api, fake, now=lambda: now[0])
    spec = {
        "autoscale": {
            "target": {"name": "worker"},
            "minReplicas": 1,
            "maxReplicas": 10,
            "lagPerReplica": 100,
            "cooldownSeconds": 300,
        }
    }
    r.reconcile(_group(api, spec))
    assert _gcond(api, "Autoscaling")["reason"] == "TargetNotFound"

    _deployment(api, 1)
    fake.group_view = GroupView("Stable", 1, _lags(400, 400), 4)
    r.reconcile(_group(api, spec))
    assert api.find("Deployment", "worker")["spec"]["replicas"] == 4, "8 wanted, 4 partitions"
    assert ("scale", "Deployment", "worker") in api.calls
    assert _gcond(api, "Autoscaling")["reason"] == "ScaledUp"

    fake.group_view = GroupView("Stable", 4, _lags(0, 50), 4)
    now[0] += datetime.timedelta(seconds=60)
    r.reconcile(_group(api, spec))
    assert api.find("Deployment", "worker")["spec"]["replicas"] == 4, "cooling down"
    assert (
        "cooling down"
        in api.find("StromConsumerGroup", "billing")["status"]["autoscale"]["message"]
    )
    now[0] += datetime.timedelta(seconds=300)
    r.reconcile(_group(api, spec))
    assert api.find("Deployment", "worker")["spec"]["replicas"] == 1
    assert _gcond(api, "Autoscaling")["reason"] == "ScaledDown"
