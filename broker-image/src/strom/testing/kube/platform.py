"""Strom as a platform team runs it, on the session's cluster: the operator installed with the
chart, StromClusters from manifests, and clients on the host that reach the cluster's Services.

:class:`Platform` wraps :class:`~strom.testing.kube.fixture.KubeCluster` with what the e2e/kube
tests share: installing the operator once (the chart, the image built here), the docs' example
image name tagged onto the broker image (no registry is reachable, the node pulls nothing, so
``crds/examples`` apply unchanged), polling with a bounded wait that names what it waited for,
and :meth:`Platform.host`, which runs a command on the host in a private mount namespace whose
``/etc/resolv.conf`` names the cluster's DNS Service: the bootstrap Service and the brokers'
advertised pod names resolve as inside the cluster, and every address they resolve to is in the
cluster's ranges, which the host routes only into the node's network namespace.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.testing.kube import layout as L
from strom.testing.kube.chart import wait_webhook_reachable
from strom.testing.kube.fixture import REPO, KubeCluster

EXAMPLES = REPO / "crds" / "examples"
EXAMPLE_BROKER_IMAGE = "ghcr.io/strom/strom-broker:0.1.0"
RELEASE, RELEASE_NS = "strom", "strom-system"
RESOLV = (f"nameserver {L.DNS_SERVICE_IP}\n"
          f"search default.svc.{L.CLUSTER_DOMAIN} svc.{L.CLUSTER_DOMAIN} {L.CLUSTER_DOMAIN}\n"
          "options ndots:5 timeout:1 attempts:3\n")
#: The operator's replication throttle while partitions move (chart value
#: ``admin.rebalanceThrottleBytesPerSec``): low enough that a move is visibly throttled.
THROTTLE_BYTES_PER_SEC = 2 * 1024 * 1024


def wait_for(what: str, probe: Callable[[], Any], timeout: float, every: float = 1.0) -> Any:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` after ``timeout``
    with the last answer (or error)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (AssertionError, subprocess.SubprocessError, ValueError, KeyError) as err:
            last = err
        else:
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {str(last)[:2000]})")


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    """A status condition by type ({} if absent)."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return {}


@dataclass
class Platform:
    cluster: KubeCluster
    resolv: Path
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def install(cls, cluster: KubeCluster, workdir: Path) -> Platform:
        """Tag the example image, install the operator chart (waits until the API server
        reaches its admission webhook), return the platform."""
        paths = cluster.require_local_node()
        resolv = workdir / "resolv.conf"
        resolv.write_text(RESOLV)
        platform = cls(cluster, resolv)
        subprocess.run(["ctr", "--address", str(paths.containerd_socket), "-n", "k8s.io",
                        "images", "tag", "--force", cluster.image("broker"),
                        EXAMPLE_BROKER_IMAGE], check=True, capture_output=True, timeout=60)
        started = time.monotonic()
        repo, tag = cluster.image("operator").split(":")
        cluster.helm("upgrade", "--install", RELEASE, str(REPO / "charts" / "strom"),
                     "-n", RELEASE_NS, "--create-namespace", f"--set=image.repository={repo}",
                     f"--set=image.tag={tag}", "--set=image.pullPolicy=Never",
                     f"--set=admin.rebalanceThrottleBytesPerSec={THROTTLE_BYTES_PER_SEC}",
                     "--wait", "--timeout=5m", timeout=400)
        platform.timings["webhook reachable after helm"] = wait_webhook_reachable(cluster)
        platform.timings["operator installed"] = time.monotonic() - started
        return platform

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        return self.cluster.kubectl(*args, stdin=stdin, timeout=timeout)

    def get(self, *args: str) -> dict[str, Any]:
        out: dict[str, Any] = self.cluster.kubectl_json("get", *args)
        return out

    def ready(self, kind: str, name: str) -> dict[str, Any] | None:
        """The object when its Ready condition is True, else None."""
        obj = self.get(kind, name)
        return obj if condition(obj, "Ready").get("status") == "True" else None

    @staticmethod
    def _env() -> dict[str, str]:
        """This environment without proxy settings: host clients talk to the cluster's
        addresses directly, never through a proxy elsewhere."""
        return {k: v for k, v in os.environ.items()
                if k.lower() not in ("http_proxy", "https_proxy", "grpc_proxy", "all_proxy")}

    def _wrap(self, argv: list[str]) -> list[str]:
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount --bind "$0" /etc/resolv.conf && exec "$@"', str(self.resolv), *argv]

    def host(self, argv: list[str], *, timeout: float = 300, stdin: str | None = None,
             check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on the host with the cluster's DNS as its resolver."""
        proc = subprocess.run(self._wrap(argv), input=stdin, capture_output=True, text=True,
                              timeout=timeout, check=False, env=self._env())
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} (exit {proc.returncode}): "
                                 f"{proc.stderr.strip()[-3000:]}")
        return proc

    def popen_host(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[str]:
        """Start ``argv`` on the host with the cluster's DNS as its resolver."""
        return subprocess.Popen(self._wrap(argv), text=True, env=self._env(), **kwargs)

    def strom_json(self, bootstrap: str, *args: str) -> Any:
        """``strom ARGS -o json`` against ``bootstrap``, from the host."""
        out = self.host([str(strom_cli()), *args, "-o", "json",
                         "--bootstrap-server", bootstrap]).stdout
        return json.loads(out)


def strom_cli() -> Path:
    import sys

    return Path(sys.executable).with_name("strom")
