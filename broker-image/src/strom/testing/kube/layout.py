"""Where the single-node cluster lives: names, address ranges, ports and paths, in one place.

Every name the cluster creates on the machine starts with ``kubestrom`` (network namespace, veth
pair, cgroups, directories), so ``down`` can find and remove exactly what ``up`` made and nothing
else. The address ranges sit inside 100.64.0.0/10 (shared address space, RFC 6598), which this
machine's routes and resolver do not use; ``up`` checks that again before it adds anything
(:mod:`strom.testing.kube.netcheck`). The pod, Service and link ranges together fit in
``GUARD_CIDR``, which the host routes ``unreachable`` whenever the node is not there to take it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

NAME = "kubestrom"
NETNS = NAME
VETH_HOST = "kubestrom-h"
VETH_NODE = "kubestrom-n"
NODE_NAME = "kubestrom-node"
BRIDGE = "kubestrom0"

#: Everything below, as one block the host routes ``unreachable`` (100.72.0.0 - 100.75.255.255).
GUARD_CIDR = "100.72.0.0/14"
CLUSTER_CIDR = "100.72.0.0/16"
POD_CIDR = "100.72.0.0/24"
POD_GATEWAY = "100.72.0.1"
SERVICE_CIDR = "100.73.0.0/16"
API_SERVICE_IP = "100.73.0.1"
DNS_SERVICE_IP = "100.73.0.10"
LINK_CIDR = "100.74.255.0/30"
HOST_IP = "100.74.255.1"
NODE_IP = "100.74.255.2"
LINK_PREFIX = 30
#: The ranges the host routes into the node (everything else in GUARD_CIDR stays unreachable).
ROUTED_CIDRS = (CLUSTER_CIDR, SERVICE_CIDR)

API_PORT = 6443
CLUSTER_DOMAIN = "cluster.local"
KUBERNETES_VERSION = "v1.34.4"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
COREDNS_IMAGE = "strom.local/coredns:v1.12.4"
STORAGE_CLASS = "standard"
PROVISIONER_NAME = "strom.local/hostpath"

#: Kernel settings kubelet rewrites (protectKernelDefaults: false); ``up`` records them first
#: and ``down`` puts them back.
KERNEL_SETTINGS = (
    "vm/overcommit_memory",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)


@dataclass(frozen=True)
class Paths:
    """Files of one cluster. ``home`` holds state, configs, certificates and data;
    ``run`` holds sockets and runtime state (both are removed by ``down``)."""

    home: Path
    run: Path

    @classmethod
    def default(cls) -> Paths:
        return cls(Path(os.environ.get("STROM_KUBE_HOME", f"/var/lib/{NAME}")),
                   Path(os.environ.get("STROM_KUBE_RUN", f"/run/{NAME}")))

    @property
    def state_file(self) -> Path:
        return self.home / "state.json"

    @property
    def pki(self) -> Path:
        return self.home / "pki"

    @property
    def conf(self) -> Path:
        return self.home / "conf"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.home / "admin.kubeconfig"

    @property
    def containerd_socket(self) -> Path:
        return self.run / "containerd" / "containerd.sock"

    @property
    def volumes(self) -> Path:
        return self.home / "volumes"

    def kubeconfig(self, user: str) -> Path:
        return self.conf / f"{user}.kubeconfig"
