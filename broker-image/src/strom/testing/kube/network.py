"""The node's network: its own namespace, a veth pair to the host, and host routes that send
the pod and Service ranges into it and nowhere else.

Order matters and is checked: the host gets an ``unreachable`` route for the whole guard block
first (so while the node is absent, or after it crashes and its veth vanishes, nothing in those
ranges can fall to the default route), then the namespace and the veth, then the two routes into
the veth. The node's own table is read back and must have no default route and nothing outside
the cluster's ranges (:func:`strom.testing.kube.netcheck.node_escapes`) before any process
starts in it. Everything here shells out to iproute2 (``ip``), as root.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

from strom.testing.kube import layout as L
from strom.testing.kube import netcheck


class NetworkError(RuntimeError):
    """A network step failed or a safety check did not hold."""


def run(argv: Sequence[str], *, check: bool = True) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)
    if check and proc.returncode != 0:
        raise NetworkError(f"`{' '.join(argv)}` failed (exit {proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


def in_node(argv: Sequence[str]) -> list[str]:
    """``argv`` run in the node's network namespace (only the network: the mount namespace
    stays the host's, so kubelet's volume mounts are visible to containerd)."""
    return ["nsenter", f"--net=/run/netns/{L.NETNS}", "--", *argv]


def netns_exists() -> bool:
    return Path(f"/run/netns/{L.NETNS}").exists()


def host_routes() -> str:
    return run(["ip", "-j", "route", "show", "table", "all"])


def node_routes() -> str:
    v4 = json.loads(run(in_node(["ip", "-j", "-4", "route", "show", "table", "all"])) or "[]")
    v6 = json.loads(run(in_node(["ip", "-j", "-6", "route", "show", "table", "all"])) or "[]")
    return json.dumps(v4 + v6)


def check_ranges_free() -> None:
    """Refuse to start if anything on the host overlaps the cluster's guard block."""
    found = netcheck.conflicts(host_routes(), run(["ip", "-j", "rule", "show"]),
                               Path("/etc/resolv.conf").read_text())
    if found:
        raise NetworkError(
            f"the cluster's address block {L.GUARD_CIDR} overlaps this machine's "
            f"network ({'; '.join(found)}); nothing was changed. Run `./dev kube down` if "
            "these are left over from an earlier cluster, otherwise change the ranges in "
            "strom/testing/kube/layout.py")


def create() -> None:
    check_ranges_free()
    run(["ip", "route", "add", "unreachable", L.GUARD_CIDR])
    run(["ip", "netns", "add", L.NETNS])
    run(["ip", "link", "add", L.VETH_HOST, "type", "veth", "peer", "name", L.VETH_NODE,
         "netns", L.NETNS])
    run(["ip", "addr", "add", f"{L.HOST_IP}/{L.LINK_PREFIX}", "dev", L.VETH_HOST])
    run(["ip", "link", "set", L.VETH_HOST, "up"])
    node = ["ip", "netns", "exec", L.NETNS]
    run([*node, "ip", "link", "set", "lo", "up"])
    run([*node, "ip", "addr", "add", f"{L.NODE_IP}/{L.LINK_PREFIX}", "dev", L.VETH_NODE])
    run([*node, "ip", "link", "set", L.VETH_NODE, "up"])
    # Per-namespace settings: the node forwards between the veth and the pod bridge; it never
    # takes IPv6 (no addresses, no router advertisements).
    run([*node, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
    run([*node, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"])
    run([*node, "sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1"])
    verify_node_closed()
    for cidr in L.ROUTED_CIDRS:
        run(["ip", "route", "add", cidr, "via", L.NODE_IP, "dev", L.VETH_HOST])
    verify_host_routes()


def verify_node_closed() -> None:
    escapes = netcheck.node_escapes(node_routes())
    if escapes:
        raise NetworkError(f"the node's namespace {L.NETNS} has a way out: "
                           f"{'; '.join(escapes)}")


def verify_host_routes() -> None:
    """Each routed range must resolve into the veth, the rest of the guard block to
    ``unreachable``."""
    for cidr, want in ((L.CLUSTER_CIDR, L.VETH_HOST), (L.SERVICE_CIDR, L.VETH_HOST)):
        probe = cidr.split("/")[0].rsplit(".", 1)[0] + ".254"
        got = json.loads(run(["ip", "-j", "route", "get", probe]))
        if not got or got[0].get("dev") != want:
            raise NetworkError(f"{probe} does not route into {want}: {got}")
    spare = "100.75.0.1"
    proc = subprocess.run(["ip", "route", "get", spare], capture_output=True, text=True,
                          check=False)
    if proc.returncode == 0:
        raise NetworkError(f"{spare} (inside the guard block) routes somewhere: "
                           f"{proc.stdout.strip()}")


def destroy() -> list[str]:
    """Remove the namespace (its end of the veth and every rule in it go with it), the host's
    end of the veth and the host routes. Returns what was removed."""
    removed = []
    if netns_exists():
        run(["ip", "netns", "del", L.NETNS])
        removed.append(f"netns {L.NETNS}")
    if Path(f"/sys/class/net/{L.VETH_HOST}").exists():
        run(["ip", "link", "del", L.VETH_HOST], check=False)
        removed.append(f"link {L.VETH_HOST}")
    for text, _net, route in netcheck.route_destinations(host_routes()):
        if text in (*L.ROUTED_CIDRS, L.GUARD_CIDR) and route.get("table", "main") == "main":
            kind = ["unreachable"] if route.get("type") == "unreachable" else []
            run(["ip", "route", "del", *kind, text], check=False)
            removed.append(f"route {' '.join(kind)} {text}".replace("  ", " "))
    return removed
