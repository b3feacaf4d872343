"""The real single-node cluster (``kube`` marker: deselected by default, ``pytest -m kube``).

Uses the session's cluster (``kube_cluster``, :mod:`strom.testing.kube.fixture`: built, started
and its images loaded once per pytest session under the machine-wide lock; taken down at the end,
and the fixture's teardown fails if ``down`` leaves any namespace, route, cgroup, mount, file,
changed kernel setting or process behind). Proves nothing can leave the node and that unused
cluster addresses fail on this machine, checks the API server's version and RBAC, DNS, a volume
from StorageClass ``standard`` used by a pod, and the chart with the real helm. Needs root, Go and
the Debian packages: without them it skips on a developer machine and fails under ``CI=true``.
"""

from __future__ import annotations

import errno
import json
import socket
import subprocess
import time
from pathlib import Path

import pytest

from strom.testing.kube import cluster, network
from strom.testing.kube import layout as L
from strom.testing.kube.fixture import IMAGES, KubeCluster

pytestmark = [pytest.mark.kube, pytest.mark.integration, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[4]


def test_nothing_leaves_the_node(kube_cluster: KubeCluster) -> None:
    # The node's table has no default route: an outside address has no route at all, so the
    # kernel refuses before any packet exists (checked on the table, then on a socket).
    kube_cluster.require_local_node()
    outside = "203.0.113.7"  # TEST-NET-3, and not reachable from the node by construction
    assert network.netcheck.node_escapes(network.node_routes()) == []
    got = subprocess.run(network.in_node(["ip", "route", "get", outside]),
                         capture_output=True, text=True, check=False)
    assert got.returncode != 0 and "unreachable" in got.stderr.lower()
    probe = ("import socket,sys\n"
             "s=socket.socket(); s.settimeout(3)\n"
             f"sys.exit(s.connect_ex(('{outside}', 80)))\n")
    rc = subprocess.run(network.in_node(["python3", "-c", probe]), timeout=30,
                        check=False).returncode
    assert rc == errno.ENETUNREACH


def test_unused_cluster_addresses_fail_on_this_machine(kube_cluster: KubeCluster) -> None:
    # An unallocated Service address routes only into the node, which has no route for it and
    # answers "unreachable" itself; the rest of the guard block is unreachable on the host.
    kube_cluster.require_local_node()
    unused_service = "100.73.250.250"
    route = json.loads(network.run(["ip", "-j", "route", "get", unused_service]))
    assert route[0]["dev"] == L.VETH_HOST
    for address in (unused_service, "100.75.1.1"):
        sock = socket.socket()
        sock.settimeout(5)
        start = time.monotonic()
        try:
            code = sock.connect_ex((address, 80))
        finally:
            sock.close()
        assert code in (errno.ENETUNREACH, errno.EHOSTUNREACH), (address, code)
        assert time.monotonic() - start < 4


def test_api_server_reports_its_version_and_enforces_rbac(kube_cluster: KubeCluster) -> None:
    version = json.loads(kube_cluster.kubectl("get", "--raw", "/version"))
    assert version["gitVersion"] == L.KUBERNETES_VERSION
    assert version["major"] == "1" and version["minor"] == "34"
    can = kube_cluster.run("kubectl", "auth", "can-i", "create", "pods",
                           "--as=system:serviceaccount:default:default")
    assert can.stdout.strip() == "no"
    assert "apiregistration.k8s.io" in kube_cluster.kubectl("api-versions")


def test_cluster_dns_answers_from_a_service_address(kube_cluster: KubeCluster) -> None:
    kube_cluster.require_local_node()  # asks the DNS Service address from this host
    assert cluster.dns_answers()


PVC_POD = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: kubetest}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data, namespace: kubetest}}
spec:
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 64Mi}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: holder, namespace: kubetest}}
spec:
  containers:
  - name: pause
    image: {L.PAUSE_IMAGE}
    imagePullPolicy: Never
    volumeMounts: [{{name: data, mountPath: /data}}]
  volumes:
  - name: data
    persistentVolumeClaim: {{claimName: data}}
"""


def test_a_claim_of_the_default_class_gets_a_volume_a_pod_mounts(
        kube_cluster: KubeCluster) -> None:
    kube_cluster.kubectl("apply", "-f", "-", stdin=PVC_POD)
    kube_cluster.kubectl("-n", "kubetest", "wait", "--for=condition=Ready", "pod/holder",
             "--timeout=120s")
    pvc = json.loads(kube_cluster.kubectl("-n", "kubetest", "get", "pvc", "data", "-o", "json"))
    assert pvc["status"]["phase"] == "Bound"
    assert pvc["spec"]["storageClassName"] == L.STORAGE_CLASS
    volume = kube_cluster.require_local_node().volumes / pvc["spec"]["volumeName"]
    assert volume.is_dir()
    kube_cluster.kubectl("delete", "namespace", "kubetest", "--timeout=120s")
    deadline = time.monotonic() + 60
    while volume.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not volume.exists()


OPERATOR_IMAGE = IMAGES["operator"]
RELEASE, RELEASE_NS = "strom", "strom-system"


def _operator_pod(kube_cluster: KubeCluster) -> dict[str, object]:
    pods = kube_cluster.kubectl_json("-n", RELEASE_NS, "get", "pods")["items"]
    running = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert len(running) == 1, [p["metadata"]["name"] for p in pods]
    return dict(running[0])


def _dry_run(kube_cluster: KubeCluster, manifest: str) -> subprocess.CompletedProcess[str]:
    return kube_cluster.run("kubectl", "-n", "default", "apply", "--dry-run=server", "-f", "-",
                            stdin=manifest, timeout=60)


def _topic(config: str, replication_factor: int = 3) -> str:
    return ("apiVersion: strom.dev/v1alpha1\nkind: StromTopic\nmetadata: {name: t}\n"
            f"spec:\n  clusterRef: {{name: c}}\n  partitions: 1\n"
            f"  replicationFactor: {replication_factor}\n  config:\n{config}")


def _the_api_server_runs_the_crds_rules(kube_cluster: KubeCluster) -> None:
    """The examples (booleans quoted) pass the API server's schema and CEL rules; a bare boolean
    in config, and min.insync.replicas above the replication factor (as int or string), do not."""
    for example in sorted((REPO / "crds" / "examples").glob("*.yaml")):
        done = _dry_run(kube_cluster, example.read_text())
        assert done.returncode == 0, f"{example.name}: {done.stderr}"
    bare = _dry_run(kube_cluster, _topic("    unclean.leader.election.enable: false\n"))
    assert bare.returncode != 0
    assert "spec.config.unclean.leader.election.enable" in bare.stderr, bare.stderr
    for value in ("3", '"3"'):
        refused = _dry_run(kube_cluster, _topic(f"    min.insync.replicas: {value}\n", 2))
        assert "must not exceed replicationFactor" in refused.stderr, refused.stderr
        accepted = _dry_run(kube_cluster, _topic(f"    min.insync.replicas: {value}\n", 3))
        assert accepted.returncode == 0, accepted.stderr


def test_the_chart_installs_upgrades_and_uninstalls(kube_cluster: KubeCluster) -> None:
    sets = [f"--set=image.repository={OPERATOR_IMAGE[0]}", f"--set=image.tag={OPERATOR_IMAGE[1]}",
            "--set=image.pullPolicy=Never"]
    chart = str(REPO / "charts" / "strom")
    kube_cluster.helm("install", RELEASE, chart, "-n", RELEASE_NS, "--create-namespace", *sets,
          "--wait", "--timeout=5m")
    crds = json.loads(kube_cluster.kubectl("get", "crd", "-o", "json"))["items"]
    names = [c["metadata"]["name"] for c in crds if c["spec"]["group"] == "strom.dev"]
    assert sorted(names) == ["stromclusters.strom.dev", "stromconsumergroups.strom.dev",
                             "stromtopics.strom.dev"]
    kube_cluster.kubectl("wait", "--for=condition=Established", *[f"crd/{n}" for n in names])
    _the_api_server_runs_the_crds_rules(kube_cluster)
    pod = _operator_pod(kube_cluster)
    spec = pod["spec"]
    assert isinstance(spec, dict)
    assert spec["containers"][0]["image"] == ":".join(OPERATOR_IMAGE)
    kube_cluster.kubectl("-n", RELEASE_NS, "wait", "--for=condition=Ready",
             f"pod/{pod['metadata']['name']}", "--timeout=180s")  # type: ignore[index]
    sa = f"system:serviceaccount:{RELEASE_NS}:{spec['serviceAccountName']}"
    # The chart's RBAC: the operator may watch its own resources, not delete nodes.
    allowed = kube_cluster.run("kubectl", "auth", "can-i", "list", "stromclusters.strom.dev",
                               f"--as={sa}")
    assert allowed.stdout.strip() == "yes"
    forbidden = kube_cluster.run("kubectl", "auth", "can-i", "delete", "nodes", f"--as={sa}")
    assert forbidden.stdout.strip() == "no"
    old_uid = pod["metadata"]["uid"]  # type: ignore[index]
    kube_cluster.helm("upgrade", RELEASE, chart, "-n", RELEASE_NS, *sets, "--set=logLevel=DEBUG",
          "--wait", "--timeout=5m")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        new = _operator_pod(kube_cluster)
        if new["metadata"]["uid"] != old_uid:  # type: ignore[index]
            break
        time.sleep(1)
    assert "--log-level=DEBUG" in new["spec"]["containers"][0]["args"]  # type: ignore[index]
    kube_cluster.helm("uninstall", RELEASE, "-n", RELEASE_NS, "--wait", "--timeout=5m")
    # helm deletes the Deployment; its pods go afterwards (garbage collection, then the pod's
    # grace period), so `--wait` can return while the last one is still terminating.
    started = time.monotonic()
    while True:
        left = kube_cluster.kubectl_json("-n", RELEASE_NS, "get", "deploy,sa,pods")
        names = [i["metadata"]["name"] for i in left["items"]
                 if i["kind"] != "ServiceAccount" or i["metadata"]["name"] != "default"]
        if not names or time.monotonic() - started > 120:
            break
        time.sleep(1)
    print(f"uninstall: the release's objects were gone {time.monotonic() - started:.1f} s "
          "after helm uninstall returned")
    assert names == [], "left 120 s after helm uninstall"
