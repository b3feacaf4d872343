"""The Strom chart installed on the test cluster: ``with operator_release(kube) as kube: ...``.

``helm install --wait`` of ``charts/strom`` with the operator image the session loaded
(:data:`strom.testing.kube.fixture.IMAGES`, ``imagePullPolicy: Never``); returns when the operator
pod is Ready, which with the admission webhook on (the chart's default) means the webhook serves,
so StromCluster/StromTopic objects can be applied at once. ``helm uninstall --wait`` afterwards.
Extra ``--set`` values (e.g. smaller requests for this 2-core node) go in ``sets``.

When the release is already installed (the e2e/kube tests' session-wide operator, when all kube
tests run in one session), it is reused as it is and left installed: a second ``helm install``
of the same release fails ("cannot re-use a name that is still in use"), and uninstalling it
would take the operator away from the tests that installed it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from strom.testing.kube.fixture import REPO, KubeCluster

CHART = REPO / "charts" / "strom"
RELEASE, NAMESPACE = "strom", "strom-system"


@contextlib.contextmanager
def operator_release(kube: KubeCluster, release: str = RELEASE, namespace: str = NAMESPACE,
                     sets: Sequence[str] = (), chart: Path = CHART) -> Iterator[KubeCluster]:
    if kube.run("helm", "status", release, "-n", namespace).returncode == 0:
        kube.timings[f"helm install {release}"] = 0.0  # reused, installed by another fixture
        yield kube
        return
    repo, tag = kube.image("operator").split(":")
    t = time.monotonic()
    kube.helm("install", release, str(chart), "-n", namespace, "--create-namespace",
              f"--set=image.repository={repo}", f"--set=image.tag={tag}",
              "--set=image.pullPolicy=Never", *[f"--set={s}" for s in sets],
              "--wait", "--timeout=5m")
    kube.timings[f"helm install {release}"] = round(time.monotonic() - t, 1)
    try:
        yield kube
    finally:
        kube.helm("uninstall", release, "-n", namespace, "--wait", "--timeout=5m")
