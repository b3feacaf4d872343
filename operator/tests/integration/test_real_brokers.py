"""The operator's reconcilers against real broker processes (the Admin API for real).

Kubernetes is the in-memory API of the reconciler tests; broker processes stand in for the
StatefulSet's pods: when the reconcile raises the StatefulSet's replicas the test starts the new
brokers, and it stops brokers only after the reconcile has shrunk the StatefulSet, as Kubernetes
would.  The operator reaches the brokers through ``AdminClusterAdmin`` with a bootstrap override.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from strom.client import Consumer, Producer, TopicPartition
from strom.testing import Cluster, running_cluster
from strom_operator.model.manifests import ClusterRef
from strom_operator.model.specs import parse_cluster
from strom_operator.reconcilers.admin import AdminClusterAdmin
from strom_operator.reconcilers.cluster import ClusterReconciler
from strom_operator.reconcilers.group import GroupReconciler
from strom_operator.reconcilers.topic import TopicReconciler
from tests.reconcilers.fake import FakeApi

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TOPIC, PARTITIONS, RECORDS = "events", 6, 600


def _cluster_body(api: FakeApi, replicas: int) -> dict[str, Any]:
    live = api.find("StromCluster", "c")
    return {
        "apiVersion": "strom.dev/v1alpha1",
        "kind": "StromCluster",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u-1", "generation": 1},
        "spec": {"storage": {"size": "1Gi"}, "brokers": {"replicas": replicas}},
        "status": (live or {}).get("status") or {},
    }


def _cond(api: FakeApi, kind: str, name: str, type_: str) -> dict[str, Any] | None:
    obj = api.find(kind, name) or {}
    return next(
        (c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_), None
    )


def _start(cluster: Cluster, ids: list[int]) -> None:
    for b in ids:
        cluster.brokers[b].start(wait=False)
    for b in ids:
        cluster.brokers[b].wait_ready()
    cluster.wait_until(
        lambda: set(ids) <= {b.broker_id for b in cluster.describe().live_brokers} or None,
        timeout=60,
        what=f"brokers {ids} registered and unfenced",
    )


def _produce(bootstrap: str) -> None:
    with Producer(bootstrap, acks="all", request_timeout_ms=5000) as producer:
        for i in range(RECORDS):
            producer.send(TOPIC, b"%d" % i, partition=i % PARTITIONS)
        producer.flush(60)


def _consume(bootstrap: str) -> list[int]:
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    values: list[int] = []
    with Consumer(bootstrap) as consumer:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + 60
        while len(values) < RECORDS and time.monotonic() < deadline:
            values += [int(r.value or b"-1") for r in consumer.poll(timeout_ms=500)]
    return sorted(values)


def _replicas_on(admin: Any, brokers: set[int]) -> int:
    return sum(
        len(brokers & set(p.replicas)) for t in admin.describe_topics([TOPIC]) for p in t.partitions
    )


def test_scale_3_to_5_rebalances_then_5_to_3_drains_first(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, brokers=5, voters=3, config={"min.insync.replicas": 2})
    try:
        _start(cluster, [0, 1, 2])
        stable = ",".join(cluster.brokers[b].bootstrap for b in (0, 1, 2))
        operator_admin = AdminClusterAdmin({"*": stable}, timeout_ms=5000)
        api = FakeApi()

        def reconcile(replicas: int) -> int:
            ClusterReconciler(api, operator_admin, throttle_bytes_per_sec=10_000_000).reconcile(
                _cluster_body(api, replicas)
            )
            return int(api.find("StatefulSet", "c-broker")["spec"]["replicas"])

        with cluster.admin() as admin:
            admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
            _produce(stable)
            assert reconcile(3) == 3
            assert _cond(api, "StromCluster", "c", "AdminApiAvailable")["status"] == "True"

            # 3 -> 5: the StatefulSet grows at once; the new "pods" start; the reconcile then
            # moves replicas onto them through a reassignment.
            assert reconcile(5) == 5
            _start(cluster, [3, 4])
            seen: list[tuple[str, str]] = []
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                reconcile(5)
                c = _cond(api, "StromCluster", "c", "Rebalancing")
                if c is not None:
                    seen.append((c["status"], c["reason"]))
                    if c["status"] == "False" and ("True", "Started") in seen:
                        break
                time.sleep(0.5)
            assert ("True", "Started") in seen, seen
            assert seen[-1] == ("False", "Done"), seen
            assert _replicas_on(admin, {3}) > 0 and _replicas_on(admin, {4}) > 0
            loads = [_replicas_on(admin, {b}) for b in range(5)]
            assert max(loads) - min(loads) <= 1, loads
            cluster.wait_until(
                lambda: admin.replication_throttle() is None,
                timeout=15,
                what="the replication throttle removed after the rebalance",
            )

            # 5 -> 3: the StatefulSet keeps 5 until brokers 3 and 4 hold nothing.
            steps: list[str] = []
            deadline = time.monotonic() + 120
            replicas = 5
            while replicas == 5 and time.monotonic() < deadline:
                assert all(cluster.brokers[b].is_alive() for b in (3, 4))
                replicas = reconcile(3)
                scaling = _cond(api, "StromCluster", "c", "Scaling")
                assert scaling is not None
                steps.append(scaling["reason"])
                if replicas == 3:
                    # The drain may finish between any count taken before the reconcile and the
                    # operator's own view, so check what the decision must have seen: nothing on
                    # 3/4 and no reassignment still moving replicas (none moves them back).
                    held = _replicas_on(admin, {3, 4})
                    assert held == 0, "the StatefulSet shrank while brokers 3/4 held replicas"
                    assert not admin.list_partition_reassignments([TOPIC]), (
                        "the StatefulSet shrank during the drain's reassignment")
                time.sleep(0.5)
            assert replicas == 3, steps
            assert "Drain" in steps and steps[-1] == "ShrinkStatefulSet", steps
            assert _replicas_on(admin, {3, 4}) == 0
            leaders = {p.leader for t in admin.describe_topics([TOPIC]) for p in t.partitions}
            assert leaders <= {0, 1, 2}
            for b in (3, 4):
                cluster.stop_broker(b)
            # Their pods are gone: once fenced, the next reconcile forgets them.
            cluster.wait_until(
                lambda: {3, 4} <= set(admin.describe_cluster().fenced_broker_ids) or None,
                timeout=30, what="brokers 3 and 4 fenced after they stopped")
            reconcile(3)
            described = admin.describe_cluster()
            assert not {3, 4} & set(described.fenced_broker_ids), "removed brokers unregistered"
            assert sorted(b.broker_id for b in described.brokers) == [0, 1, 2]
            assert _consume(stable) == list(range(RECORDS)), "records lost or duplicated"
    finally:
        cluster.stop()


def _topic_body(api: FakeApi, spec: dict[str, Any], generation: int) -> dict[str, Any]:
    live = api.find("StromTopic", "orders")
    return {
        "apiVersion": "strom.dev/v1alpha1",
        "kind": "StromTopic",
        "metadata": {"name": "orders", "namespace": "ns", "generation": generation},
        "spec": {"clusterRef": {"name": "c"}, "deletionPolicy": "Delete", **spec},
        "status": (live or {}).get("status") or {},
    }


def test_strom_topic_lifecycle_against_real_brokers(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=3) as cluster, cluster.admin() as admin:
        api = FakeApi()
        api.put(_cluster_body(api, 3))
        topics = TopicReconciler(api, AdminClusterAdmin({"*": cluster.bootstrap}))

        spec: dict[str, Any] = {"partitions": 2, "replicationFactor": 1}
        topics.reconcile(_topic_body(api, spec, 1))
        (desc,) = admin.describe_topics(["orders"])
        assert len(desc.partitions) == 2 and all(len(p.replicas) == 1 for p in desc.partitions)

        spec = {**spec, "partitions": 4, "config": {"retention.ms": 3600000}}
        topics.reconcile(_topic_body(api, spec, 2))
        (desc,) = admin.describe_topics(["orders"])
        assert len(desc.partitions) == 4
        assert desc.configs.get("retention.ms") == "3600000"
        status = api.find("StromTopic", "orders")["status"]
        assert status["partitions"] == 4 and status["config"]["retention.ms"] == "3600000"

        spec = {**spec, "replicationFactor": 3}
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            out = topics.reconcile(_topic_body(api, spec, 3))
            if not out.requeue:
                break
            time.sleep(0.5)
        ready = _cond(api, "StromTopic", "orders", "Ready")
        assert ready is not None and ready["status"] == "True", ready
        (desc,) = admin.describe_topics(["orders"])
        assert all(sorted(p.replicas) == [0, 1, 2] for p in desc.partitions)
        assert api.find("StromTopic", "orders")["status"]["replicationFactor"] == 3

        shrink = {**spec, "partitions": 2}
        topics.reconcile(_topic_body(api, shrink, 4))
        ready = _cond(api, "StromTopic", "orders", "Ready")
        assert ready is not None and ready["reason"] == "PartitionsCannotShrink"

        topics.delete(_topic_body(api, spec, 5))
        cluster.wait_until(
            lambda: "orders" not in admin.list_topics(), timeout=30, what="topic deleted"
        )


def test_unreachable_cluster_is_unknown_quickly() -> None:
    spec = parse_cluster({"storage": {"size": "1Gi"}})
    ref = ClusterRef(name="c", namespace="ns", uid="u", generation=1)
    admin = AdminClusterAdmin({"*": "127.0.0.1:1"}, timeout_ms=1500)
    started = time.monotonic()
    assert admin.describe(ref, spec) is None
    assert time.monotonic() - started < 10
    assert admin.last_error is not None and "127.0.0.1:1" in admin.last_error


def _group_body(api: FakeApi, spec: dict[str, Any], generation: int) -> dict[str, Any]:
    live = api.find("StromConsumerGroup", "billing")
    return {
        "apiVersion": "strom.dev/v1alpha1",
        "kind": "StromConsumerGroup",
        "metadata": {"name": "billing", "namespace": "ns", "generation": generation},
        "spec": {"clusterRef": {"name": "c"}, "topics": [TOPIC], **spec},
        "status": (live or {}).get("status") or {},
    }


def test_strom_consumer_group_lag_reset_and_autoscale_against_real_brokers(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path, brokers=1) as cluster, cluster.admin() as admin:
        admin.find_coordinator("billing")
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=1)
        _produce(cluster.bootstrap)
        per_partition = RECORDS // PARTITIONS
        admin.commit_group_offsets(
            "billing", {TopicPartition(TOPIC, p): per_partition for p in range(PARTITIONS)}
        )
        api = FakeApi()
        api.put(_cluster_body(api, 1))
        api.put(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "worker", "namespace": "ns"},
                "spec": {"replicas": 1},
            }
        )
        groups = GroupReconciler(api, AdminClusterAdmin({"*": cluster.bootstrap}))
        groups.reconcile(_group_body(api, {}, 1))
        status = api.find("StromConsumerGroup", "billing")["status"]
        assert status["totalLag"] == 0 and status["members"] == 0
        assert len(status["partitionLag"]) == PARTITIONS

        spec = {
            "resetOffsets": {"to": "earliest"},
            "autoscale": {"target": {"name": "worker"}, "maxReplicas": 50, "lagPerReplica": 10},
        }
        groups.reconcile(_group_body(api, spec, 2))
        committed = admin.list_group_offsets("billing")
        assert set(committed.values()) == {0}
        status = api.find("StromConsumerGroup", "billing")["status"]
        assert status["totalLag"] == RECORDS and status["appliedResetGeneration"] == 2
        assert api.find("Deployment", "worker")["spec"]["replicas"] == PARTITIONS, "capped"

        # A member joins: a changed resetOffsets waits (the group is not empty), then applies
        # once the member has left.
        consumer = Consumer(
            cluster.bootstrap,
            group_id="billing",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
        )
        try:
            consumer.subscribe([TOPIC])
            deadline = time.monotonic() + 60
            while not consumer.assignment() and time.monotonic() < deadline:
                consumer.poll(timeout_ms=200)
            assert consumer.assignment()
            latest = {**spec, "resetOffsets": {"to": "latest"}}
            out = groups.reconcile(_group_body(api, latest, 3))
            status = api.find("StromConsumerGroup", "billing")["status"]
            assert status["members"] == 1 and out.requeue
            waiting = _cond(api, "StromConsumerGroup", "billing", "OffsetsReset")
            assert waiting is not None and waiting["reason"] == "WaitingForEmptyGroup"
            assert set(admin.list_group_offsets("billing").values()) == {0}
        finally:
            consumer.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            groups.reconcile(_group_body(api, latest, 3))
            applied = _cond(api, "StromConsumerGroup", "billing", "OffsetsReset")
            if applied is not None and applied["status"] == "True":
                break
            time.sleep(0.5)
        assert set(admin.list_group_offsets("billing").values()) == {per_partition}
        status = api.find("StromConsumerGroup", "billing")["status"]
        assert status["totalLag"] == 0 and status["appliedResetGeneration"] == 3
