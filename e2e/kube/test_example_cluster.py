"""Issue 19 item 1: the docs' 3-broker StromCluster, its topics and its consumer group, applied
unchanged to the real single-node cluster.

``crds/examples/*.yaml`` go in exactly as written (the image name is tagged onto the broker
image built here; the example's requests, 3 x 500m CPU and 1Gi, fit this 2-core node, so nothing
is lowered).  Checked against the live system, not against the operator's own view:

- a StatefulSet of 3, three PVCs bound by the provisioner (StorageClass ``standard``), 3 pods
  Ready; every broker reports the same controller quorum of voters 0, 1, 2 whose addresses are
  the headless Service's DNS names;
- ``orders`` (12 partitions, RF 3) and ``customer.profiles.v1`` (6, RF 3) as the brokers
  describe them, equal to each StromTopic's status;
- the ``order-processor`` group's status (members, per-partition committed offset and lag)
  equal to what the group coordinator reports after a real consumer committed part of ``orders``;
- what this cluster lacks that the example names (no ServiceMonitor CRD, no zone label on the
  node, no network plugin enforcing the NetworkPolicy) is reported in one condition each while
  the cluster stays Ready and the topics and group are reconciled.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from strom.testing.kube.platform import EXAMPLES, condition, wait_for
from strom.testing.kube.platform import Platform as Kube

pytestmark = [pytest.mark.kube, pytest.mark.integration, pytest.mark.timeout(1500)]

STROM = str(Path(sys.executable).with_name("strom"))
BOOTSTRAP = "my-cluster-bootstrap.default.svc:9092"
HEADLESS = "my-cluster-brokers.default.svc"


def _strom_json(kube: Kube, *args: str) -> Any:
    return kube.strom_json(BOOTSTRAP, *args)


def _ready(kube: Kube, kind: str, name: str) -> dict[str, Any] | None:
    return kube.ready(kind, name)


def test_three_brokers_on_bound_volumes_in_one_quorum(example_cluster: Kube) -> None:
    kube = example_cluster
    sts = kube.get("statefulset", "my-cluster-broker")
    assert sts["spec"]["replicas"] == 3 and sts["status"]["readyReplicas"] == 3
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "ghcr.io/strom/strom-broker:0.1.0"
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
    claims = kube.get("pvc", "-l", "app.kubernetes.io/instance=my-cluster")["items"]
    assert sorted(c["metadata"]["name"] for c in claims) == [
        f"data-my-cluster-broker-{i}" for i in range(3)]
    for claim in claims:
        assert claim["status"]["phase"] == "Bound", claim["metadata"]["name"]
        assert claim["spec"]["storageClassName"] == "standard"
        assert claim["status"]["capacity"]["storage"] == "10Gi"
        volume = kube.get("pv", claim["spec"]["volumeName"])
        assert volume["spec"]["claimRef"]["name"] == claim["metadata"]["name"]
    pods = kube.get("pods", "-l", "app.kubernetes.io/instance=my-cluster")["items"]
    assert len(pods) == 3
    for pod in pods:
        assert condition(pod, "Ready").get("status") == "True", pod["metadata"]["name"]
    config = kube.get("configmap", "my-cluster-config")["data"]["server.properties"]
    voters = ",".join(f"{i}@my-cluster-broker-{i}.{HEADLESS}:9092" for i in range(3))
    assert f"controller.quorum.voters={voters}" in config.splitlines()
    # Each broker, asked on its own pod, reports the same quorum and the same active controller.
    seen = []
    for i in range(3):
        out = kube.kubectl("exec", f"my-cluster-broker-{i}", "-c", "broker", "--", "strom",
                           "cluster", "describe", "-o", "json",
                           "--bootstrap-server", "127.0.0.1:9092", timeout=120)
        desc = json.loads(out)
        assert desc["answered_by"] == i
        assert desc["voters"] == [0, 1, 2]
        assert {b["id"]: b["host"] for b in desc["brokers"]} == {
            b: f"my-cluster-broker-{b}.{HEADLESS}" for b in range(3)}
        assert all(b["state"] == "alive" for b in desc["brokers"])
        seen.append((desc["cluster_id"], desc["controller_id"]))
    assert len(set(seen)) == 1 and seen[0][1] in (0, 1, 2), seen
    assert seen[0][0] == kube.get("stromcluster", "my-cluster")["metadata"]["uid"]


def test_what_the_cluster_lacks_is_reported_and_the_operator_carries_on(
        example_cluster: Kube) -> None:
    kube = example_cluster
    crds = [c["metadata"]["name"] for c in kube.get("crd")["items"]]
    assert "servicemonitors.monitoring.coreos.com" not in crds
    node = kube.get("nodes")["items"][0]
    assert "topology.kubernetes.io/zone" not in node["metadata"]["labels"]

    def reported() -> dict[str, dict[str, Any]] | None:
        obj = kube.get("stromcluster", "my-cluster")
        got = {t: condition(obj, t) for t in (
            "Ready", "ServiceMonitorAvailable", "RackAware", "NetworkPolicyEnforced")}
        return got if all(got.values()) and got["NetworkPolicyEnforced"].get(
            "reason") != "NotProbed" else None

    got = wait_for("the environment conditions", reported, 120, every=3)
    assert got["Ready"]["status"] == "True"
    assert (got["ServiceMonitorAvailable"]["status"],
            got["ServiceMonitorAvailable"]["reason"]) == ("False", "CRDNotInstalled")
    assert (got["RackAware"]["status"], got["RackAware"]["reason"]) == (
        "False", "NodeLabelMissing")
    assert "[0, 1, 2]" in got["RackAware"]["message"]
    # The operator's namespace is no client namespace, yet it reached a broker's Kafka port.
    assert (got["NetworkPolicyEnforced"]["status"],
            got["NetworkPolicyEnforced"]["reason"]) == ("False", "NotEnforced"), got
    policy = kube.get("networkpolicy", "my-cluster-broker")
    assert policy["spec"]["ingress"][-1]["from"][0]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "strom-system"}}
    reasons = {e["reason"] for e in kube.get("events", "--field-selector",
                                             "involvedObject.name=my-cluster")["items"]}
    assert {"CRDNotInstalled", "NodeLabelMissing", "NotEnforced"} <= reasons


def test_topics_and_group_are_reconciled_true_to_the_live_cluster(
        example_cluster: Kube) -> None:
    kube = example_cluster
    kube.kubectl("apply", "-f", str(EXAMPLES / "topics.yaml"))
    kube.kubectl("apply", "-f", str(EXAMPLES / "consumer-group-autoscale.yaml"))
    for name, topic, partitions in (("orders", "orders", 12),
                                    ("customer-profiles", "customer.profiles.v1", 6)):
        obj = wait_for(f"StromTopic {name} Ready", lambda n=name: _ready(kube, "stromtopic", n),
                       120, every=2)
        status = obj["status"]
        (live,) = _strom_json(kube, "topic", "describe", topic)
        assert status["topicName"] == topic == live["name"]
        assert status["partitions"] == partitions == len(live["partitions"])
        assert status["replicationFactor"] == 3
        for p in live["partitions"]:
            assert len(p["replicas"]) == 3 and sorted(p["isr"]) == sorted(p["replicas"]), p
        for key, value in status["config"].items():
            assert live["configs"][key] == value, key
    group = wait_for("StromConsumerGroup order-processor Ready",
                     lambda: _ready(kube, "stromconsumergroup", "order-processor"), 120, every=2)
    assert condition(group, "OffsetsReset")["status"] == "True"
    assert condition(group, "Autoscaling")["reason"] == "TargetNotFound"  # no Deployment here
    # 1,200 records in; a real consumer in the group reads 500 and commits; the status must
    # then say what the coordinator says.
    lines = "".join(f"k{i % 97}\tv{i}\n" for i in range(1200))
    kube.host([STROM, "produce", "orders", "--acks", "all", "--key-separator", "\t",
               "--bootstrap-server", BOOTSTRAP], stdin=lines)
    kube.host([STROM, "consume", "orders", "--group", "order-processor", "--from-beginning",
               "--max-messages",
               "500", "--timeout-ms", "30000", "--bootstrap-server", BOOTSTRAP])

    def agrees() -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        live = _strom_json(kube, "group", "describe", "order-processor")
        status = kube.get("stromconsumergroup", "order-processor")["status"]
        mine = {(r["topic"], r["partition"]): (r["committedOffset"], r["endOffset"], r["lag"])
                for r in status.get("partitionLag", [])}
        theirs = {(r["topic"], r["partition"]):
                  (r["current_offset"] or 0, r["log_end_offset"], r["lag"]) for r in live}
        return (status, live) if mine == theirs and status["members"] == 0 else None

    status, live = wait_for("the group's status equal to the coordinator's view", agrees, 120,
                            every=3)
    assert status["totalLag"] == sum(r["lag"] for r in live)
    assert sum(r["log_end_offset"] for r in live) == 1200
    assert 0 < status["totalLag"] <= 700, status["totalLag"]  # 500 or more were committed
