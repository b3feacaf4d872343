"""Prometheus discovers and scrapes the broker and operator pods through Kubernetes service
discovery against the real API server, and every dashboard panel has data (issue 19 item 4;
``kube`` marker, the session's cluster from :mod:`strom.testing.kube.fixture`).

It uses the e2e/kube session's operator (the chart) and the docs' 3-broker ``my-cluster``
(``example_cluster``), and adds a StromTopic (6 partitions, RF 2) and a StromConsumerGroup of its
own. A pod in the cluster (the broker image) produces over gRPC, consumes and commits as the
group, talks to the Kafka listener and moves one partition with a throttled reassignment.

Prometheus runs on the host (the host routes the pod network into the node) with exactly the jobs
of ``docs/prometheus/kubernetes-sd-scrape.yaml``, given the admin kubeconfig. It is upstream's
Prometheus 3.7.3 built from its Go module by ``kube/prometheus.sh``: Debian's package is built
without Kubernetes service discovery ("field kubernetes_sd_configs not found in type
config.ScrapeConfig"), so it cannot run this config. The test waits until Prometheus has found
and scraped 3 broker pods and the operator pod, then evaluates every query of every dashboard,
the operator's included, with its variables filled in, and fails on any empty one.
"""

from __future__ import annotations

import json
import math
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from strom.testing.dashboards import panel_count, panel_queries, variable_queries
from strom.testing.kube.fixture import IMAGES
from strom.testing.kube.platform import Platform, wait_for
from strom.testing.prometheus import PrometheusApi, PrometheusError, running_prometheus

pytestmark = [pytest.mark.kube, pytest.mark.integration, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "charts" / "strom" / "files" / "grafana-dashboards"
SCRAPE_DOC = REPO / "docs" / "prometheus" / "kubernetes-sd-scrape.yaml"
NS, CLUSTER, TOPIC, GROUP = "default", "my-cluster", "obs-events", "obs-orders"
TRAFFIC_S = 300

MANIFESTS = f"""
apiVersion: strom.dev/v1alpha1
kind: StromTopic
metadata: {{name: {TOPIC}, namespace: {NS}}}
spec:
  clusterRef: {{name: {CLUSTER}}}
  partitions: 6
  replicationFactor: 2
  config: {{min.insync.replicas: 1}}
---
apiVersion: strom.dev/v1alpha1
kind: StromConsumerGroup
metadata: {{name: {GROUP}, namespace: {NS}}}
spec:
  clusterRef: {{name: {CLUSTER}}}
  groupId: {GROUP}
  topics: [{TOPIC}]
  offsetReset: earliest
"""

#: Runs in a pod of the broker image: bounded traffic on every front the dashboards chart.
TRAFFIC = textwrap.dedent(f"""
    import os, socket, struct, time
    from strom.client import Admin, Consumer, Producer
    boot = os.environ["BOOTSTRAP"]
    host, port = os.environ["KAFKA"].rsplit(":", 1)

    def api_versions():  # one Kafka-protocol request (ApiVersions v0) on the Kafka listener
        with socket.create_connection((host, int(port)), timeout=10) as s:
            body = struct.pack(">hhih", 18, 0, 7, 3) + b"obs"
            s.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", s.recv(4))[0]
            assert size > 0

    started, moved, produced, consumed = time.monotonic(), False, 0, 0
    with Producer(boot, acks="all") as producer, Consumer(
            boot, group_id="{GROUP}", auto_offset_reset="earliest") as consumer:
        consumer.subscribe(["{TOPIC}"])
        while time.monotonic() - started < {TRAFFIC_S}:
            for i in range(200):
                producer.send("{TOPIC}", b"value-%d" % i, key=b"%d" % (i % 12))
            producer.flush(60)
            produced += 200
            consumed += len(consumer.poll(timeout_ms=300))
            consumer.commit()
            api_versions()
            if not moved and time.monotonic() - started > 20:
                with Admin(boot) as admin:
                    (topic,) = admin.describe_topics(["{TOPIC}"])
                    part = next(p for p in topic.partitions if p.partition == 0)
                    spare = next(b for b in (0, 1, 2) if b not in part.replicas)
                    admin.alter_partition_reassignments(
                        {{("{TOPIC}", 0): [spare, part.replicas[0]]}},
                        throttle_bytes_per_sec=5 * 1024 * 1024)
                moved = True
                print("reassigned {TOPIC}-0 to", [spare, part.replicas[0]], flush=True)
            if int(time.monotonic() - started) % 15 == 0:
                print("produced", produced, "consumed", consumed, flush=True)
    print("done: produced", produced, "consumed", consumed, flush=True)
""")


def _traffic_pod() -> str:
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "traffic", "namespace": NS},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "traffic", "image": ":".join(IMAGES["broker"]),
                "imagePullPolicy": "Never", "command": ["python3", "-c", TRAFFIC],
                "env": [{"name": "BOOTSTRAP", "value": f"{CLUSTER}-bootstrap.{NS}.svc:9092"},
                        {"name": "KAFKA", "value": f"{CLUSTER}-bootstrap.{NS}.svc:19092"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                              "limits": {"memory": "512Mi"}},
            }],
        },
    }
    return json.dumps(pod)


def prometheus_config(kubeconfig: Path, scrape_interval: str = "5s") -> str:
    """The documented jobs, unchanged but for how Prometheus reaches the API server from
    outside the cluster (``kubeconfig_file``, as docs/operations.md says)."""
    doc = yaml.safe_load(SCRAPE_DOC.read_text())
    for job in doc["scrape_configs"]:
        for sd in job["kubernetes_sd_configs"]:
            sd["kubeconfig_file"] = str(kubeconfig)
    doc["global"] = {"scrape_interval": scrape_interval,
                     "evaluation_interval": scrape_interval}
    return yaml.safe_dump(doc, sort_keys=False)


def _scraped(prom: PrometheusApi) -> dict[str, list[str]] | None:
    up: dict[str, list[str]] = {"strom-brokers": [], "strom-operator": []}
    for target in prom.targets():
        labels = target["labels"]
        if target["health"] == "up" and labels.get("job") in up:
            up[labels["job"]].append(labels.get("pod", "?"))
    return up if len(up["strom-brokers"]) == 3 and len(up["strom-operator"]) == 1 else None


def _scrapes_since(prom: PrometheusApi, since: float, targets: dict[str, list[str]],
                   least: int = 2) -> dict[str, int]:
    """Successful scrapes of each target (job -> pods, as :func:`_scraped` found them) since
    ``since`` (the host's clock, which Prometheus on the host shares), once each has at least
    ``least``: then every ``rate()`` window holds two samples taken after that moment."""
    window = max(1, math.ceil(time.time() - since))  # evaluated at now: no sample before since
    jobs = "|".join(targets)
    counts = {f"{row['metric'].get('job')}/{row['metric'].get('pod', '?')}":
              int(float(row["value"][1]))
              for row in prom.query(f'sum_over_time(up{{job=~"{jobs}"}}[{window}s])')}
    wanted = {f"{job}/{pod}": counts.get(f"{job}/{pod}", 0)
              for job, pods in targets.items() for pod in pods}
    if min(wanted.values()) < least:
        raise PrometheusError(f"successful scrapes in the last {window} s: {wanted}")
    return wanted


def test_prometheus_discovers_scrapes_and_fills_every_dashboard(
        example_cluster: Platform, tmp_path: Path) -> None:
    kube = example_cluster
    built = subprocess.run([str(REPO / "kube" / "prometheus.sh")], capture_output=True,
                           text=True, timeout=1800, check=False)
    assert built.returncode == 0, f"kube/prometheus.sh failed:\n{built.stderr[-3000:]}"
    binary = built.stdout.strip().splitlines()[-1]
    started = time.monotonic()
    try:
        kube.kubectl("apply", "-f", "-", stdin=MANIFESTS)
        wait_for(f"StromTopic {TOPIC} Ready", lambda: kube.ready("stromtopic", TOPIC), 300, 2)
        kube.kubectl("apply", "-f", "-", stdin=_traffic_pod())
        with running_prometheus(tmp_path / "prometheus",
                                prometheus_config(kube.cluster.kubeconfig),
                                binary=binary) as prom:
            found = prom.wait_for("3 broker pods and the operator pod discovered and up",
                                  lambda: _scraped(prom), timeout=180, interval=2)
            print("scraped:", found)
            values = {"namespace": NS, "topic": TOPIC, "group": GROUP}
            prom.wait_for("the group's committed offsets", lambda: prom.query(
                f'strom_consumer_group_committed_offset{{group="{GROUP}"}}'), timeout=240)
            prom.wait_for("the operator's view of the group's lag", lambda: prom.query(
                f'strom_operator_consumer_group_lag{{group="{GROUP}"}}'), timeout=240)
            wait_for("the traffic pod's reassignment", lambda: "reassigned" in kube.cluster.run(
                "kubectl", "-n", NS, "logs", "traffic").stdout, 120, 2)
            reassigned = time.time()
            scrapes = prom.wait_for("two scrapes of every target after the reassignment",
                                    lambda: _scrapes_since(prom, reassigned, found),
                                    timeout=90, interval=1)
            print(f"scrapes since the reassignment ({time.time() - reassigned:.1f} s):",
                  scrapes)
            checked, failures, panels = 0, [], 0
            for path in sorted(DASHBOARDS.glob("*.json")):
                panels += panel_count(path)
                for var in variable_queries(path, values):
                    prom.wait_for(f"{path.name}: ${var.name} offers {values[var.name]!r}",
                                  lambda var=var: values[var.name] in prom.label_values(
                                      var.label, var.match), timeout=60)
                for query in panel_queries(path, values):
                    checked += 1
                    try:
                        prom.wait_for(str(query), lambda q=query: prom.query(q.expr),
                                      timeout=30, interval=2)
                    except AssertionError:
                        failures.append(str(query))
            print(f"{checked} queries of {panels} panels of every dashboard evaluated, "
                  f"{len(failures)} empty; {time.monotonic() - started:.0f} s")
            assert not failures, "empty panels:\n" + "\n".join(failures)
    finally:
        logs = kube.cluster.run("kubectl", "-n", NS, "logs", "traffic", "--tail=5")
        print("traffic pod:", logs.stdout, logs.stderr)
        kube.cluster.run("kubectl", "-n", NS, "delete", "pod", "traffic", "--ignore-not-found",
                         "--wait=true", "--timeout=120s", timeout=150)
        kube.cluster.run("kubectl", "-n", NS, "delete", "stromconsumergroup", GROUP,
                         "stromtopic", TOPIC, "--ignore-not-found", "--timeout=120s", timeout=150)
