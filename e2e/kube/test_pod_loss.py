"""Issue 19 item 2: pod loss under load on the docs' 3-broker cluster.

200,000 records with acks=all (idempotent producers): 100,000 from a Job inside the cluster and
100,000 from the host through the bootstrap Service, into a 6-partition StromTopic with RF 3 and
min.insync.replicas 2.  While both run:

1. broker 1's pod is deleted (graceful): it must be gone within its
   ``terminationGracePeriodSeconds`` and its log must show the controlled shutdown (leadership
   moved away before it stopped); the StatefulSet recreates it on the same PVC;
2. once every partition is fully replicated again, broker 2's container process is killed with
   SIGKILL (from the node, by the PID containerd reports; signals from inside a container cannot
   kill its PID 1); kubelet restarts it in the same pod, on the same PVC.

Each restarted broker must find its partition logs on the volume.  Then every acknowledged
record is read back by a member of the StromConsumerGroup's group: exactly once and in order per
partition (:func:`strom.testing.kube.loadgen.check`), and the group's status must reach lag 0.
Unavailability per partition is the longest time either producer waited for an acknowledgement
on that partition (printed and recorded in docs/decisions.md).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from strom.testing.kube import loadgen
from strom.testing.kube.platform import EXAMPLE_BROKER_IMAGE, condition, wait_for
from strom.testing.kube.platform import Platform as Kube

pytestmark = [pytest.mark.kube, pytest.mark.integration, pytest.mark.timeout(1800)]

BOOTSTRAP = "my-cluster-bootstrap.default.svc:9092"
TOPIC, GROUP = "pod-loss", "pod-loss-readers"
PER_PRODUCER = 100_000
RATE = 450  # records/s per producer: both faults happen inside the ~220 s of load
GRACE_S = 60  # the StatefulSet's terminationGracePeriodSeconds (asserted below)
FLOWING = 2 * RATE  # acknowledgements per producer that show the load flows before any fault

RESOURCES = f"""
apiVersion: strom.dev/v1alpha1
kind: StromTopic
metadata: {{name: {TOPIC}}}
spec:
  clusterRef: {{name: my-cluster}}
  partitions: 6
  replicationFactor: 3
  config: {{min.insync.replicas: 2}}
---
apiVersion: strom.dev/v1alpha1
kind: StromConsumerGroup
metadata: {{name: {GROUP}}}
spec:
  clusterRef: {{name: my-cluster}}
  topics: [{TOPIC}]
  offsetReset: earliest
"""

JOB = f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: pod-loss-producer}}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: producer
        image: {EXAMPLE_BROKER_IMAGE}
        imagePullPolicy: IfNotPresent
        command: [python3, -m, strom.testing.kube.loadgen, produce, --bootstrap, {BOOTSTRAP},
                  --topic, {TOPIC}, --source, job, --count, "{PER_PRODUCER}", --rate, "{RATE}",
                  --max-seconds, "900", --progress-s, "1"]
        resources:
          requests: {{cpu: 50m, memory: 128Mi}}
          limits: {{memory: 512Mi}}
"""


def _pod(kube: Kube, name: str) -> dict[str, Any]:
    return kube.get("pod", name)


def _claim_volume(kube: Kube, ordinal: int) -> str:
    return str(kube.get("pvc", f"data-my-cluster-broker-{ordinal}")["spec"]["volumeName"])


def _pod_ready(kube: Kube, name: str, uid: str | None = None) -> bool:
    pod = _pod(kube, name)
    if uid is not None and pod["metadata"]["uid"] == uid:
        return False
    return condition(pod, "Ready").get("status") == "True"


def _fully_replicated(kube: Kube) -> bool:
    desc = kube.strom_json(BOOTSTRAP, "cluster", "describe")
    return bool(desc["partitions"]["under_replicated"] == 0
                and all(b["state"] == "alive" for b in desc["brokers"]))


def _task_pid(kube: Kube, container_id: str) -> int:
    paths = kube.cluster.require_local_node()
    out = subprocess.run(["ctr", "--address", str(paths.containerd_socket), "-n", "k8s.io",
                          "tasks", "ls"], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    for line in out.splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] == container_id:
            return int(fields[1])
    raise AssertionError(f"containerd has no task {container_id}: {out}")


def _load_flowing(kube: Kube, host: subprocess.Popen[str], host_out: Path) -> dict[str, int]:
    """Both producers' acknowledgements so far, once each has at least ``FLOWING``."""
    job_log = kube.kubectl("logs", "job/pod-loss-producer")  # fails until the pod started
    acked = {source: (loadgen.last_progress(text) or {}).get("acked", 0)
             for source, text in (("host", host_out.read_text()), ("job", job_log))}
    assert min(acked.values()) >= FLOWING, (
        f"acknowledged so far {acked}, host producer "
        + ("running" if host.poll() is None else f"exited {host.returncode}"))
    return acked


def test_pod_loss_under_load(example_cluster: Kube, tmp_path: Path) -> None:
    kube = example_cluster
    sts = kube.get("statefulset", "my-cluster-broker")
    assert sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == GRACE_S
    kube.kubectl("apply", "-f", "-", stdin=RESOURCES)
    wait_for(f"StromTopic {TOPIC} Ready", lambda: kube.ready("stromtopic", TOPIC), 120)
    volumes = {i: _claim_volume(kube, i) for i in range(3)}
    figures: dict[str, Any] = {}

    # -- load: a Job in the cluster and a producer on the host ---------------------------------
    kube.kubectl("apply", "-f", "-", stdin=JOB)
    host_out, host_err = tmp_path / "host-producer.out", tmp_path / "host-producer.err"
    with host_out.open("w") as stdout, host_err.open("w") as stderr:  # read while it runs
        host = kube.popen_host([sys.executable, "-m", "strom.testing.kube.loadgen", "produce",
                                "--bootstrap", BOOTSTRAP, "--topic", TOPIC, "--source", "host",
                                "--count", str(PER_PRODUCER), "--rate", str(RATE),
                                "--max-seconds", "900", "--progress-s", "1"],
                               stdout=stdout, stderr=stderr)
    try:
        load_started = time.monotonic()
        acked_before = wait_for(f"both producers acknowledged {FLOWING} records", lambda:
                                _load_flowing(kube, host, host_out), 180, every=1)
        figures["load flowing (both producers acknowledged records) after s"] = round(
            time.monotonic() - load_started, 1)
        figures["acknowledged before the first fault"] = acked_before

        # -- 1. graceful delete of broker 1 --------------------------------------------------
        old = _pod(kube, "my-cluster-broker-1")
        # Follow its log from the start and delete only once the stream is attached (the lines
        # of the shutdown must not be written before kubectl connects).
        logs = subprocess.Popen(
            [kube.cluster.kubectl_bin, f"--kubeconfig={kube.cluster.kubeconfig}", "logs", "-f",
             "my-cluster-broker-1", "-c", "broker"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(logs.stdout.readline, "")),
                                  daemon=True)  # type: ignore[union-attr]
        reader.start()
        wait_for("the broker's log stream attached", lambda: lines, 60, every=0.2)
        t = time.monotonic()
        assert host.poll() is None, "the host producer finished before the first fault"
        kube.kubectl("delete", "pod", "my-cluster-broker-1", "--wait=true", "--timeout=120s",
                     timeout=150)
        figures["graceful delete: pod gone after s"] = round(time.monotonic() - t, 1)
        try:
            logs.wait(timeout=30)
        except subprocess.TimeoutExpired:
            logs.kill()
            logs.wait()
        reader.join(timeout=10)
        shutdown_log = "".join(lines)
        assert figures["graceful delete: pod gone after s"] < GRACE_S, figures
        assert "controlled shutdown: this broker leads no partition any more" in shutdown_log, \
            shutdown_log[-3000:]
        stopped = re.search(r"strom broker 1 stopped in ([0-9.]+)s", shutdown_log)
        assert stopped, shutdown_log[-3000:]
        figures["graceful delete: broker stop took s"] = float(stopped.group(1))
        wait_for("broker 1 back and Ready", lambda: _pod_ready(
            kube, "my-cluster-broker-1", old["metadata"]["uid"]), 300, every=2)
        figures["graceful delete: back Ready after s"] = round(time.monotonic() - t, 1)
        wait_for("every partition fully replicated after broker 1's return",
                 lambda: _fully_replicated(kube), 300, every=3)
        figures["graceful delete: fully replicated after s"] = round(time.monotonic() - t, 1)

        # -- 2. SIGKILL of broker 2's container process ---------------------------------------
        pod2 = _pod(kube, "my-cluster-broker-2")
        restarts = pod2["status"]["containerStatuses"][0]["restartCount"]
        container_id = pod2["status"]["containerStatuses"][0]["containerID"].split("//", 1)[1]
        pid = _task_pid(kube, container_id)
        assert host.poll() is None, "the host producer finished before the second fault"
        t = time.monotonic()
        os.kill(pid, signal.SIGKILL)

        def restarted() -> bool:
            status = _pod(kube, "my-cluster-broker-2")["status"]
            cs = status["containerStatuses"][0]
            return bool(cs["restartCount"] > restarts and cs.get("ready"))

        wait_for("broker 2 restarted in place and Ready", restarted, 300, every=2)
        figures["SIGKILL: back Ready after s"] = round(time.monotonic() - t, 1)
        last = _pod(kube, "my-cluster-broker-2")["status"]["containerStatuses"][0]["lastState"]
        assert last["terminated"]["exitCode"] == 137, last
        wait_for("every partition fully replicated after broker 2's restart",
                 lambda: _fully_replicated(kube), 300, every=3)
        figures["SIGKILL: fully replicated after s"] = round(time.monotonic() - t, 1)

        # -- both come back on their own volumes, with their logs ------------------------------
        assert {i: _claim_volume(kube, i) for i in range(3)} == volumes
        for ordinal in (1, 2):
            pod = _pod(kube, f"my-cluster-broker-{ordinal}")
            claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
                      if "persistentVolumeClaim" in v]
            assert claims == [f"data-my-cluster-broker-{ordinal}"]
            start_log = kube.kubectl("logs", f"my-cluster-broker-{ordinal}", "-c", "broker")
            loaded = re.search(r"loaded (\d+) partition logs", start_log)
            assert loaded and int(loaded.group(1)) > 0, start_log[:3000]

        # -- the producers finish ------------------------------------------------------------
        host.wait(timeout=900)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
    assert host.returncode == 0, host_err.read_text()[-3000:]
    host_result = json.loads(host_out.read_text().strip().splitlines()[-1])
    kube.kubectl("wait", "--for=condition=complete", "job/pod-loss-producer", "--timeout=900s",
                 timeout=960)
    job_log = kube.kubectl("logs", "job/pod-loss-producer")
    job_result = json.loads(job_log.strip().splitlines()[-1])
    figures["load seconds"] = round(time.monotonic() - load_started, 1)
    for result in (host_result, job_result):
        assert result["sent"] == PER_PRODUCER, {k: v for k, v in result.items()
                                                if k != "acked_ranges"}
    acked = {r["source"]: loadgen.expand(r["acked_ranges"]) for r in (host_result, job_result)}

    # -- read back as the group, check, and the group's lag reaches 0 --------------------------
    out = tmp_path / "read.jsonl"
    read = kube.host([sys.executable, "-m", "strom.testing.kube.loadgen", "read",
                      "--bootstrap", BOOTSTRAP, "--topic", TOPIC, "--group", GROUP,
                      "--out", str(out), "--max-seconds", "600"], timeout=700)
    read_result = json.loads(read.stdout.strip().splitlines()[-1])
    with out.open(encoding="utf-8") as f:
        records = [tuple(json.loads(line)) for line in f]
    verdict = loadgen.check(acked, records)  # type: ignore[arg-type]
    unavailable: dict[str, float] = {}
    for result in (host_result, job_result):
        for p, gap in result["max_ack_gap_s"].items():
            unavailable[p] = max(unavailable.get(p, 0.0), gap)
    figures.update({
        "acked": {s: len(v) for s, v in acked.items()},
        "failed": {r["source"]: r["failed"] for r in (host_result, job_result)},
        "errors": {r["source"]: r["errors"] for r in (host_result, job_result)},
        "read": read_result["records"], "read seconds": read_result["seconds"],
        "unavailability per partition, s (longest wait for an ack)":
            dict(sorted(unavailable.items(), key=lambda kv: int(kv[0]))),
    })
    print(f"pod loss figures: {json.dumps(figures)}")
    kube.timings.update({f"pod loss: {k}": v for k, v in figures.items()
                         if isinstance(v, (int, float))})
    assert verdict["lost_count"] == 0, verdict
    assert verdict["duplicate_count"] == 0, verdict
    assert verdict["out_of_order_count"] == 0, verdict
    assert set(verdict["read"]) == {"host", "job"}, verdict  # nothing foreign in the topic

    def lag_zero() -> dict[str, Any] | None:
        status = kube.get("stromconsumergroup", GROUP).get("status") or {}
        rows = status.get("partitionLag") or []
        return status if status.get("totalLag") == 0 and len(rows) == 6 else None

    status = wait_for(f"StromConsumerGroup {GROUP} lag 0 in its status", lag_zero, 120, every=3)
    assert sum(r["endOffset"] for r in status["partitionLag"]) == len(records)
