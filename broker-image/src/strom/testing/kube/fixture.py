"""The pytest fixture ``kube_cluster``: ONE real single-node Kubernetes per pytest session,
shared by every test marked ``kube`` in any directory.

Loaded as a plugin for the whole suite (``-p strom.testing.kube.fixture`` in the root
``pyproject.toml``'s ``addopts``), so a test anywhere only asks for the fixture::

    pytestmark = [pytest.mark.kube, pytest.mark.integration]

    def test_something(kube_cluster: KubeCluster) -> None:
        kube_cluster.kubectl("apply", "-f", "-", stdin=manifest)
        kube_cluster.helm("install", ...)

What a session gets, in this order:

1. **The machine-wide lock** ``/tmp/kubestrom.lock`` (:mod:`strom.testing.kube.lock`): exclusive
   ``flock`` for the whole session, waiting at most ``STROM_KUBE_LOCK_WAIT`` seconds (default
   3600) and then failing with the holder's PID and command line. Running pytest under
   ``flock -w 5400 /tmp/kubestrom.lock ...`` works too (the inherited lock is reused).
2. **The binaries**: ``kube/build.sh`` (pinned versions, cached in ``~/.cache/strom/kube``; a
   no-op when built), or ``$STROM_KUBE_BIN``.
3. **The cluster**: :func:`strom.testing.kube.cluster.up` (cleans a crashed earlier one first).
4. **The images**: ``kube/images.sh`` builds the broker, operator and Spark images (buildah,
   cached layers) and imports them into the node's containerd; pods use them with
   ``imagePullPolicy: Never`` (:data:`IMAGES` names them).
5. At session end: ``down``, then a check that nothing is left (namespace, routes, cgroups,
   mounts, files, kernel settings, processes); anything left fails the session's last test
   teardown. The lock is released last.

Steps 1-4 run once, when collection ends and at least one selected test uses the fixture, so
their time (minutes on a cold machine) is not charged to the first test's ``timeout``. A failure
there is reported by every test that asks for the fixture, with the reason. Without root, Go or
the Debian packages the tests skip on a developer machine and fail under ``CI=true``.

Against another cluster (``kind`` in ``.github/workflows/e2e.yml``): set ``STROM_KUBE_EXTERNAL=1``
and ``KUBECONFIG``; kubectl and helm come from ``PATH``, nothing is started, locked or stopped,
and the images must already be on its nodes (``kind load``). Tests that need this machine's node
itself call :meth:`KubeCluster.require_local_node`.

Not for ``pytest -n``: the cluster is one per machine (run the kube tests serially).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from strom.testing.kube import cluster, lock
from strom.testing.kube.layout import Paths
from strom.testing.tools import in_ci

REPO = Path(__file__).resolve().parents[5]
FIXTURE = "kube_cluster"
TAG = os.environ.get("STROM_IMAGE_TAG", "dev")
#: The images ``kube/images.sh`` builds and loads, by role (repository, tag).
IMAGES = {
    "broker": ("strom.local/strom", TAG),
    "operator": ("strom.local/strom-operator", TAG),
    "spark": ("strom.local/strom-spark", TAG),
}
BUILD_TIMEOUT_S = 2 * 3600
IMAGES_TIMEOUT_S = 3600


def _say(msg: str) -> None:
    print(f"==> kube fixture: {msg}", file=sys.stderr, flush=True)


@dataclass
class KubeCluster:
    """A running cluster: where its tools and kubeconfig are, and how to call them."""

    kubeconfig: Path
    kubectl_bin: str
    helm_bin: str
    #: This machine's node (``None`` for an external cluster).
    paths: Paths | None = None
    bin_dir: Path | None = None
    #: Measured seconds: lock wait, build, each ``up`` step, images.
    timings: dict[str, Any] = field(default_factory=dict)

    @property
    def local(self) -> bool:
        return self.paths is not None

    def require_local_node(self) -> Paths:
        """The node's paths; skips a test that needs this machine's node on another cluster."""
        if self.paths is None:
            pytest.skip("needs the node built on this machine (not an external cluster)")
        return self.paths

    @staticmethod
    def image(role: str) -> str:
        repo, tag = IMAGES[role]
        return f"{repo}:{tag}"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def run(self, tool: str, *args: str, stdin: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``kubectl`` or ``helm`` with this cluster's kubeconfig; returns the finished process."""
        binary = {"kubectl": self.kubectl_bin, "helm": self.helm_bin}[tool]
        return subprocess.run([binary, f"--kubeconfig={self.kubeconfig}", *args], input=stdin,
                              capture_output=True, text=True, timeout=timeout, check=False,
                              env=self.env)

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        """Run kubectl; fails the test with kubectl's stderr when it exits non-zero."""
        proc = self.run("kubectl", *args, stdin=stdin, timeout=timeout)
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    def kubectl_json(self, *args: str, timeout: float = 120) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json", timeout=timeout))

    def helm(self, *args: str, timeout: float = 600) -> str:
        proc = self.run("helm", *args, timeout=timeout)
        assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stderr}"
        return proc.stdout


def _unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "the node needs root"
    missing = [t for t in ("containerd", "buildah", "go") if shutil.which(t) is None]
    if missing:
        return (f"{', '.join(missing)} not installed (Go, and the Debian packages that "
                "`./dev kube up` and `./dev images` install)")
    return None


class _Session:
    """The cluster's life in one pytest session (prepared at collection end)."""

    def __init__(self) -> None:
        self.cluster: KubeCluster | None = None
        self.error: str | None = None
        self.skip: str | None = None
        self.lock: contextlib.ExitStack | None = None
        self.state: dict[str, Any] = {}
        self.sysctls: dict[str, str] = {}
        self.down_done = False

    def prepare(self) -> None:
        if os.environ.get("STROM_KUBE_EXTERNAL") == "1":
            self._external()
            return
        reason = _unavailable_reason()
        if reason:
            if in_ci():
                self.error = f"the kube tests cannot run: {reason}"
            else:
                self.skip = reason
            return
        timings: dict[str, Any] = {}
        stack = contextlib.ExitStack()
        t = time.monotonic()
        try:
            stack.enter_context(lock.hold(say=_say))
        except lock.LockBusy as exc:
            self.error = str(exc)
            return
        self.lock = stack
        timings["lock wait"] = round(time.monotonic() - t, 1)
        try:
            bin_dir = self._binaries(timings)
            paths = Paths.default()
            # An earlier cluster left running (a run killed mid-session) has already rewritten the
            # kernel settings; cleaning it first puts back the machine's own values, which are the
            # ones ``down`` must leave at the end.
            earlier = cluster.down(paths, quiet=True)
            if earlier:
                _say(f"cleaned an earlier cluster first: {'; '.join(earlier)}")
            self.sysctls = cluster.read_sysctls()
            t = time.monotonic()
            timings["up"] = cluster.up(bin_dir, paths)
            self.state = cluster.load_state(paths)
            _say(f"cluster up in {time.monotonic() - t:.0f} s")
            self.cluster = KubeCluster(kubeconfig=paths.admin_kubeconfig,
                                       kubectl_bin=str(bin_dir / "kubectl"),
                                       helm_bin=str(bin_dir / "helm"), paths=paths,
                                       bin_dir=bin_dir, timings=timings)
            t = time.monotonic()
            images = subprocess.run([str(REPO / "kube" / "images.sh")], capture_output=True,
                                    text=True, timeout=IMAGES_TIMEOUT_S, check=False)
            if images.returncode != 0:
                raise cluster.KubeError(f"kube/images.sh failed:\n{images.stderr[-3000:]}")
            timings["images"] = round(time.monotonic() - t, 1)
            _say(f"images built and loaded in {timings['images']:.0f} s:\n"
                 + images.stderr.strip())
        except (cluster.KubeError, subprocess.TimeoutExpired, OSError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            self.finish()

    def _binaries(self, timings: dict[str, Any]) -> Path:
        if os.environ.get("STROM_KUBE_BIN"):
            return Path(os.environ["STROM_KUBE_BIN"])
        t = time.monotonic()
        build = subprocess.run([str(REPO / "kube" / "build.sh")], capture_output=True, text=True,
                               timeout=BUILD_TIMEOUT_S, check=False)
        if build.returncode != 0:
            raise cluster.KubeError(f"kube/build.sh failed:\n{build.stderr[-3000:]}")
        timings["build"] = round(time.monotonic() - t, 1)
        return Path(build.stdout.strip().splitlines()[-1])

    def _external(self) -> None:
        kubeconfig = os.environ.get("KUBECONFIG")
        kubectl, helm = shutil.which("kubectl"), shutil.which("helm")
        if not kubeconfig or kubectl is None or helm is None:
            self.error = ("STROM_KUBE_EXTERNAL=1 needs KUBECONFIG set and kubectl and helm on "
                          "PATH")
            return
        self.cluster = KubeCluster(kubeconfig=Path(kubeconfig), kubectl_bin=kubectl,
                                   helm_bin=helm)

    def finish(self) -> list[str]:
        """Down (once), then what is left on the machine; releases the lock."""
        left: list[str] = []
        try:
            if self.lock is not None and not self.down_done:
                self.down_done = True
                paths = Paths.default()
                t = time.monotonic()
                cluster.down(paths, quiet=True)
                _say(f"cluster down in {time.monotonic() - t:.1f} s")
                left = cluster.leftovers(paths, self.state, self.sysctls)
        finally:
            if self.lock is not None:
                self.lock.close()
                self.lock = None
        return left


_SESSION_KEY = pytest.StashKey[_Session]()


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if any(FIXTURE in getattr(item, "fixturenames", ()) for item in session.items):
        state = _Session()
        session.config.stash[_SESSION_KEY] = state
        state.prepare()


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(_SESSION_KEY, None)
    if state is not None:  # the fixture's teardown did not run (e.g. interrupted)
        state.finish()


@pytest.fixture(scope="session")
def kube_cluster(request: pytest.FixtureRequest) -> Iterator[KubeCluster]:
    """The session's running cluster (:class:`KubeCluster`); see the module docstring."""
    state = request.config.stash.get(_SESSION_KEY, None)
    if state is None:  # asked for indirectly (getfixturevalue): prepare now
        state = _Session()
        request.config.stash[_SESSION_KEY] = state
        state.prepare()
    if state.skip:
        pytest.skip(state.skip)
    if state.error or state.cluster is None:
        pytest.fail(state.error or "the cluster did not start", pytrace=False)
    yield state.cluster
    left = state.finish()
    assert left == [], f"`down` left these on the machine: {left}"
