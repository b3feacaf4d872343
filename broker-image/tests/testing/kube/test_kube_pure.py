"""The cluster's pure parts: range checks over `ip` output, certificates, configs, the OCI
archive, the DNS probe's packets and the provisioner's decisions (no cluster needed)."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import tarfile
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from strom.testing.kube import cgroups, configs, dnsprobe, netcheck, oci, pki, provisioner
from strom.testing.kube import layout as L
from strom.testing.kube.layout import Paths

HOST_ROUTES = json.dumps([
    {"dst": "default", "gateway": "192.0.2.1", "dev": "eth0"},
    {"dst": "192.0.2.0/24", "dev": "eth0"},
    {"type": "local", "dst": "127.0.0.0/8", "dev": "lo", "table": "local"},
])
RESOLV = "nameserver 10.255.255.53\n"


def test_free_ranges_pass_and_each_kind_of_overlap_is_named() -> None:
    assert netcheck.conflicts(HOST_ROUTES, "[]", RESOLV) == []
    routes = [*json.loads(HOST_ROUTES), {"dst": "100.64.0.0/10", "dev": "tailscale0"}]
    assert netcheck.conflicts(json.dumps(routes), "[]", RESOLV) == [
        "route 100.64.0.0/10 (tailscale0)"]
    rules = json.dumps([{"priority": 5, "src": "100.73.1.0", "srclen": 24, "table": "7"}])
    assert netcheck.conflicts(HOST_ROUTES, rules, RESOLV) == ["policy rule src 100.73.1.0"]
    assert netcheck.conflicts(HOST_ROUTES, "[]", "nameserver 100.73.0.10\n") == [
        "resolver 100.73.0.10"]


def test_the_chosen_ranges_nest_inside_the_guard_block() -> None:
    import ipaddress

    guard = ipaddress.ip_network(L.GUARD_CIDR)
    nets = [ipaddress.ip_network(c) for c in (L.CLUSTER_CIDR, L.SERVICE_CIDR, L.LINK_CIDR)]
    assert all(n.subnet_of(guard) for n in nets)
    assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1:])
    assert ipaddress.ip_address(L.DNS_SERVICE_IP) in nets[1]


def test_a_default_route_or_a_foreign_route_in_the_node_is_an_escape() -> None:
    closed = [{"dst": L.LINK_CIDR, "dev": L.VETH_NODE},
              {"dst": L.POD_CIDR, "dev": L.BRIDGE},
              {"type": "local", "dst": L.NODE_IP, "table": "local", "dev": L.VETH_NODE},
              {"dst": "fe80::/64", "dev": L.VETH_NODE}]
    assert netcheck.node_escapes(json.dumps(closed)) == []
    leaky = [*closed, {"dst": "default", "gateway": "100.74.255.1", "dev": L.VETH_NODE}]
    assert netcheck.node_escapes(json.dumps(leaky)) == ["default route via 100.74.255.1"]
    foreign = [*closed, {"dst": "192.0.2.0/24", "dev": L.VETH_NODE},
               {"dst": "2001:db8::/32", "dev": L.VETH_NODE}]
    assert netcheck.node_escapes(json.dumps(foreign)) == [
        f"route 192.0.2.0/24 dev {L.VETH_NODE}", "IPv6 route 2001:db8::/32"]


def test_certificates_chain_to_the_ca_and_carry_identity_and_sans(tmp_path: Path) -> None:
    pki.write_cluster_pki(tmp_path, configs.cert_specs())
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    kubelet = pki.load(tmp_path, "user-kubelet")
    kubelet.cert.verify_directly_issued_by(ca)
    subject = kubelet.cert.subject.rfc4514_string()
    assert "CN=system:node:kubestrom-node" in subject and "O=system:nodes" in subject
    api = pki.load(tmp_path, "apiserver")
    sans = api.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} >= {
        L.HOST_IP, L.API_SERVICE_IP}
    front_ca = x509.load_pem_x509_certificate((tmp_path / "front-proxy-ca.crt").read_bytes())
    pki.load(tmp_path, "front-proxy-client").cert.verify_directly_issued_by(front_ca)
    assert (tmp_path / "sa.key").stat().st_mode & 0o077 == 0
    with pytest.raises(ValueError, match="server, a client or both"):
        pki.issue(pki.make_ca("x"), pki.CertSpec("bad", "bad"))
    assert isinstance(kubelet.key, ec.EllipticCurvePrivateKey)


def test_configs_carry_what_this_machine_needs() -> None:
    paths = Paths(Path("/h"), Path("/r"))
    kubelet = json.loads(configs.kubelet_config(paths))
    assert kubelet["cgroupDriver"] == "cgroupfs" and kubelet["failCgroupV1"] is False
    assert kubelet["clusterDNS"] == [L.DNS_SERVICE_IP] and kubelet["oomScoreAdj"] == 0
    assert "restrict_oom_score_adj = true" in configs.containerd_config(paths)
    assert f'sandbox_image = "{L.PAUSE_IMAGE}"' in configs.containerd_config(paths)
    proxy = json.loads(configs.kube_proxy_config(paths))
    assert proxy["mode"] == "iptables" and proxy["conntrack"]["maxPerCore"] == 0
    api = configs.apiserver_args(Path("/b/kube-apiserver"), paths, 2379)
    assert "--authorization-mode=Node,RBAC" in api
    assert "--enable-admission-plugins=NodeRestriction" in api
    assert any(a.startswith("--requestheader-client-ca-file=") for a in api)
    # No forwarding: nothing in the node may resolve through the host.
    assert "forward" not in configs.COREFILE
    kc = yaml.safe_load(configs.kubeconfig(paths, "kubelet"))
    assert kc["clusters"][0]["cluster"]["server"] == f"https://{L.HOST_IP}:{L.API_PORT}"
    cni = json.loads(configs.cni_conflist(paths))
    assert cni["plugins"][0]["ipMasq"] is False
    kinds = [d["kind"] for d in yaml.safe_load_all(configs.dump_all(
        configs.coredns_manifests()))]
    assert kinds == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap",
                     "Deployment", "Service"]


def test_oci_archive_is_a_consistent_image_layout(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF not really")
    data = oci.binary_image("registry.k8s.io/pause:3.10", binary)
    assert data == oci.binary_image("registry.k8s.io/pause:3.10", binary)  # reproducible
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]
    for name, blob in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(blob).hexdigest() == name.rsplit("/", 1)[1]
    index = json.loads(files["index.json"])
    desc = index["manifests"][0]
    assert desc["annotations"]["io.containerd.image.name"] == "registry.k8s.io/pause:3.10"
    manifest = json.loads(files[f"blobs/sha256/{desc['digest'].split(':')[1]}"])
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"])
    assert config["config"]["Entrypoint"] == ["/pause"]
    layer = files[f"blobs/sha256/{manifest['layers'][0]['digest'].split(':')[1]}"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        member = tar.getmember("pause")
        assert member.mode == 0o755
        assert tar.extractfile(member).read() == binary.read_bytes()  # type: ignore[union-attr]


def test_dns_query_and_answer_round_trip() -> None:
    q = dnsprobe.query("kubernetes.default.svc.cluster.local", 0x1234)
    answer = (q[:2] + struct.pack("!HHHHH", 0x8180, 1, 1, 0, 0) + q[12:]
              + b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 30, 4) + bytes([100, 73, 0, 1]))
    assert dnsprobe.parse_a(answer, 0x1234) == ["100.73.0.1"]
    with pytest.raises(dnsprobe.DnsError, match="id"):
        dnsprobe.parse_a(answer, 0x1235)
    nx = q[:2] + struct.pack("!HHHHH", 0x8183, 1, 0, 0, 0) + q[12:]
    with pytest.raises(dnsprobe.DnsError, match="rcode 3"):
        dnsprobe.parse_a(nx, 0x1234)


def _pvc(**notes: str) -> dict[str, object]:
    return {"metadata": {"name": "data", "namespace": "ns", "uid": "u-1",
                         "annotations": notes},
            "spec": {"storageClassName": "standard", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Pending"}}


def test_provisioner_serves_only_its_own_placed_claims_and_deletes_only_its_dirs() -> None:
    ours = {"volume.kubernetes.io/storage-provisioner": L.PROVISIONER_NAME,
            "volume.kubernetes.io/selected-node": L.NODE_NAME}
    assert provisioner.wants_volume(_pvc(**ours))
    assert not provisioner.wants_volume(_pvc(**{**ours, "volume.kubernetes.io/"
                                                "storage-provisioner": "other"}))
    assert not provisioner.wants_volume(_pvc(**{**ours, "volume.kubernetes.io/selected-node":
                                                "elsewhere"}))
    root = Path("/v")
    pv = provisioner.volume_for(_pvc(**ours), root)  # type: ignore[arg-type]
    assert pv["metadata"]["name"] == "pvc-u-1"
    assert pv["spec"]["claimRef"]["uid"] == "u-1"
    assert pv["spec"]["hostPath"]["path"] == "/v/pvc-u-1"
    assert provisioner.volume_dir(pv, root) == Path("/v/pvc-u-1")
    pv["status"] = {"phase": "Released"}
    assert provisioner.should_delete(pv)
    pv["spec"]["hostPath"]["path"] = "/etc"
    assert provisioner.volume_dir(pv, root) is None
    bad = _pvc(**ours)
    bad["spec"] = {"accessModes": ["ReadWriteOnce"]}
    with pytest.raises(ValueError, match=r"spec.resources.requests.storage"):
        provisioner.volume_for(bad, root)  # type: ignore[arg-type]


def test_cgroup_hierarchies_are_every_writable_v1_mount() -> None:
    mounts = "\n".join([
        "cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,relatime,memory 0 0",
        "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,relatime,cpu,cpuacct 0 0",
        "cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0",
        "cgroup /sys/fs/cgroup/pids cgroup ro,relatime,pids 0 0",
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0",
    ])
    assert cgroups.hierarchies(mounts) == [Path("/sys/fs/cgroup/cpu,cpuacct"),
                                           Path("/sys/fs/cgroup/memory"),
                                           Path("/sys/fs/cgroup/systemd")]
    assert Path("/sys/fs/cgroup/unified") in cgroups.hierarchies(mounts, unified=True)
