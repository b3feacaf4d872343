"""Desired objects of a StromCluster: shape, labels, owners, probes, Kubernetes schema validity."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from strom import pod_init
from strom.broker import config as broker_config
from strom_operator.model import manifests, specs
from tests.helpers import EXAMPLES, K8S_VERSION, load_all

REF = manifests.ClusterRef("my-cluster", "kafka", "3f1c-uid", 2)
#: CRD kinds kubernetes-validate has no schema for (checked structurally below instead).
NOT_IN_K8S = {"ServiceMonitor"}


def _spec(**extra):
    return specs.parse_cluster({"storage": {"size": "10Gi"}, **extra})


FULL = _spec(
    rack={},
    metrics={"serviceMonitor": {"enabled": True}},
    networkPolicy={"enabled": True},
    resources={"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
    storage={"size": "10Gi", "storageClassName": "fast", "deleteClaim": True},
)
EXAMPLE = specs.parse_cluster(
    next(d for d in load_all(EXAMPLES / "cluster-3-brokers.yaml"))["spec"]
)


def by_kind(objs):
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


@pytest.mark.parametrize("spec", [_spec(), FULL, EXAMPLE], ids=["minimal", "full", "example"])
def test_every_object_validates_against_kubernetes(spec):
    for obj in manifests.desired_objects(REF, spec):
        if obj["kind"] in NOT_IN_K8S:
            continue
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_objects_and_order():
    kinds = [o["kind"] for o in manifests.desired_objects(REF, _spec())]
    assert kinds == [
        "ServiceAccount",
        "ConfigMap",
        "Service",
        "Service",
        "StatefulSet",
        "PodDisruptionBudget",
    ]
    full = [o["kind"] for o in manifests.desired_objects(REF, FULL)]
    assert {"ClusterRoleBinding", "ServiceMonitor", "NetworkPolicy"} <= set(full)


def test_labels_and_owner_references():
    for obj in manifests.desired_objects(REF, FULL):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "strom"
        assert labels["app.kubernetes.io/instance"] == "my-cluster"
        assert labels["app.kubernetes.io/managed-by"] == "strom-operator"
        if obj["kind"] == "ClusterRoleBinding":
            assert "ownerReferences" not in obj["metadata"]  # cleaned up by the delete handler
            continue
        (owner,) = obj["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "strom.dev/v1alpha1",
            "kind": "StromCluster",
            "name": "my-cluster",
            "uid": "3f1c-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert obj["metadata"]["namespace"] == "kafka"


def test_statefulset():
    sts = by_kind(manifests.desired_objects(REF, FULL))[("StatefulSet", "my-cluster-broker")]
    spec = sts["spec"]
    assert spec["replicas"] == 3 and spec["serviceName"] == "my-cluster-brokers"
    assert spec["updateStrategy"] == {"type": "OnDelete"}
    assert spec["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete"
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    pod = spec["template"]["spec"]
    (broker,) = pod["containers"]
    assert broker["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert broker["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    ports = {p["name"]: p["containerPort"] for p in broker["ports"]}
    assert ports == {"grpc": 9092, "metrics": 9404, "kafka": 19092}
    assert broker["resources"] == {
        "requests": {"cpu": "500m", "memory": "1Gi"},
        "limits": {"memory": "2Gi"},
    }
    assert broker["command"][:3] == ["strom", "broker", "start"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert broker["securityContext"]["allowPrivilegeEscalation"] is False
    anti = pod["affinity"]["podAntiAffinity"]
    # Preferred only: a required rule left 2 of the docs' 3 brokers Pending on a single node.
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
    keys = {
        t["podAffinityTerm"]["topologyKey"]: t["weight"]
        for t in anti["preferredDuringSchedulingIgnoredDuringExecution"]
    }
    assert keys == {"kubernetes.io/hostname": 100, "topology.kubernetes.io/zone": 50}
    init = pod["initContainers"][0]
    # the image's own init step reads the mounted shared config, writes what the broker starts from
    assert init["image"] == broker["image"]
    assert init["command"][:3] == ["python3", "-m", "strom.pod_init"]
    flags = dict(zip(init["command"][3::2], init["command"][4::2], strict=True))
    mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    assert flags["--template"] == f"{mounts['config']}/server.properties"
    assert flags["--output"] == broker["command"][broker["command"].index("--config") + 1]
    assert flags["--output"].startswith(mounts["run"] + "/")
    env = {e["name"]: e for e in init["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["STROM_RACK_TOPOLOGY_KEY"]["value"] == "topology.kubernetes.io/zone"
    annotations = spec["template"]["metadata"]["annotations"]
    assert manifests.CONFIG_HASH_ANNOTATION in annotations
    # Plain Prometheus (docs/prometheus/kubernetes-sd-scrape.yaml) scrapes what these name.
    metrics_port = next(p for p in pod["containers"][0]["ports"] if p["name"] == "metrics")
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(metrics_port["containerPort"])
    assert annotations["prometheus.io/path"] == "/metrics"


def test_pdb_and_services():
    objs = by_kind(manifests.desired_objects(REF, _spec()))
    pdb = objs[("PodDisruptionBudget", "my-cluster-broker")]
    assert pdb["spec"]["maxUnavailable"] == 1
    headless = objs[("Service", "my-cluster-brokers")]
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    bootstrap = objs[("Service", "my-cluster-bootstrap")]
    assert [p["port"] for p in bootstrap["spec"]["ports"]] == [9092, 19092]  # gRPC, Kafka
    assert manifests.bootstrap_address(REF, _spec()) == "my-cluster-bootstrap.kafka.svc:9092"


def _properties(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k] = v
    return out


def test_config_map_broker_config():
    cm = by_kind(manifests.desired_objects(REF, EXAMPLE))[("ConfigMap", "my-cluster-config")]
    props = _properties(cm["data"]["server.properties"])
    assert props["port"] == "9092" and props["metrics.port"] == "9404"
    assert props["listeners"] == "PLAINTEXT://0.0.0.0:19092"  # advertised: the pod's DNS name
    assert props["log.dirs"] == manifests.DATA_DIR
    assert props["default.replication.factor"] == "3" and props["min.insync.replicas"] == "2"
    assert props["num.partitions"] == "3" and props["log.retention.ms"] == "604800000"
    assert props["cluster.id"] == "3f1c-uid"
    assert "broker.id" not in props  # per pod, from the ordinal
    assert set(cm["data"]) == {"server.properties"}  # no code: the init step is the image's
    domain = f"my-cluster-brokers.{REF.namespace}.svc"
    voters = [f"{i}@my-cluster-broker-{i}.{domain}:9092"
              for i in range(EXAMPLE.controllers.replicas)]
    assert props["controller.quorum.voters"] == ",".join(voters)


def test_every_pod_gets_a_config_the_broker_accepts():
    """The init step's output for voters and observers alike loads in the broker."""
    cm = by_kind(manifests.desired_objects(REF, EXAMPLE))[("ConfigMap", "my-cluster-config")]
    template = cm["data"]["server.properties"]
    voters = EXAMPLE.controllers.replicas
    for ordinal in range(EXAMPLE.brokers.replicas + 2):  # also pods added by a scale-out
        text = pod_init.render(template, pod_name=f"my-cluster-broker-{ordinal}",
                                  headless_domain="my-cluster-brokers.ns.svc", rack="zone-a")
        loaded = broker_config.BrokerConfig.from_mapping(_properties(text))
        assert loaded.broker_id == ordinal
        assert loaded.is_controller == (ordinal < voters)
        assert sorted(loaded.quorum_voters) == list(range(voters))


def test_defaults_follow_cluster_size():
    one = manifests.default_broker_config(_spec(brokers={"replicas": 1}))
    assert one["default.replication.factor"] == "1" and one["min.insync.replicas"] == "1"


def test_broker_accepts_every_key_we_write():
    """Cross-check with the broker's own config table."""
    written = set(manifests.broker_config(REF, FULL)) | {
        "broker.id",
        "advertised.host",
        "broker.rack",
    }
    written |= specs.USER_BROKER_KEYS
    assert written <= set(broker_config.KEYS), written - set(broker_config.KEYS)


def test_config_hash_changes_with_what_needs_a_restart():
    base = manifests.config_hash(REF, _spec())
    assert base == manifests.config_hash(REF, _spec())
    assert base != manifests.config_hash(REF, _spec(image="strom:2"))
    assert base != manifests.config_hash(REF, _spec(config={"num.partitions": 6}))
    assert base == manifests.config_hash(REF, _spec(brokers={"replicas": 5})), (
        "scaling is not a restart"
    )


def test_service_monitor_and_network_policy():
    objs = by_kind(manifests.desired_objects(REF, FULL))
    sm = objs[("ServiceMonitor", "my-cluster-broker")]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    np = objs[("NetworkPolicy", "my-cluster-broker")]
    assert np["spec"]["policyTypes"] == ["Ingress"]
    assert len(np["spec"]["ingress"]) == 3  # peers, clients, metrics: no operator rule


def test_network_policy_lets_the_operator_reach_only_the_grpc_port():
    """Under an enforcing plugin the operator's Admin API calls need a rule of their own (its
    namespace need not be a client namespace); the Kafka port stays closed to it, which is what
    the enforcement probe relies on."""
    who = manifests.OperatorIdentity(
        "strom-system", (("app.kubernetes.io/name", "strom-operator"),))
    objs = by_kind(manifests.desired_objects(REF, FULL, who))
    rule = objs[("NetworkPolicy", "my-cluster-broker")]["spec"]["ingress"][-1]
    assert rule == {
        "from": [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "strom-system"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "strom-operator"}},
        }],
        "ports": [{"port": 9092, "protocol": "TCP"}],
    }


def test_pod_init_renders_per_pod_config():
    out = pod_init.render(
        "port=9092\n",
        pod_name="my-cluster-broker-2",
        headless_domain="my-cluster-brokers.kafka.svc",
        rack="eu-1a",
    )
    props = _properties(out)
    assert props == {
        "port": "9092",
        "broker.id": "2",
        "broker.rack": "eu-1a",
        "advertised.host": "my-cluster-broker-2.my-cluster-brokers.kafka.svc",
    }
    assert "broker.rack" not in _properties(
        pod_init.render("", pod_name="c-broker-0", headless_domain="d", rack="")
    )
    with pytest.raises(ValueError, match="ordinal"):
        pod_init.broker_id_of("no-ordinal-here")


def test_manifests_are_yaml_serialisable():
    yaml.safe_dump_all(manifests.desired_objects(REF, FULL))
