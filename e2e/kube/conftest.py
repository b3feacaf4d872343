"""The e2e/kube tests share one operator install on the session's real cluster
(:mod:`strom.testing.kube.fixture` starts the cluster; :mod:`strom.testing.kube.platform`
installs the chart and runs host clients through the cluster's DNS)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from strom.testing.kube.fixture import KubeCluster
from strom.testing.kube.platform import EXAMPLES, Platform, wait_for


@pytest.fixture(scope="session")
def strom_platform(kube_cluster: KubeCluster,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    p = Platform.install(kube_cluster, tmp_path_factory.mktemp("platform"))
    yield p
    print(f"platform timings: {json.dumps({k: round(v, 1) for k, v in p.timings.items()})}")


@pytest.fixture(scope="session")
def example_cluster(strom_platform: Platform) -> Platform:
    """``crds/examples/cluster-3-brokers.yaml`` applied unchanged, its 3 pods Ready and the
    StromCluster Ready (shared by the example and pod-loss tests)."""
    kube = strom_platform
    started = time.monotonic()
    kube.kubectl("apply", "-f", str(EXAMPLES / "cluster-3-brokers.yaml"))
    wait_for("3 broker pods Ready", lambda: kube.get("statefulset", "my-cluster-broker")
             .get("status", {}).get("readyReplicas") == 3, 420, every=2)
    kube.timings["example cluster: apply to 3 pods Ready"] = time.monotonic() - started
    wait_for("StromCluster my-cluster Ready",
             lambda: kube.ready("stromcluster", "my-cluster"), 180, every=2)
    kube.timings["example cluster: apply to StromCluster Ready"] = time.monotonic() - started
    return kube
