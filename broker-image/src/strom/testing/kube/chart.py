"""The Strom chart installed on the test cluster: ``with operator_release(kube) as kube: ...``.

``helm install --wait`` of ``charts/strom`` with the operator image the session loaded
(:data:`strom.testing.kube.fixture.IMAGES`, ``imagePullPolicy: Never``); returns when the operator
pod is Ready and the API server reaches the admission webhook (:func:`wait_webhook_reachable`),
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
from strom.testing.waits import wait_until

CHART = REPO / "charts" / "strom"
RELEASE, NAMESPACE = "strom", "strom-system"

#: A StromCluster the admission webhook accepts, only ever applied as a server-side dry run.
_PROBE = """apiVersion: strom.dev/v1alpha1
kind: StromCluster
metadata: {name: webhook-probe, namespace: default}
spec:
  image: strom.local/not-on-the-node:none
  imagePullPolicy: Never
  brokers: {replicas: 1}
  storage: {size: 64Mi}
  resources: {requests: {cpu: 10m, memory: 32Mi}}
"""


def wait_webhook_reachable(kube: KubeCluster, timeout_s: float = 120.0) -> float:
    """Wait until a server-side dry run of a StromCluster passes the admission webhook (at
    once when the chart runs none); the seconds it took.

    Why: ``helm install --wait`` returns when the operator pod is Ready, but the API server
    calls the webhook through its Service's endpoints, which can lag: ci22's e2e/kube tests
    failed on "no endpoints available for service strom-webhook" right after an install that
    took 2.4 s (the same release had just been uninstalled by the test before). Any other
    refusal fails at once with kubectl's message; a webhook unreachable for ``timeout_s``
    fails naming it."""
    def passes() -> bool:
        done = kube.run("kubectl", "apply", "--dry-run=server", "-f", "-", stdin=_PROBE,
                        timeout=60)
        if done.returncode != 0 and "failed calling webhook" not in done.stderr:
            raise AssertionError(f"a server-side dry run of a StromCluster was refused: "
                                 f"{done.stderr.strip()}")
        return done.returncode == 0

    return wait_until(passes, timeout_s, interval_s=0.5,
                      what="the API server to reach the operator's admission webhook")


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
    wait_webhook_reachable(kube)
    kube.timings[f"helm install {release}"] = round(time.monotonic() - t, 1)
    try:
        yield kube
    finally:
        kube.helm("uninstall", release, "-n", namespace, "--wait", "--timeout=5m")
