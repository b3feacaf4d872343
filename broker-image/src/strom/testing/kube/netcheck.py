"""Checks, as pure functions over ``ip`` output, that the cluster's address ranges collide with
nothing on this machine and that the node has no way out.

``up`` runs :func:`conflicts` before it adds a single route (the host's routes, policy rules
and resolvers must not overlap the guard block), and :func:`node_escapes` on the node's
routing table before any process starts in it (no default route, nothing routed outside the
cluster's own ranges).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Sequence
from typing import Any

from strom.testing.kube import layout as L

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _net(text: str) -> Network | None:
    if text in ("default", "0.0.0.0/0", "::/0"):
        return ipaddress.ip_network("0.0.0.0/0") if text != "::/0" else ipaddress.ip_network(
            "::/0")
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def route_destinations(routes_json: str) -> list[tuple[str, Network, dict[str, Any]]]:
    """``ip -j route show table all`` -> (text, network, route) for every route with a
    destination (the default routes included, as 0.0.0.0/0)."""
    out = []
    for route in json.loads(routes_json or "[]"):
        dst = str(route.get("dst", ""))
        net = _net(dst)
        if net is not None:
            out.append((dst, net, route))
    return out


def resolvers(resolv_conf: str) -> list[str]:
    return [line.split()[1] for line in resolv_conf.splitlines()
            if line.strip().startswith("nameserver") and len(line.split()) > 1]


def conflicts(routes_json: str, rules_json: str, resolv_conf: str,
              ours: Iterable[str] = (), guard: str = L.GUARD_CIDR) -> list[str]:
    """Everything on the host that overlaps ``guard``: routes (other than the default route and
    the ones listed in ``ours``, i.e. ours from an earlier run), policy-rule selectors and
    resolvers. Empty means the ranges are free."""
    block = ipaddress.ip_network(guard)
    mine = set(ours)
    found = []
    for text, net, route in route_destinations(routes_json):
        if net.prefixlen == 0 or net.version != block.version or text in mine:
            continue
        if route.get("table") == "local" and net.overlaps(block):
            found.append(f"local address route {text}")
        elif net.overlaps(block):
            found.append(f"route {text} ({route.get('dev') or route.get('type', '')})")
    for rule in json.loads(rules_json or "[]"):
        for key in ("src", "dst"):
            value = rule.get(key)
            if value and value != "all":
                bits = rule.get(f"{key}len")
                sel = _net(f"{value}/{bits}" if bits is not None else str(value))
                if sel is not None and sel.version == 4 and sel.overlaps(block):
                    found.append(f"policy rule {key} {value}")
    for ns in resolvers(resolv_conf):
        try:
            if ipaddress.ip_address(ns) in block:
                found.append(f"resolver {ns}")
        except ValueError:
            continue
    return found


def node_escapes(routes_json: str, allowed: Sequence[str] = (L.LINK_CIDR, L.CLUSTER_CIDR)
                 ) -> list[str]:
    """Routes in the node's namespace that could carry a packet off the cluster: a default
    route, or any route whose destination is not inside ``allowed`` (local/broadcast routes of
    its own addresses are fine). Empty means nothing can leave."""
    nets = [ipaddress.ip_network(a) for a in allowed]
    found = []
    for text, net, route in route_destinations(routes_json):
        if route.get("type") in ("unreachable", "prohibit", "blackhole"):
            continue
        if net.version == 6:
            if not (route.get("table") == "local" or net.is_link_local or net.is_multicast
                    or net.is_loopback):
                found.append(f"IPv6 route {text}")
            continue
        if route.get("table") == "local":
            continue
        if net.prefixlen == 0:
            found.append(f"default route via {route.get('gateway', route.get('dev'))}")
        elif not any(net.subnet_of(a) for a in nets if a.version == 4):
            found.append(f"route {text} dev {route.get('dev')}")
    return found
