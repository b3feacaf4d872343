"""The real single-node cluster (``kube`` marker: deselected by default, ``pytest -m kube``).

Starts the cluster once for the module (``strom.testing.kube.cluster.up``, binaries from
``kube/build.sh``), proves nothing can leave the node and that unused cluster addresses fail on
this machine, checks the API server's version and RBAC, DNS, a volume from StorageClass
``standard`` used by a pod, and finally that ``down`` leaves no namespace, route, cgroup, mount,
file or changed kernel setting behind. Needs root, Go and the Debian packages: without them it
skips on a developer machine and fails under ``CI=true``.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.testing.kube import cgroups, cluster, network
from strom.testing.kube import layout as L
from strom.testing.kube.layout import Paths
from strom.testing.process import pid_runs

pytestmark = [pytest.mark.kube, pytest.mark.integration, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[4]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the kube tests cannot run: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Paths]]:
    if os.geteuid() != 0:
        _unavailable("the node needs root")
    if shutil.which("containerd") is None or shutil.which("go") is None:
        _unavailable("needs Go and the Debian packages (./dev kube up installs them)")
    if os.environ.get("STROM_KUBE_BIN"):  # binaries built elsewhere (same versions)
        bin_dir = Path(os.environ["STROM_KUBE_BIN"])
    else:
        build = subprocess.run([str(REPO / "kube" / "build.sh")], capture_output=True,
                               text=True, timeout=7200, check=False)
        if build.returncode != 0:
            pytest.fail(f"kube/build.sh failed: {build.stderr[-2000:]}")
        bin_dir = Path(build.stdout.strip().splitlines()[-1])
    paths = Paths.default()
    before = cluster.read_sysctls()
    try:
        timings = cluster.up(bin_dir, paths)
        print(f"cluster up: {json.dumps(timings)}")
        yield bin_dir, paths
    finally:
        cluster.down(paths, quiet=True)
        assert cluster.read_sysctls() == before


def _kubectl(kube: tuple[Path, Paths], *args: str, stdin: str | None = None) -> str:
    bin_dir, paths = kube
    proc = subprocess.run([str(bin_dir / "kubectl"), f"--kubeconfig={paths.admin_kubeconfig}",
                           *args], input=stdin, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def test_nothing_leaves_the_node(kube: tuple[Path, Paths]) -> None:
    # The node's table has no default route: an outside address has no route at all, so the
    # kernel refuses before any packet exists (checked on the table, then on a socket).
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


def test_unused_cluster_addresses_fail_on_this_machine(kube: tuple[Path, Paths]) -> None:
    # An unallocated Service address routes only into the node, which has no route for it and
    # answers "unreachable" itself; the rest of the guard block is unreachable on the host.
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


def test_api_server_reports_its_version_and_enforces_rbac(kube: tuple[Path, Paths]) -> None:
    version = json.loads(_kubectl(kube, "get", "--raw", "/version"))
    assert version["gitVersion"] == L.KUBERNETES_VERSION
    assert version["major"] == "1" and version["minor"] == "34"
    can = subprocess.run([str(kube[0] / "kubectl"), f"--kubeconfig={kube[1].admin_kubeconfig}",
                          "auth", "can-i", "create", "pods",
                          "--as=system:serviceaccount:default:default"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert can.stdout.strip() == "no"
    assert "apiregistration.k8s.io" in _kubectl(kube, "api-versions")


def test_cluster_dns_answers_from_a_service_address(kube: tuple[Path, Paths]) -> None:
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
        kube: tuple[Path, Paths]) -> None:
    _kubectl(kube, "apply", "-f", "-", stdin=PVC_POD)
    _kubectl(kube, "-n", "kubetest", "wait", "--for=condition=Ready", "pod/holder",
             "--timeout=120s")
    pvc = json.loads(_kubectl(kube, "-n", "kubetest", "get", "pvc", "data", "-o", "json"))
    assert pvc["status"]["phase"] == "Bound"
    assert pvc["spec"]["storageClassName"] == L.STORAGE_CLASS
    volume = kube[1].volumes / pvc["spec"]["volumeName"]
    assert volume.is_dir()
    _kubectl(kube, "delete", "namespace", "kubetest", "--timeout=120s")
    deadline = time.monotonic() + 60
    while volume.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not volume.exists()


OPERATOR_IMAGE = ("strom.local/strom-operator", "dev")
RELEASE, RELEASE_NS = "strom", "strom-system"


def _helm(kube: tuple[Path, Paths], *args: str, timeout: float = 600) -> str:
    bin_dir, paths = kube
    proc = subprocess.run([str(bin_dir / "helm"), f"--kubeconfig={paths.admin_kubeconfig}",
                           *args], capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def _operator_pod(kube: tuple[Path, Paths]) -> dict[str, object]:
    pods = json.loads(_kubectl(kube, "-n", RELEASE_NS, "get", "pods", "-o", "json"))["items"]
    running = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert len(running) == 1, [p["metadata"]["name"] for p in pods]
    return dict(running[0])


def _dry_run(kube: tuple[Path, Paths], manifest: str) -> subprocess.CompletedProcess[str]:
    bin_dir, paths = kube
    return subprocess.run([str(bin_dir / "kubectl"), f"--kubeconfig={paths.admin_kubeconfig}",
                           "-n", "default", "apply", "--dry-run=server", "-f", "-"],
                          input=manifest, capture_output=True, text=True, timeout=60, check=False)


def _topic(config: str, replication_factor: int = 3) -> str:
    return ("apiVersion: strom.dev/v1alpha1\nkind: StromTopic\nmetadata: {name: t}\n"
            f"spec:\n  clusterRef: {{name: c}}\n  partitions: 1\n"
            f"  replicationFactor: {replication_factor}\n  config:\n{config}")


def _the_api_server_runs_the_crds_rules(kube: tuple[Path, Paths]) -> None:
    """The examples (booleans quoted) pass the API server's schema and CEL rules; a bare boolean
    in config, and min.insync.replicas above the replication factor (as int or string), do not."""
    for example in sorted((REPO / "crds" / "examples").glob("*.yaml")):
        done = _dry_run(kube, example.read_text())
        assert done.returncode == 0, f"{example.name}: {done.stderr}"
    bare = _dry_run(kube, _topic("    unclean.leader.election.enable: false\n"))
    assert bare.returncode != 0
    assert "spec.config.unclean.leader.election.enable" in bare.stderr, bare.stderr
    for value in ("3", '"3"'):
        refused = _dry_run(kube, _topic(f"    min.insync.replicas: {value}\n", 2))
        assert "must not exceed replicationFactor" in refused.stderr, refused.stderr
        assert _dry_run(kube, _topic(f"    min.insync.replicas: {value}\n", 3)).returncode == 0


def test_the_chart_installs_upgrades_and_uninstalls(kube: tuple[Path, Paths]) -> None:
    if not (kube[0] / "helm").exists():
        pytest.fail(f"helm is not built in {kube[0]} (kube/build.sh builds it)")
    images = subprocess.run([str(REPO / "kube" / "images.sh")], capture_output=True,
                            text=True, timeout=3600, check=False)
    assert images.returncode == 0, images.stderr[-3000:]
    sets = [f"--set=image.repository={OPERATOR_IMAGE[0]}", f"--set=image.tag={OPERATOR_IMAGE[1]}",
            "--set=image.pullPolicy=Never"]
    chart = str(REPO / "charts" / "strom")
    _helm(kube, "install", RELEASE, chart, "-n", RELEASE_NS, "--create-namespace", *sets,
          "--wait", "--timeout=5m")
    crds = json.loads(_kubectl(kube, "get", "crd", "-o", "json"))["items"]
    names = [c["metadata"]["name"] for c in crds if c["spec"]["group"] == "strom.dev"]
    assert sorted(names) == ["stromclusters.strom.dev", "stromconsumergroups.strom.dev",
                             "stromtopics.strom.dev"]
    _kubectl(kube, "wait", "--for=condition=Established", *[f"crd/{n}" for n in names])
    _the_api_server_runs_the_crds_rules(kube)
    pod = _operator_pod(kube)
    spec = pod["spec"]
    assert isinstance(spec, dict)
    assert spec["containers"][0]["image"] == ":".join(OPERATOR_IMAGE)
    _kubectl(kube, "-n", RELEASE_NS, "wait", "--for=condition=Ready",
             f"pod/{pod['metadata']['name']}", "--timeout=180s")  # type: ignore[index]
    sa = f"system:serviceaccount:{RELEASE_NS}:{spec['serviceAccountName']}"
    # The chart's RBAC: the operator may watch its own resources, not delete nodes.
    allowed = subprocess.run([str(kube[0] / "kubectl"),
                              f"--kubeconfig={kube[1].admin_kubeconfig}", "auth", "can-i",
                              "list", "stromclusters.strom.dev", f"--as={sa}"],
                             capture_output=True, text=True, timeout=60, check=False)
    assert allowed.stdout.strip() == "yes"
    forbidden = subprocess.run([str(kube[0] / "kubectl"),
                                f"--kubeconfig={kube[1].admin_kubeconfig}", "auth", "can-i",
                                "delete", "nodes", f"--as={sa}"],
                               capture_output=True, text=True, timeout=60, check=False)
    assert forbidden.stdout.strip() == "no"
    old_uid = pod["metadata"]["uid"]  # type: ignore[index]
    _helm(kube, "upgrade", RELEASE, chart, "-n", RELEASE_NS, *sets, "--set=logLevel=DEBUG",
          "--wait", "--timeout=5m")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        new = _operator_pod(kube)
        if new["metadata"]["uid"] != old_uid:  # type: ignore[index]
            break
        time.sleep(1)
    assert "--log-level=DEBUG" in new["spec"]["containers"][0]["args"]  # type: ignore[index]
    _helm(kube, "uninstall", RELEASE, "-n", RELEASE_NS, "--wait", "--timeout=5m")
    # helm deletes the Deployment; its pods go afterwards (garbage collection, then the pod's
    # grace period), so `--wait` can return while the last one is still terminating.
    started = time.monotonic()
    while True:
        left = json.loads(_kubectl(kube, "-n", RELEASE_NS, "get", "deploy,sa,pods", "-o", "json"))
        names = [i["metadata"]["name"] for i in left["items"]
                 if i["kind"] != "ServiceAccount" or i["metadata"]["name"] != "default"]
        if not names or time.monotonic() - started > 120:
            break
        time.sleep(1)
    print(f"uninstall: the release's objects were gone {time.monotonic() - started:.1f} s "
          "after helm uninstall returned")
    assert names == [], "left 120 s after helm uninstall"


def test_down_removes_everything(kube: tuple[Path, Paths]) -> None:
    paths = kube[1]
    state = cluster.load_state(paths)
    started = [(p["pid"], p["marker"]) for p in state["processes"].values()]
    cluster.down(paths, quiet=True)
    assert not network.netns_exists()
    routes = network.host_routes()
    assert "kubestrom" not in routes and "100.72.0.0" not in routes
    assert not any(Path(h, L.NAME).exists() for h in cgroups.hierarchies())
    assert not paths.home.exists() and not paths.run.exists()
    assert str(paths.home) not in Path("/proc/self/mountinfo").read_text()
    assert cluster.read_sysctls() == {k: v for k, v in state["sysctls"].items()}
    # None of them runs any more (a PID of the machine's other processes may be reused).
    assert [(pid, marker) for pid, marker in started if pid_runs(pid, marker)] == []
