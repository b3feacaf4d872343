"""The operator process (kopf + handlers + the kubernetes client) against the kmock API emulator.

kmock 0.8 notes (measured here): kopf runs cluster-wide in its own thread and event loop (on the
test's loop it would cancel kmock's teardown); objects get a uid from us; objects are created only
after kopf's watch is up; the emulator validates nothing and supports no server-side apply (our
client falls back to create), so schema checks live in the CRD tests.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
from typing import Any

import kmock
import pytest


class JsonPatchingEmulator(kmock.KubernetesEmulator):
    """kmock 0.8 only merge-patches dicts; kopf 1.45 adds/removes finalizers with a JSON Patch (a
    list of ops), which 0.8 answers with HTTP 500.  Translate JSON Patches of ``/metadata/...`` and
    ``/status/...`` paths into the equivalent merge patch before the emulator sees them."""

    async def _handle(self, request):  # type: ignore[no-untyped-def]
        if isinstance(request.data, list) and request.resource is not None and request.name:
            current = None
            for (res, ns, name), obj in list(self.objects.items()):
                if (
                    res == request.resource
                    and ns == request.namespace
                    and name == request.name
                    and not obj.deleted
                ):
                    current = copy.deepcopy(dict(obj.raw))
            if current is not None:
                # Request is a frozen attrs class; evolve() would drop its parsed fields.
                object.__setattr__(request, "data", _json_patch_as_merge(current, request.data))
        return await super()._handle(request)


def _json_patch_as_merge(current: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    merge: dict[str, Any] = {}
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].strip("/").split("/")]
        if op["op"] == "test":
            continue
        top = parts[0]
        target = copy.deepcopy(current.get(top, {}))
        node = target
        for key in parts[1:-1]:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        last = parts[-1]
        if op["op"] in ("add", "replace"):
            if len(parts) == 1:
                target = op["value"]
            elif isinstance(node, list):
                node.insert(len(node) if last == "-" else int(last), op["value"])
            else:
                node[last] = op["value"]
        elif op["op"] == "remove":
            if isinstance(node, list):
                node.pop(int(last))
            else:
                node.pop(last, None)
        current[top] = target
        merge[top] = target
    return merge


pytestmark = [pytest.mark.slow, pytest.mark.kmock(cls=JsonPatchingEmulator)]

CORE = ["configmaps", "services", "serviceaccounts", "pods", "persistentvolumeclaims", "events"]
VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}


def _declare(emulator: Any) -> None:
    for kind, plural in [
        ("StromCluster", "stromclusters"),
        ("StromTopic", "stromtopics"),
        ("StromConsumerGroup", "stromconsumergroups"),
    ]:
        emulator.resources[f"strom.dev/v1alpha1/{plural}"] = kmock.ResourceInfo(
            kind=kind,
            namespaced=True,
            verbs=VERBS,
            subresources={"status"},
        )
    for plural in CORE:
        emulator.resources[f"v1/{plural}"] = kmock.ResourceInfo(namespaced=True, verbs=VERBS)
    for gvp in [
        "apps/v1/statefulsets",
        "policy/v1/poddisruptionbudgets",
        "networking.k8s.io/v1/networkpolicies",
    ]:
        emulator.resources[gvp] = kmock.ResourceInfo(namespaced=True, verbs=VERBS)
    emulator.resources["rbac.authorization.k8s.io/v1/clusterrolebindings"] = kmock.ResourceInfo(
        namespaced=False, verbs=VERBS
    )
    # kopf's backbone: it waits for namespaces to be served (even cluster-wide, when it does not
    # list them) and watches CRDs to notice new resources and waits for this one to exist.
    emulator.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = kmock.ResourceInfo(
        kind="CustomResourceDefinition", namespaced=False, verbs=VERBS
    )
    emulator.resources["v1/namespaces"] = kmock.ResourceInfo(
        kind="Namespace", namespaced=False, verbs=VERBS
    )


@pytest.fixture()
async def operator(kmock, tmp_path, monkeypatch):
    import kopf
    import kubernetes

    import strom_operator.handlers.cluster
    import strom_operator.handlers.resources
    import strom_operator.handlers.settings

    _declare(kmock)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "kmock",
                "clusters": [{"name": "kmock", "cluster": {"server": str(kmock.url).rstrip("/")}}],
                "users": [{"name": "kmock", "user": {"token": "test"}}],
                "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock"}}],
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setattr(
        kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig)
    )
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("STROM_OPERATOR_METRICS_PORT", "0")
    # No brokers behind the emulator: the Admin API fails fast (tests with brokers override it).
    monkeypatch.setenv("STROM_OPERATOR_BOOTSTRAP_OVERRIDE", "127.0.0.1:1")
    monkeypatch.setenv("STROM_OPERATOR_ADMIN_TIMEOUT_MS", "1000")
    strom_operator.handlers.cluster.default_admin.cache_clear()

    stop, ready = threading.Event(), threading.Event()

    def run() -> None:
        asyncio.run(
            kopf.operator(standalone=True, clusterwide=True, stop_flag=stop, ready_flag=ready)
        )

    thread = threading.Thread(target=run, name="kopf", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not ready.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert ready.is_set(), "kopf did not start"
    try:
        await _until(
            lambda: any("stromclusters" in str(r.url) and "watch" in str(r.url) for r in kmock),
            "kopf's watch on stromclusters",
        )
    except AssertionError:
        print("REQUESTS:", [(r.method, str(r.url)) for r in kmock][:40])
        raise
    yield kmock
    stop.set()
    for _ in range(100):
        if not thread.is_alive():
            break
        await asyncio.sleep(0.1)


async def _until(predicate, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (KeyError, LookupError):
            pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _cluster(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "strom.dev/v1alpha1",
        "kind": "StromCluster",
        "metadata": {"name": name, "namespace": "kafka", "uid": f"uid-{name}", "generation": 1},
        "spec": spec,
    }


def _object(emulator, path: str, name: str) -> dict[str, Any] | None:
    for (resource, namespace, obj_name), obj in list(emulator.objects.items()):
        if (
            obj_name == name
            and namespace == "kafka"
            and str(path) in repr(resource)
            and not obj.deleted
        ):
            return dict(obj.raw)
    return None


def _conditions(emulator, name: str) -> dict[str, dict[str, Any]]:
    obj = _object(emulator, "stromclusters", name) or {}
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


async def test_cluster_creates_its_objects(operator):
    emulator = operator
    async with emulator.post(
        "/apis/strom.dev/v1alpha1/namespaces/kafka/stromclusters",
        json=_cluster("demo", {"storage": {"size": "10Gi"}}),
    ) as resp:
        assert resp.status < 300, await resp.text()
    expected = [
        ("configmaps", "demo-config"),
        ("services", "demo-brokers"),
        ("services", "demo-bootstrap"),
        ("statefulsets", "demo-broker"),
        ("poddisruptionbudgets", "demo-broker"),
        ("serviceaccounts", "demo-broker"),
    ]
    for plural, name in expected:
        await _until(
            lambda p=plural, n=name: _object(emulator, p, n) is not None, f"{plural}/{name}"
        )
    sts = _object(emulator, "statefulsets", "demo-broker")
    assert sts["spec"]["replicas"] == 3
    assert sts["metadata"]["ownerReferences"][0]["uid"] == "uid-demo"
    await _until(lambda: "Ready" in _conditions(emulator, "demo"), "status conditions")
    obj = _object(emulator, "stromclusters", "demo")
    assert obj["status"]["selector"].startswith("app.kubernetes.io/component=broker")
    assert obj["status"]["bootstrapServers"] == "demo-bootstrap.kafka.svc:9092"
    assert obj["status"]["kafkaBootstrapServers"] == "demo-bootstrap.kafka.svc:19092"
    assert _conditions(emulator, "demo")["Ready"]["status"] == "False"  # no pods in an emulator


async def test_bad_spec_gets_a_status_error(operator):
    emulator = operator
    bad = _cluster("broken", {"storage": {"size": "lots"}, "brokers": {"replicas": 0}})
    async with emulator.post(
        "/apis/strom.dev/v1alpha1/namespaces/kafka/stromclusters", json=bad
    ) as resp:
        assert resp.status < 300
    await _until(
        lambda: _conditions(emulator, "broken")["Ready"]["reason"] == "InvalidSpec",
        "InvalidSpec condition",
    )
    message = _conditions(emulator, "broken")["Ready"]["message"]
    assert "spec.storage.size" in message and "spec.brokers.replicas" in message
    assert _object(emulator, "statefulsets", "broken-broker") is None
    await _until(
        lambda: any(
            (o.raw.get("reason") == "InvalidSpec")
            for (r, _, _), o in list(emulator.objects.items())
            if "events" in repr(r)
        ),
        "a warning event",
    )


async def test_bad_topic_gets_a_status_error(operator):
    emulator = operator
    topic = {
        "apiVersion": "strom.dev/v1alpha1",
        "kind": "StromTopic",
        "metadata": {"name": "orders", "namespace": "kafka", "uid": "uid-orders", "generation": 1},
        "spec": {"clusterRef": {"name": "demo"}, "partitions": 0, "config": {"retention.msec": 5}},
    }
    async with emulator.post(
        "/apis/strom.dev/v1alpha1/namespaces/kafka/stromtopics", json=topic
    ) as resp:
        assert resp.status < 300

    def ready():
        obj = _object(emulator, "stromtopics", "orders") or {}
        conds = (obj.get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "Ready"), None)

    await _until(lambda: ready() is not None, "the topic's Ready condition")
    assert ready()["reason"] == "InvalidSpec"
    assert "spec.partitions" in ready()["message"] and "retention.msec" in ready()["message"]


@pytest.mark.integration
async def test_topic_reaches_real_brokers_through_the_operator(operator, tmp_path, monkeypatch):
    """kopf + handlers + AdminClusterAdmin + a real broker: a StromTopic becomes a topic, its
    status says so, and deleting it (deletionPolicy Delete) deletes the topic."""
    import strom_operator.handlers.cluster
    from strom.testing import running_cluster

    emulator = operator
    with running_cluster(tmp_path / "brokers", brokers=1) as cluster, cluster.admin() as admin:
        monkeypatch.setenv("STROM_OPERATOR_BOOTSTRAP_OVERRIDE", cluster.bootstrap)
        strom_operator.handlers.cluster.default_admin.cache_clear()
        async with emulator.post(
            "/apis/strom.dev/v1alpha1/namespaces/kafka/stromclusters",
            json=_cluster("live", {"storage": {"size": "1Gi"}, "brokers": {"replicas": 1}}),
        ) as resp:
            assert resp.status < 300
        topic = {
            "apiVersion": "strom.dev/v1alpha1",
            "kind": "StromTopic",
            "metadata": {"name": "payments", "namespace": "kafka", "uid": "uid-p", "generation": 1},
            "spec": {
                "clusterRef": {"name": "live"},
                "partitions": 3,
                "replicationFactor": 1,
                "deletionPolicy": "Delete",
                "config": {"retention.ms": 7200000},
            },
        }
        async with emulator.post(
            "/apis/strom.dev/v1alpha1/namespaces/kafka/stromtopics", json=topic
        ) as resp:
            assert resp.status < 300

        def status():
            return (_object(emulator, "stromtopics", "payments") or {}).get("status") or {}

        await _until(lambda: status().get("partitions") == 3, "the topic's status", timeout=60)
        (desc,) = await asyncio.to_thread(admin.describe_topics, ["payments"])
        assert len(desc.partitions) == 3 and desc.configs.get("retention.ms") == "7200000"
        ready = next(c for c in status()["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True" and ready["observedGeneration"] == 1

        async with emulator.delete(
            "/apis/strom.dev/v1alpha1/namespaces/kafka/stromtopics/payments"
        ) as resp:
            assert resp.status < 300

        async def gone() -> bool:
            return "payments" not in await asyncio.to_thread(admin.list_topics)

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not await gone():
            await asyncio.sleep(0.5)
        assert await gone(), "deletionPolicy Delete: the topic is deleted with the resource"
