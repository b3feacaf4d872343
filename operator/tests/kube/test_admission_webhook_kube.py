"""The operator's admission webhook on the real API server (``kube`` marker, ``pytest -m kube``).

``helm install`` of the chart (webhook on, the default) in the session's cluster
(:mod:`strom.testing.kube.fixture`); then what a user sees in ``kubectl apply``: objects the CRD
schema cannot judge alone are refused with the field and the fix (a topic or group naming a
missing cluster, a replicationFactor above the cluster's brokers, a cluster scaled below its
topics' replicationFactor), a server-side dry run only warns about a missing cluster, and a
restarted operator serves the same certificate (the registered caBundle stays valid).

The clusters here name an image that is not on the node (``imagePullPolicy: Never``): their
broker pods never start, which costs nothing and does not matter to admission.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator

import pytest

from strom.testing.kube.chart import operator_release
from strom.testing.kube.fixture import KubeCluster

pytestmark = [pytest.mark.kube, pytest.mark.integration, pytest.mark.timeout(900)]

RELEASE, RELEASE_NS, NS = "strom", "strom-system", "webhook-test"
DENIED = 'admission webhook "{}.validate.strom.dev" denied the request'


def _cluster(name: str, replicas: int) -> str:
    return f"""apiVersion: strom.dev/v1alpha1
kind: StromCluster
metadata: {{name: {name}, namespace: {NS}}}
spec:
  image: strom.local/not-on-the-node:none
  imagePullPolicy: Never
  brokers: {{replicas: {replicas}}}
  storage: {{size: 64Mi}}
  resources: {{requests: {{cpu: 10m, memory: 32Mi}}}}
"""


def _topic(name: str, cluster: str, rf: int, extra: str = "") -> str:
    return f"""apiVersion: strom.dev/v1alpha1
kind: StromTopic
metadata: {{name: {name}, namespace: {NS}}}
spec:
  clusterRef: {{name: {cluster}}}
  partitions: 2
  replicationFactor: {rf}
{extra}"""


def _apply(kube: KubeCluster, manifest: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return kube.run("kubectl", "apply", *flags, "-f", "-", stdin=manifest, timeout=60)


def _refused(kube: KubeCluster, manifest: str, plural: str) -> str:
    done = _apply(kube, manifest)
    assert done.returncode != 0, f"accepted: {done.stdout}"
    assert DENIED.format(plural) in done.stderr, done.stderr
    return done.stderr


def _accepted(kube: KubeCluster, manifest: str) -> None:
    done = _apply(kube, manifest)
    assert done.returncode == 0, done.stderr


def _ca_bundles(kube: KubeCluster) -> set[str]:
    config = kube.kubectl_json("get", "validatingwebhookconfiguration", RELEASE)
    return {h["clientConfig"].get("caBundle", "") for h in config["webhooks"]}


@pytest.fixture(scope="module")
def operator(kube_cluster: KubeCluster) -> Iterator[KubeCluster]:
    with operator_release(kube_cluster, RELEASE, RELEASE_NS):
        print(f"helm install --wait (operator Ready, webhook serving): "
              f"{kube_cluster.timings[f'helm install {RELEASE}']} s")
        kube_cluster.kubectl("create", "namespace", NS)
        try:
            yield kube_cluster
        finally:
            kube_cluster.run("kubectl", "delete", "namespace", NS, "--timeout=180s",
                             timeout=200)


def test_the_operator_made_its_certificate_and_registered_its_ca(operator: KubeCluster) -> None:
    secret = operator.kubectl_json("-n", RELEASE_NS, "get", "secret", f"{RELEASE}-webhook-tls")
    ca = base64.b64decode(secret["data"]["ca.crt"])
    assert b"BEGIN CERTIFICATE" in ca and secret["data"]["tls.key"]
    assert _ca_bundles(operator) == {secret["data"]["ca.crt"]}


def test_a_topic_or_group_naming_a_missing_cluster_is_refused(operator: KubeCluster) -> None:
    err = _refused(operator, _topic("orders", "nope", 1), "stromtopics")
    assert ("spec.clusterRef.name: StromCluster nope does not exist in namespace webhook-test; "
            "create the StromCluster first, or name an existing one") in err
    group = (f"apiVersion: strom.dev/v1alpha1\nkind: StromConsumerGroup\n"
             f"metadata: {{name: g, namespace: {NS}}}\n"
             "spec: {clusterRef: {name: nope}, topics: [orders]}\n")
    err = _refused(operator, group, "stromconsumergroups")
    assert "spec.clusterRef.name: StromCluster nope does not exist" in err
    # A server-side dry run cannot see a cluster created earlier in the same dry run: it warns.
    dry = _apply(operator, _topic("orders", "nope", 1), "--dry-run=server")
    assert dry.returncode == 0, dry.stderr
    assert "Warning: spec.clusterRef.name: StromCluster nope does not exist" in dry.stderr


def test_replication_factor_is_checked_against_the_clusters_brokers(operator: KubeCluster) -> None:
    _accepted(operator, _cluster("one", 1))
    err = _refused(operator, _topic("orders", "one", 3), "stromtopics")
    assert ("spec.replicationFactor: 3 is more than the 1 broker(s) of StromCluster one "
            "(spec.brokers.replicas); use at most 1, or scale the cluster first") in err
    _accepted(operator, _topic("orders", "one", 1))
    # Unknown topic config keys: the CRD's CEL rule refuses them first (the webhook's own check,
    # with the closest key, stands behind it: operator/tests/model/test_admission.py).
    bad_key = _apply(operator, _topic("logs", "one", 1, "  config: {retention.msx: 1000}\n"))
    assert bad_key.returncode != 0 and "spec.config" in bad_key.stderr, bad_key.stderr
    # The CRD's own transition rule (CEL): partitions may only grow.
    shrink = _apply(operator, _topic("orders", "one", 1).replace("partitions: 2",
                                                                 "partitions: 1"))
    assert shrink.returncode != 0 and "partitions" in shrink.stderr


def test_a_cluster_cannot_drop_below_its_topics_replication_factor(operator: KubeCluster) -> None:
    _accepted(operator, _cluster("three", 3))
    _accepted(operator, _topic("events", "three", 3))
    err = _refused(operator, _cluster("three", 2), "stromclusters")
    assert ("spec.brokers.replicas: 2 is fewer than the replicationFactor of StromTopic events "
            "(RF 3); keep at least 3 brokers, or lower those topics' replicationFactor first"
            ) in err
    # Metadata-only updates pass whatever the spec (kopf's finalizers, labels, deletion).
    operator.kubectl("-n", NS, "label", "stromtopic", "events", "team=a")


def test_a_restarted_operator_serves_the_same_certificate(operator: KubeCluster) -> None:
    before = _ca_bundles(operator)
    pods = operator.kubectl_json("-n", RELEASE_NS, "get", "pods")["items"]
    operator.kubectl("-n", RELEASE_NS, "delete", "pod", *[p["metadata"]["name"] for p in pods],
                     "--wait=true", "--timeout=120s")
    operator.kubectl("-n", RELEASE_NS, "rollout", "status", f"deployment/{RELEASE}",
                     "--timeout=180s", timeout=200)
    operator.kubectl("-n", RELEASE_NS, "wait", "--for=condition=Ready", "pod", "--all",
                     "--timeout=120s")
    assert _ca_bundles(operator) == before
    err = _refused(operator, _topic("more", "nope", 1), "stromtopics")
    assert "StromCluster nope does not exist" in err
