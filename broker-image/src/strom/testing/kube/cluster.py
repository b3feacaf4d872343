"""``up``, ``down`` and ``status`` of the single-node cluster (``./dev kube ...``).

``up`` cleans whatever an earlier run left (``down``), checks the address ranges, builds the
node's network (:mod:`~strom.testing.kube.network`), writes certificates and configs, then starts
etcd, kube-apiserver, kube-controller-manager and kube-scheduler on the host (the API server
listens on the host end of the veth) and containerd, kubelet and kube-proxy in the node's
namespace, loads the pause and CoreDNS images, applies CoreDNS and StorageClass ``standard``,
starts the volume provisioner, and waits until the node is Ready and the cluster DNS answers.
Processes are started with :class:`strom.testing.process.ManagedProcess` (detached: they outlive
``up``), their PIDs written to a state file after each start, and each is placed in the
``/kubestrom`` cgroup tree, so ``down`` finds every one of them (pods and shims included) even
after a crash.

``down`` stops by PID (state file and cgroup tree), unmounts what the node mounted under its
directories, removes the namespace, veth, routes and cgroups, puts back the kernel settings
kubelet changed, and deletes the cluster's files. Both need root.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from strom.testing.kube import cgroups, configs, dnsprobe, network, oci, pki
from strom.testing.kube import layout as L
from strom.testing.kube.layout import Paths
from strom.testing.process import (
    ManagedProcess,
    ProcessStartError,
    pid_alive,
    pid_runs,
    stop_pids,
)

SHIM_DIR = Path("/run/containerd/s")
#: libcni's result cache (containerd 1.6 does not let it be moved): our network's entries are
#: named after it, ``kubestrom-<sandbox>-eth0``.
CNI_CACHE = Path("/var/lib/cni")
#: Stop order: what depends on the others first.
STOP_ORDER = ("provisioner", "kube-proxy", "kubelet", "containerd", "kube-scheduler",
              "kube-controller-manager", "kube-apiserver", "etcd")
#: The pod range's network address as ``ip route`` prints it.
CLUSTER_NET = L.CLUSTER_CIDR.split("/")[0]
HOST_DAEMONS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


class KubeError(RuntimeError):
    """A step of up/down failed; the message says which and what to look at."""


def _say(msg: str) -> None:
    print(f"==> {msg}", file=sys.stderr, flush=True)


# --- state --------------------------------------------------------------------------------------


def load_state(paths: Paths) -> dict[str, Any]:
    try:
        return dict(json.loads(paths.state_file.read_text()))
    except (OSError, ValueError):
        return {}


def save_state(paths: Paths, state: dict[str, Any]) -> None:
    paths.home.mkdir(parents=True, exist_ok=True)
    tmp = paths.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
    tmp.replace(paths.state_file)


def read_sysctls(keys: Sequence[str] = L.KERNEL_SETTINGS) -> dict[str, str]:
    out = {}
    for key in keys:
        with contextlib.suppress(OSError):
            out[key] = Path("/proc/sys", key).read_text().strip()
    return out


def restore_sysctls(saved: dict[str, str]) -> list[str]:
    """Write back every recorded setting that differs now; returns what was restored."""
    restored = []
    for key, value in saved.items():
        path = Path("/proc/sys", key)
        with contextlib.suppress(OSError):
            if path.read_text().strip() != value:
                path.write_text(value)
                restored.append(f"{key.replace('/', '.')}={value}")
    return restored


# --- talking to the cluster -------------------------------------------------------------------


def _admin_context(paths: Paths) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(paths.pki / "ca.crt"))
    ctx.load_cert_chain(str(paths.pki / "user-admin.crt"), str(paths.pki / "user-admin.key"))
    return ctx


def api_get(paths: Paths, path: str, timeout: float = 5.0) -> Any:
    url = f"{configs.API_URL}{path}"
    with urllib.request.urlopen(url, context=_admin_context(paths), timeout=timeout) as resp:
        body = resp.read()
    return json.loads(body) if body[:1] in (b"{", b"[") else body.decode()


def _https_ok(url: str) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(url, context=ctx, timeout=3) as resp:
        return bool(resp.status == 200)


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=3) as resp:
        return bool(resp.status == 200)


def node_ready(paths: Paths) -> bool:
    node = api_get(paths, f"/api/v1/nodes/{L.NODE_NAME}")
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in node.get("status", {}).get("conditions", []))


def deployment_available(paths: Paths, namespace: str, name: str) -> bool:
    dep = api_get(paths, f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
    return int(dep.get("status", {}).get("availableReplicas") or 0) >= 1


def dns_answers() -> bool:
    name = f"kubernetes.default.svc.{L.CLUSTER_DOMAIN}"
    return dnsprobe.resolve_a(L.DNS_SERVICE_IP, name, timeout=1.0) == [L.API_SERVICE_IP]


def kubectl(bin_dir: Path, paths: Paths, *args: str, timeout: float = 120) -> str:
    proc = subprocess.run([str(bin_dir / "kubectl"), f"--kubeconfig={paths.admin_kubeconfig}",
                           *args], capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise KubeError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def _wait(what: str, probe: Callable[[], bool], timeout: float,
          procs: Sequence[ManagedProcess] = ()) -> float:
    """Poll ``probe`` until true; fail at ``timeout`` or when one of ``procs`` exits."""
    start = time.monotonic()
    last_error = ""
    while True:
        for proc in procs:
            proc.check_running()
        try:
            if probe():
                return time.monotonic() - start
        except Exception as exc:
            last_error = f"{type(exc).__name__}: {exc}"
        if time.monotonic() - start > timeout:
            raise KubeError(f"{what} did not happen within {timeout:.0f} s"
                            + (f" (last error: {last_error})" if last_error else ""))
        time.sleep(0.5)


# --- up ---------------------------------------------------------------------------------------


class Up:
    def __init__(self, bin_dir: Path, paths: Paths) -> None:
        self.bin = bin_dir
        self.paths = paths
        self.state: dict[str, Any] = {"processes": {}, "started": time.time()}
        self.procs: dict[str, ManagedProcess] = {}
        self.timings: dict[str, float] = {}

    def start(self, name: str, argv: list[str], *, node: bool = False,
              marker: str | None = None) -> ManagedProcess:
        full = network.in_node(argv) if node else argv
        proc = ManagedProcess(full, self.paths.logs / f"{name}.log", name=name, detach=True)
        proc.start()
        cgroups.join(proc.pid)
        self.procs[name] = proc
        self.state["processes"][name] = {"pid": proc.pid, "marker": marker or Path(argv[0]).name}
        save_state(self.paths, self.state)
        return proc

    def step(self, what: str, probe: Callable[[], bool], timeout: float,
             *names: str) -> None:
        took = _wait(what, probe, timeout, [self.procs[n] for n in names])
        self.timings[what] = round(took, 1)
        _say(f"{what} ({took:.1f} s)")

    def write_files(self) -> None:
        p = self.paths
        for d in (p.conf / "cni", p.logs, p.volumes, p.run):
            d.mkdir(parents=True, exist_ok=True)
        pki.write_cluster_pki(p.pki, configs.cert_specs())
        for user in configs.USERS:
            p.kubeconfig(user).write_text(configs.kubeconfig(p, user))
        shutil.copy(p.kubeconfig("admin"), p.admin_kubeconfig)
        (p.conf / "containerd.toml").write_text(configs.containerd_config(p))
        (p.conf / "cni" / "10-kubestrom.conflist").write_text(configs.cni_conflist(p))
        (p.conf / "kubelet.json").write_text(configs.kubelet_config(p))
        (p.conf / "kube-proxy.json").write_text(configs.kube_proxy_config(p))
        (p.conf / "node-resolv.conf").write_text(configs.node_resolv_conf())
        (p.conf / "coredns.yaml").write_text(configs.dump_all(configs.coredns_manifests()))
        (p.conf / "storage.yaml").write_text(configs.dump_all(configs.storage_manifests()))

    def run(self) -> dict[str, float]:
        t0 = time.monotonic()
        p, b = self.paths, self.bin
        missing = [n for n in ("etcd", "kube-apiserver", "kube-controller-manager",
                               "kube-scheduler", "kubelet", "kube-proxy", "kubectl",
                               "coredns", "pause") if not (b / n).exists()]
        if missing:
            raise KubeError(f"missing binaries in {b}: {', '.join(missing)} "
                            "(run ./dev kube build)")
        for tool in ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables",
                     "nsenter"):
            if shutil.which(tool) is None:
                raise KubeError(f"{tool} is not installed (./dev kube installs the Debian "
                                "packages containerd runc containernetworking-plugins "
                                "iptables conntrack)")
        self.state["shim_sockets_before"] = sorted(
            f.name for f in SHIM_DIR.iterdir()) if SHIM_DIR.exists() else []
        self.state["shim_dir_existed"] = SHIM_DIR.parent.exists()
        self.state["cni_cache_existed"] = CNI_CACHE.exists()
        save_state(p, self.state)
        network.create()
        self.state["network"] = True
        cgroups.create()
        save_state(p, self.state)
        self.write_files()
        _say(f"network {L.NETNS}: host {L.HOST_IP}, node {L.NODE_IP}, pods {L.CLUSTER_CIDR}, "
             f"services {L.SERVICE_CIDR}; no route out of the node")

        from strom.testing.process import free_ports

        etcd_port, peer_port, cm_port, sched_port = free_ports(4)
        self.state["ports"] = {"etcd": etcd_port, "controller-manager": cm_port,
                               "scheduler": sched_port}
        self.start("etcd", configs.etcd_args(b / "etcd", p, etcd_port, peer_port))
        self.step("etcd healthy", lambda: _http_ok(f"http://127.0.0.1:{etcd_port}/health"),
                  60, "etcd")
        self.start("kube-apiserver", configs.apiserver_args(b / "kube-apiserver", p, etcd_port))
        self.step("kube-apiserver ready", lambda: api_get(p, "/readyz") == "ok", 180,
                  "kube-apiserver", "etcd")
        self.start("kube-controller-manager",
                   configs.controller_manager_args(b / "kube-controller-manager", p, cm_port))
        self.start("kube-scheduler", configs.scheduler_args(b / "kube-scheduler", p, sched_port))
        self.start("containerd", ["containerd", "--config", str(p.conf / "containerd.toml")],
                   node=True)
        self.step("containerd serving", self._containerd_up, 60, "containerd")
        self.load_images()
        self.state["sysctls"] = read_sysctls()
        save_state(p, self.state)
        self.start("kubelet", configs.kubelet_args(b / "kubelet", p), node=True)
        self.start("kube-proxy", configs.kube_proxy_args(b / "kube-proxy", p), node=True)
        self.step("controller-manager and scheduler healthy",
                  lambda: _https_ok(f"https://127.0.0.1:{cm_port}/healthz")
                  and _https_ok(f"https://127.0.0.1:{sched_port}/healthz"), 90,
                  "kube-controller-manager", "kube-scheduler")
        self.step("node Ready", lambda: node_ready(p), 180, "kubelet", "containerd")
        self.step("kube-proxy healthy",
                  lambda: _http_ok(f"http://{L.NODE_IP}:10256/healthz"), 60, "kube-proxy")
        kubectl(b, p, "apply", "-f", str(p.conf / "storage.yaml"))
        kubectl(b, p, "apply", "-f", str(p.conf / "coredns.yaml"))
        self.start("provisioner", [sys.executable, "-m", "strom.testing.kube.provisioner",
                                   str(p.kubeconfig("provisioner")), str(p.volumes)],
                   marker="strom.testing.kube.provisioner")
        self.step("CoreDNS available",
                  lambda: deployment_available(p, "kube-system", "coredns"), 180,
                  "kubelet", "containerd", "kube-proxy")
        self.step("cluster DNS answers", dns_answers, 60, "kube-proxy")
        self.timings["total"] = round(time.monotonic() - t0, 1)
        self.state["timings"] = self.timings
        save_state(p, self.state)
        return self.timings

    def _containerd_up(self) -> bool:
        out = subprocess.run(["ctr", f"--address={self.paths.containerd_socket}", "version"],
                             capture_output=True, text=True, timeout=10, check=False)
        return out.returncode == 0

    def load_images(self) -> None:
        images = self.paths.home / "images"
        images.mkdir(exist_ok=True)
        for name, binary in ((L.PAUSE_IMAGE, self.bin / "pause"),
                             (L.COREDNS_IMAGE, self.bin / "coredns")):
            archive = images / f"{binary.name}.tar"
            archive.write_bytes(oci.binary_image(name, binary))
            ctr_import(self.paths, archive)
        _say(f"images loaded: {L.PAUSE_IMAGE}, {L.COREDNS_IMAGE}")


def ctr_import(paths: Paths, archive: Path) -> None:
    proc = subprocess.run(["ctr", f"--address={paths.containerd_socket}", "-n", "k8s.io",
                           "images", "import", str(archive)],
                          capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise KubeError(f"ctr images import {archive} failed: {proc.stderr.strip()}")


def up(bin_dir: Path, paths: Paths | None = None) -> dict[str, float]:
    """Start the cluster (after cleaning any earlier one); returns the measured step times."""
    paths = paths or Paths.default()
    if os.geteuid() != 0:
        raise KubeError("the node needs root (network namespace, cgroups, mounts)")
    left = down(paths, quiet=True)
    if left:
        _say(f"cleaned an earlier cluster first: {'; '.join(left)}")
    runner = Up(bin_dir, paths)
    try:
        timings = runner.run()
    except (KubeError, ProcessStartError, network.NetworkError, OSError) as exc:
        raise KubeError(f"{exc}\n(logs in {paths.logs}; the cluster is left as it is for "
                        "inspection: `./dev kube down` removes it)") from exc
    _say(f"cluster up in {timings['total']:.0f} s; kubeconfig: {paths.admin_kubeconfig}")
    return timings


# --- down -------------------------------------------------------------------------------------


def _mounts_under(prefixes: Sequence[Path]) -> list[str]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if any(point == str(p) or point.startswith(f"{p}/") for p in prefixes):
            found.append(point)
    return sorted(set(found), key=lambda m: -m.count("/"))


def unmount_all(prefixes: Sequence[Path]) -> list[str]:
    done = []
    for _ in range(5):  # stacked mounts need more than one pass
        points = _mounts_under(prefixes)
        if not points:
            break
        for point in points:
            rc = subprocess.run(["umount", point], capture_output=True, check=False).returncode
            if rc != 0:
                subprocess.run(["umount", "-l", point], capture_output=True, check=False)
            done.append(point)
    return done


def _sandbox_ids(paths: Paths) -> set[str]:
    """The pod sandboxes containerd knows (their IDs name libcni's cache entries)."""
    ids: set[str] = set()
    for base in (paths.home / "containerd", paths.run / "containerd"):
        sandboxes = base / "io.containerd.grpc.v1.cri" / "sandboxes"
        if sandboxes.is_dir():
            ids.update(d.name for d in sandboxes.iterdir())
    return ids


def _stop_tree(exclude: set[int], what: str) -> list[str]:
    """Stop every live process in the cluster's cgroups except ``exclude`` (and ourselves)."""
    did = []
    for _ in range(10):
        left = [pid for pid in cgroups.pids()
                if pid not in exclude and pid != os.getpid() and pid_alive(pid)]
        if not left:
            break
        stop_pids(left, 10)
        did.append(f"stopped {len(left)} {what}")
    return did


def down(paths: Paths | None = None, *, quiet: bool = False) -> list[str]:
    """Stop and remove everything ``up`` made; returns what was found and removed."""
    paths = paths or Paths.default()
    state = load_state(paths)
    did: list[str] = []
    procs = state.get("processes", {})
    sandboxes = _sandbox_ids(paths)
    for name in STOP_ORDER:
        info = procs.get(name)
        if info and pid_runs(info["pid"], info["marker"]):
            stop_pids([info["pid"]], 20 if name in HOST_DAEMONS else 10, marker=info["marker"])
            did.append(f"stopped {name} (pid {info['pid']})")
        if name == "containerd":
            # Everything left in the node's cgroups: shims and pod processes.
            host = {procs[n]["pid"] for n in HOST_DAEMONS if n in procs}
            did += _stop_tree(exclude=host, what="node processes (pods, shims)")
    # Anything still in the tree (a crash may have left PIDs the state file never saw).
    did += _stop_tree(exclude=set(), what="leftover processes")
    mounts = unmount_all([paths.home, paths.run])
    if mounts:
        did.append(f"unmounted {len(mounts)} mounts")
    did += network.destroy()
    for _ in range(20):  # a just-killed process leaves its cgroup a moment later
        failed = cgroups.remove()
        if not failed:
            break
        time.sleep(0.5)
    else:
        raise KubeError(f"could not remove cgroups: {'; '.join(failed)}")
    did += [f"restored {s}" for s in restore_sysctls(state.get("sysctls", {}))]
    before = set(state.get("shim_sockets_before", []))
    if SHIM_DIR.exists() and state:
        for sock in SHIM_DIR.iterdir():
            if sock.name not in before:
                sock.unlink(missing_ok=True)
        if not state.get("shim_dir_existed", True):
            shutil.rmtree(SHIM_DIR.parent, ignore_errors=True)
    for sandbox in sandboxes:
        for entry in CNI_CACHE.glob(f"results/*-{sandbox}-*"):
            entry.unlink(missing_ok=True)
    if state and not state.get("cni_cache_existed", True):
        shutil.rmtree(CNI_CACHE, ignore_errors=True)
    for d in (paths.run, paths.home):
        if d.exists():
            shutil.rmtree(d)
            did.append(f"removed {d}")
    if not quiet:
        _say("; ".join(did) if did else "nothing to remove")
    return did


def leftovers(paths: Paths, state: dict[str, Any], sysctls_before: dict[str, str]) -> list[str]:
    """What of the cluster described by ``state`` (read before ``down``) is still on the machine
    after ``down``: namespace, routes, cgroups, files, mounts, changed kernel settings, processes.
    Empty when ``down`` removed everything."""
    left = []
    if network.netns_exists():
        left.append(f"network namespace {L.NETNS}")
    routes = network.host_routes()
    if L.NAME in routes or CLUSTER_NET in routes:
        left.append(f"host routes into the node: {routes}")
    left += [f"cgroup {Path(h, L.NAME)}" for h in cgroups.hierarchies() if Path(h, L.NAME).exists()]
    left += [f"directory {d}" for d in (paths.home, paths.run) if d.exists()]
    mounts = _mounts_under([paths.home, paths.run])
    if mounts:
        left.append(f"mounts {mounts}")
    now = read_sysctls()
    left += [f"kernel setting {k}={now.get(k)} (was {v})" for k, v in sysctls_before.items()
             if now.get(k) != v]
    for name, info in state.get("processes", {}).items():
        if pid_runs(info["pid"], info["marker"]):
            left.append(f"process {name} (pid {info['pid']})")
    return left


# --- status -----------------------------------------------------------------------------------


def status(paths: Paths | None = None) -> dict[str, Any]:
    paths = paths or Paths.default()
    state = load_state(paths)
    out: dict[str, Any] = {"kubeconfig": str(paths.admin_kubeconfig) if state else None,
                           "processes": {}, "network": network.netns_exists()}
    for name, info in state.get("processes", {}).items():
        out["processes"][name] = {"pid": info["pid"],
                                  "running": pid_runs(info["pid"], info["marker"])}
    if state:
        try:
            out["node_ready"] = node_ready(paths)
        except Exception as exc:
            out["node_ready"] = f"unknown ({type(exc).__name__}: {exc})"
        try:
            out["dns"] = dns_answers()
        except Exception as exc:
            out["dns"] = f"no answer ({type(exc).__name__})"
    out["timings"] = state.get("timings")
    return out
