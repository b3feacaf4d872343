"""Real network partitions for process tests: each broker in its own network namespace.

SIGSTOP makes a broker *look* partitioned, but its kernel still completes TCP handshakes and
its sockets stay open; a partition drops every packet both ways while the process runs on. This
module builds, with ``ip`` (root needed), one namespace per broker plus a hub namespace holding
a bridge; every broker namespace and the test's own namespace get a veth to the bridge, with
addresses in 198.18.N.0/24 (RFC 2544's benchmarking range, which this machine routes nowhere;
N is chosen free). Traffic goes only between these addresses. :meth:`PartitionNetwork.cut` sets
a broker's bridge port down (no packet in or out, no RST: connections just go silent),
:meth:`PartitionNetwork.heal` sets it up again. Everything created is named
``<prefix><tag>...`` / ``<prefix>-<tag>-...`` and deleted on exit, also after a failure.

Typical use::

    from strom.testing import netns

    with netns.running_partitionable_cluster(tmp_path, brokers=3, prefix="failover") as c:
        c.network.cut(0)      # broker 0 is cut off from everyone
        c.network.heal(0)
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from strom.testing.broker import STARTUP_TIMEOUT_S, config_from_kwargs
from strom.testing.cluster import REGISTER_TIMEOUT_S, Cluster

__all__ = ["PartitionNetwork", "PartitionedCluster", "running_partitionable_cluster",
           "unavailable"]

#: 198.18.0.0/15 is reserved for benchmarking (RFC 2544): never a real network's address.
_SUPERNET = ipaddress.ip_network("198.18.0.0/15")
_IFNAME_MAX = 15


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check,
                          timeout=30)


def unavailable() -> str | None:
    """Why namespaces cannot be made here (not root, no ``ip``), or None if they can."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    return None


def _used_subnets() -> set[ipaddress.IPv4Network]:
    out = _ip("-4", "-o", "addr", "show", check=False).stdout
    nets: set[ipaddress.IPv4Network] = set()
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            iface = ipaddress.ip_interface(parts[parts.index("inet") + 1])
            nets.add(ipaddress.IPv4Network(iface.network))
    return nets


class PartitionNetwork:
    """Namespaces, a bridge and veths for ``count`` brokers; :meth:`create` / :meth:`delete`."""

    def __init__(self, count: int, prefix: str = "strom") -> None:
        tag = f"{random.randrange(16 ** 3):03x}"
        self.prefix, self.tag, self.count = prefix, tag, count
        if len(f"{prefix}{tag}b{count - 1}") > _IFNAME_MAX:
            raise ValueError(f"prefix {prefix!r} is too long for interface names "
                             f"({_IFNAME_MAX} characters at most with the tag)")
        self.hub = f"{prefix}-{tag}-hub"
        self.namespaces = [f"{prefix}-{tag}-{i}" for i in range(count)]
        self._bridge = f"{prefix}{tag}br"
        self._host_if, self._host_peer = f"{prefix}{tag}h0", f"{prefix}{tag}h1"
        self._broker_if = [f"{prefix}{tag}b{i}" for i in range(count)]
        self._hub_port = [f"{prefix}{tag}p{i}" for i in range(count)]
        used = _used_subnets()
        free = [n for n in _SUPERNET.subnets(new_prefix=24)
                if not any(n.overlaps(u) for u in used)]
        self.subnet = random.choice(free[1:-1])
        hosts = list(self.subnet.hosts())
        self.host_address = str(hosts[0])
        self.addresses = [str(hosts[9 + i]) for i in range(count)]
        self.cut_ids: set[int] = set()
        self._created: list[str] = []

    def create(self) -> PartitionNetwork:
        try:
            self._create()
        except BaseException:
            self.delete()
            raise
        return self

    def _create(self) -> None:
        plen = self.subnet.prefixlen
        _ip("netns", "add", self.hub)
        self._created.append(self.hub)
        _ip("-n", self.hub, "link", "set", "lo", "up")
        _ip("-n", self.hub, "link", "add", self._bridge, "type", "bridge")
        _ip("-n", self.hub, "link", "set", self._bridge, "up")
        _ip("link", "add", self._host_if, "type", "veth", "peer", "name", self._host_peer,
            "netns", self.hub)
        _ip("-n", self.hub, "link", "set", self._host_peer, "master", self._bridge, "up")
        _ip("addr", "add", f"{self.host_address}/{plen}", "dev", self._host_if)
        _ip("link", "set", self._host_if, "up")
        for i, ns in enumerate(self.namespaces):
            _ip("netns", "add", ns)
            self._created.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "add", self._broker_if[i], "type", "veth", "peer", "name",
                self._hub_port[i], "netns", self.hub)
            _ip("-n", self.hub, "link", "set", self._hub_port[i], "master", self._bridge, "up")
            _ip("-n", ns, "addr", "add", f"{self.addresses[i]}/{plen}", "dev",
                self._broker_if[i])
            _ip("-n", ns, "link", "set", self._broker_if[i], "up")

    def cut(self, index: int) -> None:
        """Broker ``index`` loses its link: no packet in or out until :meth:`heal`."""
        _ip("-n", self.hub, "link", "set", self._hub_port[index], "down")
        self.cut_ids.add(index)

    def heal(self, index: int) -> None:
        _ip("-n", self.hub, "link", "set", self._hub_port[index], "up")
        self.cut_ids.discard(index)

    def delete(self) -> None:
        """Remove every namespace (their veths go with them) and the host's veth."""
        _ip("link", "del", self._host_if, check=False)
        for ns in reversed(self._created):
            _ip("netns", "del", ns, check=False)
        self._created.clear()

    def __enter__(self) -> PartitionNetwork:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.delete()


class PartitionedCluster(Cluster):
    """A :class:`Cluster` whose broker ``i`` runs in namespace ``i`` of ``network``."""

    def __init__(self, root: Path | str, network: PartitionNetwork,
                 brokers: int | Sequence[int] = 3, **kwargs: Any) -> None:
        ids = list(range(brokers)) if isinstance(brokers, int) else list(brokers)
        if len(ids) > network.count:
            raise ValueError(f"{len(ids)} brokers but the network has {network.count} slots")
        super().__init__(root, ids,
                         hosts={bid: network.addresses[k] for k, bid in enumerate(ids)},
                         netns={bid: network.namespaces[k] for k, bid in enumerate(ids)},
                         **kwargs)
        self.network = network
        self._slot = {bid: k for k, bid in enumerate(ids)}

    def cut(self, broker_id: int) -> None:
        """Partition broker ``broker_id`` from every other broker and from the test."""
        self.network.cut(self._slot[broker_id])

    def heal(self, broker_id: int) -> None:
        self.network.heal(self._slot[broker_id])

    def live_ids(self) -> list[int]:
        cut = {bid for bid, k in self._slot.items() if k in self.network.cut_ids}
        return [bid for bid in super().live_ids() if bid not in cut]


@contextlib.contextmanager
def running_partitionable_cluster(tmp_path: Path | str, brokers: int = 3, *,
                                  prefix: str = "strom",
                                  config: Mapping[str, object] | None = None,
                                  startup_timeout: float = STARTUP_TIMEOUT_S,
                                  register_timeout: float = REGISTER_TIMEOUT_S,
                                  **settings: object) -> Iterator[PartitionedCluster]:
    """Like :func:`strom.testing.running_cluster`, each broker in its own namespace; the
    namespaces, bridge and veths are deleted afterwards, as are the processes."""
    reason = unavailable()
    if reason is not None:
        raise RuntimeError(f"network namespaces are unavailable: {reason}")
    merged: dict[str, object] = dict(config_from_kwargs(settings))
    merged.update(config or {})
    with PartitionNetwork(brokers, prefix) as network:
        cluster = PartitionedCluster(tmp_path, network, brokers, config=merged,
                                     startup_timeout=startup_timeout,
                                     register_timeout=register_timeout)
        try:
            cluster.start()
            yield cluster
        finally:
            for bid in list(cluster.brokers):
                with contextlib.suppress(Exception):
                    cluster.heal(bid)
            cluster.stop()
