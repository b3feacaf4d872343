"""The Spark-on-Kubernetes recipe: manifests parse, carry the required fields, and agree with the
jobs (image paths exist, arguments are accepted by the job's own parser, volumes are declared)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "k8s"
JOBS = ROOT / "jobs"
IMAGE_JOBS_DIR = "/opt/strom/jobs/"
BOOTSTRAP = re.compile(r"^[a-z0-9-]+-bootstrap\.[a-z0-9-]+\.svc:9092$")


def _docs() -> list[dict[str, Any]]:
    out = []
    for path in sorted(K8S.glob("*.yaml")):
        out.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return out


def _job(path: str) -> ModuleType:
    assert path.startswith("local://" + IMAGE_JOBS_DIR), path
    name = path.rsplit("/", 1)[1]
    assert (JOBS / name).is_file(), f"{name} is not in spark-jobs/jobs/"
    spec = importlib.util.spec_from_file_location(f"k8s_job_{name[:-3]}", JOBS / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _apps() -> list[tuple[str, dict[str, Any]]]:
    apps = []
    for d in _docs():
        if d["kind"] == "SparkApplication":
            apps.append((d["metadata"]["name"], d["spec"]))
        elif d["kind"] == "ScheduledSparkApplication":
            assert d["spec"]["schedule"]
            apps.append((d["metadata"]["name"], d["spec"]["template"]))
    return apps


def test_spark_operator_applications_have_required_fields() -> None:
    docs = _docs()
    kinds = {d["kind"] for d in docs}
    assert {"SparkApplication", "ScheduledSparkApplication"} <= kinds
    service_accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    for d in docs:
        if d["kind"] in ("SparkApplication", "ScheduledSparkApplication"):
            assert d["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
            assert d["metadata"]["namespace"] == "spark-jobs"
    apps = _apps()
    assert {name for name, _ in apps} == {"iot-alerts", "daily-aggregates"}
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pyspark_pin = next(d for d in pyproject["project"]["dependencies"] if d.startswith("pyspark"))
    for name, spec in apps:
        assert spec["type"] == "Python" and spec["mode"] == "cluster", name
        assert spec["image"] and spec["sparkVersion"] == pyspark_pin.split("==")[1], name
        assert spec["restartPolicy"]["type"] in ("Always", "OnFailure", "Never"), name
        assert spec["driver"]["serviceAccount"] in service_accounts, name
        for role in ("driver", "executor"):
            assert spec[role]["cores"] >= 1 and spec[role]["memory"], (name, role)
        assert spec["executor"]["instances"] >= 1
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for role in ("driver", "executor"):
            for mount in spec[role].get("volumeMounts", []):
                assert mount["name"] in volumes, (name, role, mount)
        for v in volumes.values():
            assert v["persistentVolumeClaim"]["claimName"] in claims
        # the job accepts its arguments, and they point at a StromCluster bootstrap Service
        job = _job(spec["mainApplicationFile"])
        args = job.parse_args([str(a) for a in spec["arguments"]])
        assert BOOTSTRAP.match(args.bootstrap), args.bootstrap
        assert args.master is None  # the operator / spark-submit sets the master


def test_core_objects_validate_against_kubernetes_schemas() -> None:
    for d in _docs():
        if d["apiVersion"].startswith("sparkoperator.k8s.io"):
            continue
        kubernetes_validate.validate(d, "1.31", strict=True)


def test_spark_submit_script_targets_kubernetes() -> None:
    script = (K8S / "spark-submit.sh").read_text()
    subprocess.run(["bash", "-n", str(K8S / "spark-submit.sh")], check=True)
    assert '--master "k8s://' in script and "--deploy-mode cluster" in script
    assert "spark.kubernetes.container.image" in script
    assert "serviceAccountName=spark" in script
    for path in re.findall(r"local://(\S+)", script):
        _job("local://" + path)
    assert re.search(r"STROM_BOOTSTRAP:-[a-z0-9-]+-bootstrap\.[a-z0-9-]+\.svc:9092", script)


def test_dockerfile_installs_connector_and_jobs() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert f"COPY spark-jobs/jobs/ {IMAGE_JOBS_DIR}" in text
    assert "uv build --wheel --out-dir /dist spark-jobs" in text
    assert "uv build --wheel --out-dir /dist broker-image" in text
    assert "openjdk-17" in text and "ENTRYPOINT [\"/opt/entrypoint.sh\"]" in text
    py = re.search(r"ARG PYTHON_IMAGE=python:(\d+)\.(\d+)", text)
    assert py and (int(py.group(1)), int(py.group(2))) >= (3, 11)


@pytest.mark.parametrize("job", ["iot_alerts", "daily_aggregates", "generate_readings"])
def test_jobs_have_a_cli(job: str) -> None:
    out = subprocess.run([sys.executable, str(JOBS / f"{job}.py"), "--help"],
                         capture_output=True, text=True, check=True)
    assert "--bootstrap" in out.stdout
