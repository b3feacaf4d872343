"""Spark on Kubernetes (``kube`` marker): the IoT alerts job, submitted with
``spark-submit --master k8s://https://<api> --deploy-mode cluster`` from this machine, runs its
driver and executor in pods of the Spark image (``spark-jobs/Dockerfile``, its own entrypoint),
reads a topic of a StromCluster that the operator runs in pods, and writes exactly the alerts the
readings call for; a second run whose executor pod is killed mid-job writes the same alerts.

Set-up (module): the chart's operator; ``spark-jobs/k8s/rbac.yaml`` and ``storage.yaml`` applied
unchanged (namespace ``spark-jobs``, ServiceAccount ``spark``, the checkpoint PVC); a one-broker
StromCluster and two StromTopics declared as CRs; the readings published from a pod of the Spark
image (``generate_readings.py``, deterministic). Requests are lowered for this 2-core node:
broker 100m/256Mi, driver and executor 100m CPU and 512m heap + 1g overhead (the driver pod runs the
JVM, the job's Python and the Python data source's planner: with 256m overhead it was OOMKilled
at its 768Mi limit; memory is plentiful here, CPU is what the 2-core node lacks).

The output is read back from a pod too and compared with the alerts computed here from the same
readings (as ``test_iot_alerts_job.py`` does locally). Spark's sink is at least once for a task
retried after some of its rows were acknowledged (spark-jobs/README.md, Guarantees), so the
killed run is compared as the set of alerts, and the duplicates it wrote, if any, are reported.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from strom.testing.kube.chart import operator_release
from strom.testing.kube.fixture import KubeCluster

pytestmark = [pytest.mark.kube, pytest.mark.integration, pytest.mark.timeout(1500)]

SPARK_JOBS = Path(__file__).resolve().parents[2]
NS, CLUSTER = "spark-jobs", "iot"
BOOTSTRAP = f"{CLUSTER}-bootstrap.{NS}.svc:9092"
READINGS = "sensor-readings"
START = 1_700_000_000_000
HOT, SHAKY = {"s001": [1], "s004": [3, 4]}, {"s002": [2]}
TEMPERATURE, VIBRATION = 90.0, 6.0
SUBMIT_DIRS: list[Path] = []
IMAGE_PYTHON = "/usr/local/bin/python3"  # spark-jobs/Dockerfile's PYSPARK_PYTHON


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"strom_jobs_{name}",
                                                  SPARK_JOBS / "jobs" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


GENERATE = f"""
import sys
sys.path.insert(0, "/opt/strom/jobs")
import generate_readings as g
readings = list(g.generate(sensors=8, seconds=60, per_second=2, start_ms={START},
                           hot={HOT!r}, shaky={SHAKY!r}))
# one late normal reading that moves the watermark past every window above
readings.append(g.Reading("s000", "train-0", {START} + 120_000, 50.0, 1.0))
print(g.publish("{BOOTSTRAP}", "{READINGS}", iter(readings)))
"""

READ_BACK = """
import json, sys, time
from strom.client import Admin, Consumer, TopicPartition
topic, bootstrap = sys.argv[1], sys.argv[2]
with Admin(bootstrap) as admin:
    n = len(admin.describe_topics([topic])[0].partitions)
tps = [TopicPartition(topic, p) for p in range(n)]
with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
    ends = consumer.end_offsets(tps)
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    out, deadline = [], time.monotonic() + 60
    while len(out) < sum(ends.values()) and time.monotonic() < deadline:
        out.extend(consumer.poll(timeout_ms=500, max_records=10_000))
for r in out:
    print(json.dumps({"key": r.key.decode(), "value": r.value.decode()}))
"""


def _expected() -> dict[tuple[str, int], tuple[list[str], int]]:
    gen = _load("generate_readings")
    readings = list(gen.generate(sensors=8, seconds=60, per_second=2, start_ms=START,
                                 hot=HOT, shaky=SHAKY))
    readings.append(gen.Reading("s000", "train-0", START + 120_000, 50.0, 1.0))
    watermark = max(r.ts for r in readings) - 20_000
    windows: dict[tuple[str, int], list[Any]] = defaultdict(list)
    for r in readings:
        windows[(r.sensor_id, r.ts - r.ts % 10_000)].append(r)
    expected = {}
    for (sensor, w), rs in windows.items():
        reasons = [name for name, hit in (
            ("temperature", max(r.temperature for r in rs) > TEMPERATURE),
            ("vibration", max(r.vibration for r in rs) > VIBRATION)) if hit]
        if reasons and w + 10_000 <= watermark:
            expected[(sensor, (w - START) // 10_000)] = (reasons, len(rs))
    assert set(expected) == {("s001", 1), ("s004", 3), ("s004", 4), ("s002", 2)}
    return expected


def _in_pod(kube: KubeCluster, name: str, script: str, *args: str,
            timeout: float = 300) -> str:
    """Run a Python script in a pod of the Spark image (its entrypoint's pass-through role) and
    return its log once the pod has ended.

    Not ``kubectl run --rm -i``: when the container ends before kubectl attaches, its output can
    be lost (a run here printed nothing and exited 0), so the pod is left to finish, its log read,
    and then it is deleted."""
    kube.kubectl("-n", NS, "run", name, "--restart=Never", f"--image={kube.image('spark')}",
                 "--image-pull-policy=Never",
                 "--overrides", json.dumps({"spec": {"containers": [{
                     "name": name, "image": kube.image("spark"),
                     "imagePullPolicy": "Never", "args": ["python3", "-c", script, *args],
                     "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}}}]}}))
    try:
        deadline, phase = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            phase = kube.kubectl("-n", NS, "get", "pod", name, "-o",
                                 "jsonpath={.status.phase}").strip()
            if phase in ("Succeeded", "Failed"):
                break
            time.sleep(1)
        log = kube.run("kubectl", "-n", NS, "logs", name, timeout=60)
        assert phase == "Succeeded", (f"pod {name}: {phase or 'no phase'} after "
                                      f"{timeout:.0f} s\n{log.stdout[-3000:]}{log.stderr}")
        return log.stdout
    finally:
        kube.run("kubectl", "-n", NS, "delete", "pod", name, "--ignore-not-found", "--wait=false")


def _wait_ready(kube: KubeCluster, kind: str, name: str, timeout: float = 300) -> float:
    t = time.monotonic()
    kube.kubectl("-n", NS, "wait", "--for=condition=Ready", f"{kind}/{name}",
                 f"--timeout={int(timeout)}s", timeout=timeout + 30)
    return round(time.monotonic() - t, 1)


@pytest.fixture(scope="module")
def strom(kube_cluster: KubeCluster) -> Iterator[KubeCluster]:
    kube = kube_cluster
    timings = kube.timings.setdefault("spark", {})
    with operator_release(kube):
        for manifest in ("rbac.yaml", "storage.yaml"):
            kube.kubectl("apply", "-f", str(SPARK_JOBS / "k8s" / manifest))
        try:
            kube.kubectl("apply", "-f", "-", stdin=f"""
apiVersion: strom.dev/v1alpha1
kind: StromCluster
metadata: {{name: {CLUSTER}, namespace: {NS}}}
spec:
  image: {kube.image("broker")}
  imagePullPolicy: Never
  brokers: {{replicas: 1}}
  controllers: {{replicas: 1}}
  storage: {{size: 256Mi, storageClassName: standard}}
  resources: {{requests: {{cpu: 100m, memory: 256Mi}}, limits: {{memory: 1Gi}}}}
  config: {{default.replication.factor: 1, min.insync.replicas: 1}}
""")
            timings["StromCluster Ready"] = _wait_ready(kube, "stromcluster", CLUSTER, 420)
            for topic, partitions in ((READINGS, 2), ("alerts-plain", 1), ("alerts-killed", 1)):
                kube.kubectl("apply", "-f", "-", stdin=f"""
apiVersion: strom.dev/v1alpha1
kind: StromTopic
metadata: {{name: {topic}, namespace: {NS}}}
spec:
  clusterRef: {{name: {CLUSTER}}}
  partitions: {partitions}
  replicationFactor: 1
  config: {{retention.ms: "-1"}}
""")
            for topic in (READINGS, "alerts-plain", "alerts-killed"):
                _wait_ready(kube, "stromtopic", topic, 180)
            t = time.monotonic()
            counts = [ln for ln in _in_pod(kube, "fill", GENERATE).splitlines()
                      if ln.strip().isdigit()]
            assert counts == ["961"], counts
            timings["fill 961 readings"] = round(time.monotonic() - t, 1)
            yield kube
        finally:
            for folder in SUBMIT_DIRS:
                shutil.rmtree(folder, ignore_errors=True)
            print(f"spark flow timings: {json.dumps(timings)}")
            kube.run("kubectl", "delete", "namespace", NS, "--timeout=300s", timeout=330)


def _submission_auth(kube: KubeCluster, run: str) -> tuple[Path, Path, Path]:
    """A token of the ``spark`` ServiceAccount and the cluster's CA, in files, for spark-submit.

    Spark's Kubernetes client (fabric8 7.6) cannot read this cluster's ECDSA client keys from
    the kubeconfig ("Invalid DER: object is not integer" in PKCS1Util), so submission uses what a
    CI system would: a ServiceAccount token (``spark.kubernetes.authenticate.submission.*``)."""
    home = Path(tempfile.mkdtemp(prefix=f"strom-spark-submit-{run}-"))
    SUBMIT_DIRS.append(home)  # removed by the module fixture (they hold a token)
    token = home / "token"
    token.write_text(kube.kubectl("-n", NS, "create", "token", "spark", "--duration=1h").strip())
    cluster = kube.kubectl_json("config", "view", "--raw", "--minify")["clusters"][0]["cluster"]
    ca = home / "ca.crt"
    if cluster.get("certificate-authority-data"):
        ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    else:
        ca.write_bytes(Path(cluster["certificate-authority"]).read_bytes())
    return home, token, ca


def _spark_submit(kube: KubeCluster, run: str, extra: list[str]) -> subprocess.Popen[str]:
    server = kube.kubectl("config", "view", "--minify", "-o",
                          "jsonpath={.clusters[0].cluster.server}").strip()
    home, token, ca = _submission_auth(kube, run)
    submit = Path(sys.executable).parent / "spark-submit"
    if not submit.exists():
        submit = Path(shutil.which("spark-submit") or "spark-submit")
    confs = {
        "spark.kubernetes.namespace": NS,
        "spark.kubernetes.container.image": kube.image("spark"),
        "spark.kubernetes.container.image.pullPolicy": "Never",
        "spark.kubernetes.authenticate.driver.serviceAccountName": "spark",
        "spark.executor.instances": "1",
        "spark.kubernetes.driver.request.cores": "100m",
        "spark.kubernetes.executor.request.cores": "100m",
        "spark.driver.memory": "512m", "spark.driver.memoryOverhead": "1g",
        "spark.executor.memory": "512m", "spark.executor.memoryOverhead": "1g",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.kubernetes.submission.waitAppCompletion": "true",
        # The pods' Python, not this machine's: spark-submit passes PYSPARK_PYTHON (which the
        # suite's conftest sets to the venv's interpreter) on to the driver pod, where it does
        # not exist ("Cannot run program /…/.venv/bin/python").
        "spark.pyspark.python": IMAGE_PYTHON, "spark.pyspark.driver.python": IMAGE_PYTHON,
        "spark.kubernetes.authenticate.submission.oauthTokenFile": str(token),
        "spark.kubernetes.authenticate.submission.caCertFile": str(ca),
        "spark.kubernetes.driver.label.strom-test-run": run,
        "spark.kubernetes.executor.label.strom-test-run": run,
    }
    for role in ("driver", "executor"):
        prefix = f"spark.kubernetes.{role}.volumes.persistentVolumeClaim.checkpoints"
        confs[f"{prefix}.options.claimName"] = "strom-spark-checkpoints"
        confs[f"{prefix}.mount.path"] = "/checkpoints"
    argv = [str(submit), "--master", f"k8s://{server}", "--deploy-mode", "cluster",
            "--name", f"iot-alerts-{run}"]
    for key, value in confs.items():
        argv += ["--conf", f"{key}={value}"]
    argv += ["local:///opt/strom/jobs/iot_alerts.py", "--bootstrap", BOOTSTRAP,
             "--readings-topic", READINGS, "--alerts-topic", f"alerts-{run}",
             "--checkpoint", f"/checkpoints/{run}", "--starting-offsets", "earliest",
             "--available-now", *extra]
    import pyspark

    # No kubeconfig for fabric8 to auto-configure from (HOME without ~/.kube, no KUBECONFIG).
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env.update(HOME=str(home), SPARK_HOME=str(Path(pyspark.__file__).parent))
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)


def _finish(kube: KubeCluster, proc: subprocess.Popen[str], run: str,
            timeout: float = 900) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pods = kube.run("kubectl", "-n", NS, "get", "pods", "-o", "wide").stdout
        pytest.fail(f"spark-submit ({run}) did not finish in {timeout:.0f} s\n{pods}\n"
                    f"{out[-3000:]}")
    driver = kube.kubectl_json("-n", NS, "get", "pods", "-l",
                               f"spark-role=driver,strom-test-run={run}")["items"]
    phase = driver[0]["status"]["phase"] if driver else "missing"
    if proc.returncode != 0 or phase != "Succeeded":
        logs = kube.run("kubectl", "-n", NS, "logs", "-l",
                        f"spark-role=driver,strom-test-run={run}", "--tail=80").stdout
        causes = [ln for ln in out.splitlines()
                  if "Exception" in ln or "Message:" in ln or "Caused by" in ln][:12]
        pytest.fail(f"spark-submit ({run}) exit {proc.returncode}, driver {phase}\n"
                    + "\n".join(causes) + f"\n--- driver log ---\n{logs}")
    return out


def _alerts(kube: KubeCluster, run: str) -> list[tuple[tuple[str, int], tuple[list[str], int]]]:
    got = []
    for line in _in_pod(kube, f"read-{run}", READ_BACK, f"alerts-{run}", BOOTSTRAP).splitlines():
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        alert = json.loads(rec["value"])
        assert rec["key"] == alert["sensor_id"]
        assert alert["train_id"] == f"train-{int(alert['sensor_id'][1:]) % 3}"
        w = int(datetime.fromisoformat(alert["window_start"].replace("Z", "+00:00")).timestamp()
                * 1000)
        got.append(((alert["sensor_id"], (w - START) // 10_000),
                    (alert["reasons"], alert["readings"])))
    return got


def test_the_iot_job_runs_in_driver_and_executor_pods_and_writes_the_alerts(
        strom: KubeCluster) -> None:
    t = time.monotonic()
    proc = _spark_submit(strom, "plain", [])
    seen: dict[str, float] = {}  # role -> seconds from submit to its pod Running
    while proc.poll() is None and time.monotonic() - t < 900:
        pods = strom.kubectl_json("-n", NS, "get", "pods", "-l", "strom-test-run=plain")
        for pod in pods["items"]:
            role = pod["metadata"]["labels"].get("spark-role")
            image = pod["spec"]["containers"][0]["image"]
            if role in ("driver", "executor") and pod["status"].get("phase") == "Running":
                assert image == strom.image("spark")
                seen.setdefault(role, round(time.monotonic() - t, 1))
        time.sleep(2)
    _finish(strom, proc, "plain")
    took = round(time.monotonic() - t, 1)
    strom.timings.setdefault("spark", {})["spark-submit plain"] = {
        "seconds": took, "driver Running after": seen.get("driver"),
        "executor Running after": seen.get("executor")}
    assert set(seen) == {"driver", "executor"}, seen
    got = _alerts(strom, "plain")
    assert dict(got) == _expected() and len(got) == len(_expected()), got


def test_killing_the_executor_pod_mid_job_still_gives_the_right_alerts(
        strom: KubeCluster) -> None:
    paths = strom.require_local_node()  # watches the checkpoint on the node's volume
    t = time.monotonic()
    # 961 readings at 120 per micro-batch: 9 batches, so a kill after the first commit is
    # mid-job.
    proc = _spark_submit(strom, "killed", ["--max-offsets-per-trigger", "120"])
    killed: dict[str, Any] = {}

    def commits() -> list[str]:
        pvc = strom.kubectl_json("-n", NS, "get", "pvc", "strom-spark-checkpoints")
        volume = pvc["spec"].get("volumeName")
        folder = paths.volumes / volume / "killed" / "commits" if volume else None
        return sorted(f.name for f in folder.iterdir()) if folder and folder.is_dir() else []

    def kill_when_one_batch_is_committed() -> None:
        while proc.poll() is None and time.monotonic() - t < 600:
            done = commits()
            if done:
                executors = strom.kubectl_json("-n", NS, "get", "pods", "-l",
                                               "spark-role=executor,strom-test-run=killed")
                names = [p["metadata"]["name"] for p in executors["items"]
                         if p["status"].get("phase") == "Running"]
                if names:
                    strom.kubectl("-n", NS, "delete", "pod", *names, "--grace-period=0",
                                  "--force")
                    killed.update(pods=names, batches_committed=done,
                                  at=round(time.monotonic() - t, 1))
                    break
            time.sleep(0.5)
        # Recovery: the driver asks for a new executor pod; how long until it runs and until
        # the next micro-batch is committed.
        while killed and proc.poll() is None and time.monotonic() - t < 600:
            pods = strom.kubectl_json("-n", NS, "get", "pods", "-l",
                                      "spark-role=executor,strom-test-run=killed")["items"]
            if "replacement Running after kill" not in killed and any(
                    p["metadata"]["name"] not in killed["pods"]
                    and p["status"].get("phase") == "Running" for p in pods):
                killed["replacement Running after kill"] = round(
                    time.monotonic() - t - killed["at"], 1)
            if len(commits()) > len(killed["batches_committed"]):
                killed["next batch committed after kill"] = round(
                    time.monotonic() - t - killed["at"], 1)
                return
            time.sleep(0.5)

    killer = threading.Thread(target=kill_when_one_batch_is_committed, daemon=True)
    killer.start()
    _finish(strom, proc, "killed")
    killer.join(timeout=30)
    took = round(time.monotonic() - t, 1)
    assert killed, "the executor was never killed (no batch committed while it ran)"
    batches = commits()
    print(f"killed executor {killed['pods']} at {killed['at']} s after "
          f"{len(killed['batches_committed'])} of {len(batches)} committed batches; "
          f"spark-submit took {took} s")
    assert len(killed["batches_committed"]) < len(batches), (killed, batches)
    executors = strom.kubectl_json("-n", NS, "get", "pods", "-l",
                                   "spark-role=executor,strom-test-run=killed")["items"]
    got = _alerts(strom, "killed")
    distinct = dict(got)
    assert distinct == _expected(), got
    duplicates = len(got) - len(distinct)
    strom.timings.setdefault("spark", {})["spark-submit killed"] = {
        "seconds": took, "duplicates": duplicates, "killed at": killed["at"],
        "replacement executor Running after kill": killed.get("replacement Running after kill"),
        "next batch committed after kill": killed.get("next batch committed after kill"),
        "executor pods left": len(executors)}
    print(f"alerts after the kill: {len(distinct)} distinct, {duplicates} duplicate(s)")
