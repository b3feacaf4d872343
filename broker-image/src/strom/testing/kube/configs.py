"""The cluster's configuration, rendered as data: certificates to issue, kubeconfigs, each
component's command line and config file, containerd's and CNI's configs, and the add-ons
(CoreDNS, the StorageClass, the provisioner's RBAC). Pure functions of
:class:`~strom.testing.kube.layout.Paths` and the ports chosen at start: no I/O here, so the
flags can be read and tested without a cluster.

Flags follow Kubernetes' ``hack/local-up-cluster.sh`` and kubeadm's defaults, with what this
machine needs (measured, see docs/decisions.md): cgroup v1 (``cgroupDriver: cgroupfs``,
``failCgroupV1: false``), no CAP_SYS_RESOURCE (``oomScoreAdj`` 0, containerd's
``restrict_oom_score_adj``), no registry (a locally built pause image), and no way out of the
node (CoreDNS without ``forward``, pods resolving only cluster names).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from strom.testing.kube import layout as L
from strom.testing.kube.layout import Paths
from strom.testing.kube.pki import CertSpec

API_URL = f"https://{L.HOST_IP}:{L.API_PORT}"

#: Client identities: kubeconfig name -> (CN, groups).
USERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "admin": ("kubernetes-admin", ("system:masters",)),
    "controller-manager": ("system:kube-controller-manager", ()),
    "scheduler": ("system:kube-scheduler", ()),
    "kubelet": (f"system:node:{L.NODE_NAME}", ("system:nodes",)),
    "kube-proxy": ("system:kube-proxy", ()),
    "provisioner": ("strom:hostpath-provisioner", ()),
}


def cert_specs() -> list[CertSpec]:
    """Every certificate the cluster uses (the CAs and the SA key are made beside them)."""
    specs = [
        CertSpec("apiserver", "kube-apiserver", server=True,
                 dns_names=("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                            f"kubernetes.default.svc.{L.CLUSTER_DOMAIN}", "localhost"),
                 ip_addresses=(L.HOST_IP, L.API_SERVICE_IP, "127.0.0.1")),
        CertSpec("apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                 ("system:masters",), client=True),
        CertSpec("front-proxy-client", "front-proxy-client", client=True),
        CertSpec("kubelet-server", L.NODE_NAME, server=True, dns_names=(L.NODE_NAME,),
                 ip_addresses=(L.NODE_IP,)),
    ]
    specs += [CertSpec(f"user-{user}", cn, groups, client=True)
              for user, (cn, groups) in USERS.items()]
    return specs


def kubeconfig(paths: Paths, user: str) -> str:
    """A kubeconfig for ``user`` (a key of :data:`USERS`) with its client certificate."""
    pki = paths.pki
    doc = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": L.NAME, "cluster": {
            "server": API_URL, "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": user, "user": {
            "client-certificate": str(pki / f"user-{user}.crt"),
            "client-key": str(pki / f"user-{user}.key")}}],
        "contexts": [{"name": L.NAME, "context": {"cluster": L.NAME, "user": user}}],
        "current-context": L.NAME,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def etcd_args(binary: Path, paths: Paths, client_port: int, peer_port: int) -> list[str]:
    client = f"http://127.0.0.1:{client_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    return [str(binary), "--name", L.NAME, "--data-dir", str(paths.home / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{L.NAME}={peer}", "--initial-cluster-state", "new",
            "--log-level", "warn",
            "--quota-backend-bytes", str(2 * 1024**3)]


def apiserver_args(binary: Path, paths: Paths, etcd_port: int) -> list[str]:
    pki = paths.pki
    return [
        str(binary),
        f"--advertise-address={L.HOST_IP}", f"--bind-address={L.HOST_IP}",
        f"--secure-port={L.API_PORT}",
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        f"--service-cluster-ip-range={L.SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        # The default plugins stay on (NamespaceLifecycle, LimitRanger, ServiceAccount,
        # DefaultStorageClass, ResourceQuota, PodSecurity, the webhooks, ...); NodeRestriction
        # is the one kubeadm adds.
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        "--kubelet-preferred-address-types=InternalIP",
        f"--service-account-issuer=https://kubernetes.default.svc.{L.CLUSTER_DOMAIN}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        # The aggregation layer (front proxy), as kubeadm configures it.
        f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-username-headers=X-Remote-User",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        "--enable-aggregator-routing=true",
        "--profiling=false",
        "--v=1",
    ]


def controller_manager_args(binary: Path, paths: Paths, port: int) -> list[str]:
    pki = paths.pki
    kc = paths.kubeconfig("controller-manager")
    return [
        str(binary), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        "--bind-address=127.0.0.1", f"--secure-port={port}",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}",
        f"--cluster-signing-key-file={pki / 'ca.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        "--use-service-account-credentials=true",
        "--controllers=*,bootstrapsigner,tokencleaner",
        f"--service-cluster-ip-range={L.SERVICE_CIDR}", f"--cluster-cidr={L.CLUSTER_CIDR}",
        "--allocate-node-cidrs=false", "--leader-elect=false", "--profiling=false", "--v=1",
    ]


def scheduler_args(binary: Path, paths: Paths, port: int) -> list[str]:
    kc = paths.kubeconfig("scheduler")
    return [str(binary), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}", "--bind-address=127.0.0.1",
            f"--secure-port={port}", "--leader-elect=false", "--profiling=false", "--v=1"]


def containerd_config(paths: Paths) -> str:
    """containerd 1.6 (Debian) with its CRI plugin, state kept under the cluster's paths."""
    run = paths.run
    return f"""version = 2
root = "{paths.home / 'containerd'}"
state = "{run / 'containerd'}"
oom_score = 0

[grpc]
  address = "{paths.containerd_socket}"

[ttrpc]
  address = "{paths.containerd_socket}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{paths.home / 'containerd-opt'}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{L.PAUSE_IMAGE}"
  # No CAP_SYS_RESOURCE here: without this the sandbox fails with
  # "nsexec: failed to update /proc/self/oom_score_adj: Permission denied".
  restrict_oom_score_adj = true
  enable_unprivileged_ports = true
  # Pod network namespaces under our state dir, not beside `ip netns`' in /run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{run / 'runc'}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{paths.conf / 'cni'}"
"""


def cni_conflist(paths: Paths) -> str:
    """A bridge network for the pods; their default route ends at the node, which has none."""
    doc = {
        "cniVersion": "0.4.0", "name": L.NAME,
        "plugins": [
            {"type": "bridge", "bridge": L.BRIDGE, "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(paths.home / "cni-ipam"),
                      "ranges": [[{"subnet": L.POD_CIDR, "gateway": L.POD_GATEWAY}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return json.dumps(doc, indent=2)


def kubelet_config(paths: Paths) -> str:
    pki = paths.pki
    doc: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        # cgroup v1 on this machine: kubelet 1.34 refuses it unless told otherwise.
        "cgroupDriver": "cgroupfs", "failCgroupV1": False, "cgroupRoot": f"/{L.NAME}",
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "address": L.NODE_IP, "port": 10250, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki / "kubelet-server.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet-server.key"),
        "clusterDomain": L.CLUSTER_DOMAIN, "clusterDNS": [L.DNS_SERVICE_IP],
        "resolvConf": str(paths.conf / "node-resolv.conf"),
        "failSwapOn": False, "protectKernelDefaults": False,
        "podLogsDir": str(paths.home / "pod-logs"),
        # No CAP_SYS_RESOURCE: a negative oom_score_adj is refused.
        "oomScoreAdj": 0,
        # Images are loaded by hand (no registry): never garbage-collect them.
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%",
                         "imagefs.available": "2%", "nodefs.inodesFree": "2%"},
        "serializeImagePulls": False, "rotateCertificates": False,
        "registerNode": True, "maxPods": 110,
    }
    return json.dumps(doc, indent=2)


def kubelet_args(binary: Path, paths: Paths) -> list[str]:
    return [str(binary), f"--config={paths.conf / 'kubelet.json'}",
            f"--kubeconfig={paths.kubeconfig('kubelet')}",
            f"--root-dir={paths.home / 'kubelet'}",
            f"--hostname-override={L.NODE_NAME}", f"--node-ip={L.NODE_IP}", "--v=1"]


def kube_proxy_config(paths: Paths) -> str:
    doc = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(paths.kubeconfig("kube-proxy"))},
        "mode": "iptables", "clusterCIDR": L.CLUSTER_CIDR,
        "hostnameOverride": L.NODE_NAME, "bindAddress": L.NODE_IP,
        "metricsBindAddress": "127.0.0.1:10249", "healthzBindAddress": f"{L.NODE_IP}:10256",
        "oomScoreAdj": 0,
        "iptables": {"localhostNodePorts": False},
        # Leave the (machine-wide) conntrack settings alone.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                      "tcpCloseWaitTimeout": "0s"},
    }
    return json.dumps(doc, indent=2)


def kube_proxy_args(binary: Path, paths: Paths) -> list[str]:
    return [str(binary), f"--config={paths.conf / 'kube-proxy.json'}", "--v=1"]


def node_resolv_conf() -> str:
    """What pods with ``dnsPolicy: Default`` (and kubelet's search path) see: the cluster's
    DNS, never the host's resolver (it is unreachable from the node anyway)."""
    return f"nameserver {L.DNS_SERVICE_IP}\nsearch {L.CLUSTER_DOMAIN}\n"


COREFILE = f""".:53 {{
    errors
    health {{
        lameduck 5s
    }}
    ready
    kubernetes {L.CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    prometheus :9153
    cache 30
    loop
    reload
    loadbalance
}}
"""


def coredns_manifests() -> list[dict[str, Any]]:
    """CoreDNS as a cluster runs it (kube-system, Service ``kube-dns``), from CoreDNS'
    deployment manifest, without ``forward`` (the node has no way out)."""
    labels = {"k8s-app": "kube-dns"}
    meta = {"name": "coredns", "namespace": "kube-system"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "system:coredns"},
         "rules": [
             {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
              "verbs": ["list", "watch"]},
             {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
              "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "system:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "system:coredns"},
         "subjects": [{"kind": "ServiceAccount", **meta}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
         "data": {"Corefile": COREFILE}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {**meta, "labels": labels},
         "spec": {
             "replicas": 1, "selector": {"matchLabels": labels},
             "template": {"metadata": {"labels": labels}, "spec": {
                 "serviceAccountName": "coredns", "priorityClassName": "system-cluster-critical",
                 "dnsPolicy": "Default",
                 "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                 "containers": [{
                     "name": "coredns", "image": L.COREDNS_IMAGE,
                     "imagePullPolicy": "Never",
                     "args": ["-conf", "/etc/coredns/Corefile"],
                     "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns",
                                       "readOnly": True}],
                     "ports": [{"containerPort": 53, "name": "dns", "protocol": "UDP"},
                               {"containerPort": 53, "name": "dns-tcp", "protocol": "TCP"},
                               {"containerPort": 9153, "name": "metrics", "protocol": "TCP"}],
                     "resources": {"requests": {"cpu": "50m", "memory": "40Mi"},
                                   "limits": {"memory": "170Mi"}},
                     "livenessProbe": {"httpGet": {"path": "/health", "port": 8080},
                                       "initialDelaySeconds": 10, "periodSeconds": 10},
                     "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181},
                                        "periodSeconds": 2},
                 }],
                 "volumes": [{"name": "config", "configMap": {
                     "name": "coredns", "items": [{"key": "Corefile", "path": "Corefile"}]}}],
             }}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": "kube-system",
                      "labels": {**labels, "kubernetes.io/name": "CoreDNS"}},
         "spec": {"selector": labels, "clusterIP": L.DNS_SERVICE_IP,
                  "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                            {"name": "metrics", "port": 9153, "protocol": "TCP"}]}},
    ]


def storage_manifests() -> list[dict[str, Any]]:
    """StorageClass ``standard`` (the default) and the provisioner's own RBAC."""
    user = USERS["provisioner"][0]
    return [
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
         "metadata": {"name": L.STORAGE_CLASS, "annotations": {
             "storageclass.kubernetes.io/is-default-class": "true"}},
         "provisioner": L.PROVISIONER_NAME, "reclaimPolicy": "Delete",
         "volumeBindingMode": "WaitForFirstConsumer"},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "strom:hostpath-provisioner"},
         "rules": [
             {"apiGroups": [""], "resources": ["persistentvolumes"],
              "verbs": ["get", "list", "watch", "create", "delete"]},
             {"apiGroups": [""], "resources": ["persistentvolumeclaims"],
              "verbs": ["get", "list", "watch"]},
             {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"],
              "verbs": ["get", "list", "watch"]},
             {"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
              "verbs": ["create", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "strom:hostpath-provisioner"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "strom:hostpath-provisioner"},
         "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io",
                       "name": user}]},
    ]


def dump_all(docs: Sequence[Mapping[str, Any]]) -> str:
    return yaml.safe_dump_all(list(docs), sort_keys=False)
