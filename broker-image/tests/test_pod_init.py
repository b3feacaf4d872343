"""The broker pods' init step run as the operator's init container runs it.

``python3 -m strom.pod_init`` with the pod's environment (no rack key: the node lookup needs a
cluster) reads the shared config and writes the per-pod one; a broken module, a missing argument
or a renamed module fails here rather than in a pod that never starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from strom.broker.config import BrokerConfig

pytestmark = pytest.mark.integration


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "POD_NAME": "my-cluster-broker-2",
           "STROM_HEADLESS_DOMAIN": "my-cluster-brokers.kafka.svc", "NODE_NAME": "node-1"}
    env.pop("STROM_RACK_TOPOLOGY_KEY", None)
    return subprocess.run([sys.executable, "-m", "strom.pod_init", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_init_step_writes_the_pods_config(tmp_path: Path) -> None:
    template = tmp_path / "etc" / "server.properties"
    template.parent.mkdir()
    template.write_text("port=9092\nbroker.id=0\n", encoding="utf-8")
    output = tmp_path / "run" / "strom" / "server.properties"
    done = _run(tmp_path, "--template", str(template), "--output", str(output))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "broker.id=2 broker.rack=(none)"
    loaded = BrokerConfig.from_mapping(dict(
        line.split("=", 1) for line in output.read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")))
    assert loaded.broker_id == 2  # the per-pod key wins over the shared file's
    assert loaded.advertised_host == "my-cluster-broker-2.my-cluster-brokers.kafka.svc"


def test_the_init_step_names_a_missing_argument(tmp_path: Path) -> None:
    done = _run(tmp_path, "--output", str(tmp_path / "out"))
    assert done.returncode == 2
    assert "--template" in done.stderr and "Traceback" not in done.stderr
