"""The StromCluster reconcile steps against an in-memory API."""

from __future__ import annotations

import pytest

from strom_operator.model import manifests
from strom_operator.reconcilers import cluster as rc
from tests.reconcilers.fake import FakeApi


def body(spec=None, generation=1, name="c", status=None):
    return {
        "apiVersion": "strom.dev/v1alpha1",
        "kind": "StromCluster",
        "metadata": {"name": name, "namespace": "ns", "uid": "u-1", "generation": generation},
        "spec": spec if spec is not None else {"storage": {"size": "10Gi"}},
        "status": status or {},
    }


def cond(api, type_, name="c"):
    obj = api.find("StromCluster", name)
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


def test_first_reconcile_creates_everything_and_reports_not_ready():
    api = FakeApi()
    out = rc.ClusterReconciler(api).reconcile(body())
    kinds = sorted(k for (_, k, _, _) in api.objects)
    assert kinds == sorted(
        [
            "ServiceAccount",
            "ConfigMap",
            "Service",
            "Service",
            "StatefulSet",
            "PodDisruptionBudget",
            "StromCluster",
        ]
    )
    ready = cond(api, "Ready")
    assert ready["status"] == "False" and ready["observedGeneration"] == 1
    status = api.find("StromCluster", "c")["status"]
    assert status["selector"] == manifests.label_selector("c")
    assert status["bootstrapServers"] == "c-bootstrap.ns.svc:9092"
    assert status["kafkaBootstrapServers"] == "c-bootstrap.ns.svc:19092"  # issue 14
    assert out.requeue


def test_idempotent_and_ready_when_the_statefulset_is():
    api = FakeApi()
    r = rc.ClusterReconciler(api)
    r.reconcile(body())
    before = {k: v for k, v in api.objects.items() if k[1] != "StromCluster"}
    api.find("StatefulSet", "c-broker")["status"] = {"replicas": 3, "readyReplicas": 3}
    r.reconcile(body())
    after = {k: v for k, v in api.objects.items() if k[1] not in ("StromCluster",)}
    assert before.keys() == after.keys()
    assert cond(api, "Ready")["status"] == "True"
    assert api.find("StromCluster", "c")["status"]["brokers"] == 3


def test_invalid_spec_is_a_permanent_error_with_status():
    api = FakeApi()
    with pytest.raises(rc.ReconcileError) as err:
        rc.ClusterReconciler(api).reconcile(
            body({"storage": {"size": "lots"}, "brokers": {"replicas": 0}})
        )
    assert err.value.permanent and err.value.reason == "InvalidSpec"
    ready = cond(api, "Ready")
    assert ready["reason"] == "InvalidSpec"
    assert "spec.storage.size" in ready["message"] and "spec.brokers.replicas" in ready["message"]
    assert not any(k[1] == "StatefulSet" for k in api.objects)


def test_invalid_transition_is_refused():
    api = FakeApi()
    old = {"storage": {"size": "20Gi"}}
    with pytest.raises(rc.ReconcileError) as err:
        rc.ClusterReconciler(api).reconcile(body({"storage": {"size": "10Gi"}}), old_spec=old)
    assert err.value.reason == "InvalidChange" and "only grow" in str(err.value)


def test_api_failure_is_retryable_and_reported():
    api = FakeApi()
    api.fail_apply["StatefulSet"] = 500
    with pytest.raises(rc.ReconcileError) as err:
        rc.ClusterReconciler(api).reconcile(body())
    assert not err.value.permanent and err.value.reason == "ApplyFailed"
    assert "StatefulSet c-broker" in cond(api, "Ready")["message"]


def test_missing_service_monitor_crd_is_a_condition_not_a_failure():
    api = FakeApi()
    api.fail_apply["ServiceMonitor"] = 404
    spec = {"storage": {"size": "1Gi"}, "metrics": {"serviceMonitor": {"enabled": True}}}
    r = rc.ClusterReconciler(api)
    out = r.reconcile(body(spec))
    sm = cond(api, "ServiceMonitorAvailable")
    assert (sm["status"], sm["reason"]) == ("False", "CRDNotInstalled")
    assert "prometheus-operator" in sm["message"]
    assert [e.reason for e in out.events if e.type == "Warning"] == ["CRDNotInstalled"]
    assert cond(api, "Reconciled")["status"] == "True"  # the rest was applied
    api.find("StatefulSet", "c-broker")["status"] = {"replicas": 3, "readyReplicas": 3}
    out = r.reconcile(body(spec, status=api.find("StromCluster", "c")["status"]))
    assert cond(api, "Ready")["status"] == "True"
    assert not [e for e in out.events if e.type == "Warning"], "warned once, not every reconcile"
    del api.fail_apply["ServiceMonitor"]
    r.reconcile(body(spec, status=api.find("StromCluster", "c")["status"]))
    assert cond(api, "ServiceMonitorAvailable")["status"] == "True"


def _ready_pods(api, n=3, name="c"):
    for i in range(n):
        api.put({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": f"{name}-broker-{i}", "namespace": "ns",
                              "labels": manifests.selector_labels(name)},
                 "status": {"conditions": [{"type": "Ready", "status": "True"}]}})


def test_nodes_without_the_zone_label_are_reported_and_the_cluster_carries_on():
    from tests.reconcilers.fake_admin import FakeCluster

    api = FakeApi()
    admin = FakeCluster([0, 1, 2], racks={0: "a", 1: None, 2: None})
    spec = {"storage": {"size": "1Gi"}, "rack": {"topologyKey": "topology.kubernetes.io/zone"}}
    r = rc.ClusterReconciler(api, admin)
    r.reconcile(body(spec))
    api.find("StatefulSet", "c-broker")["status"] = {"replicas": 3, "readyReplicas": 3}
    r.reconcile(body(spec, status=api.find("StromCluster", "c")["status"]))
    rack = cond(api, "RackAware")
    assert (rack["status"], rack["reason"]) == ("False", "NodeLabelMissing")
    assert "[1, 2]" in rack["message"] and "topology.kubernetes.io/zone" in rack["message"]
    assert cond(api, "Ready")["status"] == "True"


@pytest.mark.parametrize(
    ("connected", "ns_labels", "status", "reason"),
    [
        (True, {}, "False", "NotEnforced"),
        (False, {}, "True", "Enforced"),
        (None, {}, "Unknown", "NotProbed"),  # refused or unresolvable: no verdict
        (True, {"strom.dev/client": "true"}, "Unknown", "CannotTell"),
    ],
)
def test_network_policy_enforcement_is_probed(connected, ns_labels, status, reason):
    from tests.reconcilers.fake_admin import FakeCluster

    api = FakeApi()
    api.put({"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": "strom-system", "labels": ns_labels}})
    _ready_pods(api)
    probed = []

    def probe(host, port):
        probed.append((host, port))
        return connected, "refused" if connected is None else "probe"

    who = manifests.OperatorIdentity("strom-system", (("app", "op"),))
    spec = {"storage": {"size": "1Gi"},
            "networkPolicy": {"enabled": True,
                              "clientNamespaceLabels": {"strom.dev/client": "true"}}}
    r = rc.ClusterReconciler(api, FakeCluster([0, 1, 2]), operator=who, probe=probe)
    r.reconcile(body(spec))
    got = cond(api, "NetworkPolicyEnforced")
    assert (got["status"], got["reason"]) == (status, reason), got["message"]
    assert probed == [("c-broker-0.c-brokers.ns.svc", 19092)]
    policy = api.find("NetworkPolicy", "c-broker")
    assert policy["spec"]["ingress"][-1]["ports"] == [{"port": 9092, "protocol": "TCP"}]


def test_scale_out_applies_at_once_scale_in_waits_for_drain():
    api = FakeApi()
    r = rc.ClusterReconciler(api)
    r.reconcile(body())
    r.reconcile(body({"storage": {"size": "10Gi"}, "brokers": {"replicas": 5}}))
    assert api.find("StatefulSet", "c-broker")["spec"]["replicas"] == 5
    r.reconcile(body({"storage": {"size": "10Gi"}, "brokers": {"replicas": 3}}))
    assert api.find("StatefulSet", "c-broker")["spec"]["replicas"] == 5, "no shrink before drain"
    assert cond(api, "Scaling")["reason"] == "WaitForDrain"
    # Five ready pods while scaling in to three are not "brokers not ready" (it read "5/3").
    api.find("StatefulSet", "c-broker")["status"] = {"replicas": 5, "readyReplicas": 5}
    r.reconcile(body({"storage": {"size": "10Gi"}, "brokers": {"replicas": 3}}))
    ready = cond(api, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InProgress"), ready
    assert "scaling in to 3" in ready["message"]


class DrainedAdmin:
    def __init__(self, per_broker, rf=3):
        self.per_broker = per_broker
        self.rf = rf

    def describe(self, ref, spec):
        return rc.ClusterState(
            registered=frozenset(self.per_broker),
            replicas_per_broker=self.per_broker,
            max_replication_factor=self.rf,
            partitions=10,
            under_replicated=0,
            active_controller=0,
            reassignment_in_progress=False,
        )


def test_scale_in_shrinks_once_drained_and_refuses_below_rf():
    api = FakeApi()
    rc.ClusterReconciler(api).reconcile(
        body({"storage": {"size": "1Gi"}, "brokers": {"replicas": 5}})
    )
    spec3 = {"storage": {"size": "1Gi"}, "brokers": {"replicas": 3}}
    rc.ClusterReconciler(api, DrainedAdmin({0: 5, 1: 5, 2: 5, 3: 0, 4: 0})).reconcile(body(spec3))
    assert api.find("StatefulSet", "c-broker")["spec"]["replicas"] == 3
    spec2 = {
        "storage": {"size": "1Gi"},
        "brokers": {"replicas": 2},
        "config": {"default.replication.factor": 2},
    }
    rc.ClusterReconciler(api, DrainedAdmin({0: 5, 1: 5, 2: 5})).reconcile(body(spec2))
    assert api.find("StatefulSet", "c-broker")["spec"]["replicas"] == 3
    assert cond(api, "Scaling")["reason"] == "ScaleInRefused"


def _pvc(name, size):
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "ns", "labels": manifests.labels("c")},
        "spec": {"resources": {"requests": {"storage": size}}},
    }


def test_storage_growth_patches_claims_and_shrink_is_reported():
    api = FakeApi()
    for i in range(3):
        api.put(_pvc(f"data-c-broker-{i}", "10Gi"))
    rc.ClusterReconciler(api).reconcile(body({"storage": {"size": "20Gi"}}))
    sizes = {
        api.find("PersistentVolumeClaim", f"data-c-broker-{i}")["spec"]["resources"]["requests"][
            "storage"
        ]
        for i in range(3)
    }
    assert sizes == {"20Gi"}
    rc.ClusterReconciler(api).reconcile(body({"storage": {"size": "5Gi"}}))
    c = cond(api, "StorageResizing")
    assert c["reason"] == "RejectShrink" and "can not shrink" in c["message"]


def _pod(i, hash_, ready=True):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"c-broker-{i}",
            "namespace": "ns",
            "labels": manifests.labels("c"),
            "annotations": {manifests.CONFIG_HASH_ANNOTATION: hash_},
        },
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_rolling_restart_deletes_one_stale_pod_per_reconcile():
    api = FakeApi()
    for i in range(3):
        api.put(_pod(i, "stale"))
    rc.ClusterReconciler(api).reconcile(body())
    deleted = [c for c in api.calls if c[0] == "delete"]
    assert deleted == [("delete", "Pod", "c-broker-1")], "non-controller brokers first"
    assert cond(api, "RollingRestart")["status"] == "True"


def test_cleanup_removes_the_rack_binding():
    api = FakeApi()
    b = body({"storage": {"size": "1Gi"}, "rack": {}})
    rc.ClusterReconciler(api).reconcile(b)
    assert api.find("ClusterRoleBinding", "strom-broker-rack-ns-c") is not None
    rc.cleanup(api, b)
    assert api.find("ClusterRoleBinding", "strom-broker-rack-ns-c") is None


def _topic_body(spec, name="orders"):
    return {
        "apiVersion": "strom.dev/v1alpha1",
        "kind": "StromTopic",
        "metadata": {"name": name, "namespace": "ns", "uid": "t-1", "generation": 3},
        "spec": spec,
    }


def test_topic_validation_status():
    from strom_operator.reconcilers import validation

    api = FakeApi()
    with pytest.raises(rc.ReconcileError) as err:
        validation.check(api, "StromTopic", _topic_body({"partitions": 0}), None)
    assert err.value.permanent
    ready = next(c for c in api.find("StromTopic", "orders")["status"]["conditions"])
    assert ready["reason"] == "InvalidSpec" and "spec.clusterRef" in ready["message"]
    assert ready["observedGeneration"] == 3

    with pytest.raises(rc.ReconcileError) as err:
        validation.check(
            api,
            "StromTopic",
            _topic_body({"clusterRef": {"name": "c"}, "partitions": 2}),
            {"clusterRef": {"name": "c"}, "partitions": 6},
        )
    assert err.value.reason == "InvalidChange" and "only grow" in str(err.value)

    with pytest.raises(rc.ReconcileError) as err:
        validation.check(api, "StromTopic", _topic_body({"clusterRef": {"name": "c"}}), None)
    assert err.value.reason == "ClusterNotFound" and not err.value.permanent

    api.put(
        {
            "apiVersion": "strom.dev/v1alpha1",
            "kind": "StromCluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"storage": {"size": "1Gi"}},
        }
    )
    checked = validation.check(api, "StromTopic", _topic_body({"clusterRef": {"name": "c"}}), None)
    assert checked.cluster_ref.name == "c" and checked.spec.partitions == 1
