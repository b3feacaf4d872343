"""Issue 19 item 3: ``kubectl scale stromcluster`` 3 -> 5 -> 3 under load.

A cluster made from the docs' example with lower requests so that five brokers fit this 2-core
node (``resources.requests`` cpu 100m / memory 256Mi, limit 1Gi, volumes 1Gi; everything else as
written), in its own namespace.  A host producer writes acks=all records through the bootstrap
Service the whole time (stopped with SIGTERM once the scale-in is over).  Checked:

- scale-out: the StatefulSet grows to 5, the operator reassigns partitions onto brokers 3 and 4
  with the chart's replication throttle set while they move (``strom reassign status``), shows
  progress in ``status.rebalance`` and the Rebalancing condition (and in its metrics), then
  removes the throttle; brokers 3 and 4 end up holding replicas;
- scale-in: the Scaling condition shows the drain while the StatefulSet still has 5 pods; at the
  moment the StatefulSet shrinks, brokers 3 and 4 hold no replica; afterwards the cluster lists
  brokers 0-2 only (3 and 4 unregistered from the quorum's metadata), voters 0-2;
- every acknowledged record read back exactly once, in order per partition.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from strom.testing.kube import loadgen
from strom.testing.kube.platform import EXAMPLES, condition, wait_for
from strom.testing.kube.platform import Platform as Kube

pytestmark = [pytest.mark.kube, pytest.mark.integration, pytest.mark.timeout(2400)]

NS, NAME, TOPIC = "scaling", "scale", "scale-load"
BOOTSTRAP = f"{NAME}-bootstrap.{NS}.svc:9092"
LOWERED = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}


def _cluster_manifest() -> str:
    doc = yaml.safe_load((EXAMPLES / "cluster-3-brokers.yaml").read_text())
    doc["metadata"] = {"name": NAME, "namespace": NS}
    doc["spec"]["resources"] = LOWERED
    doc["spec"]["storage"]["size"] = "1Gi"
    return yaml.safe_dump(doc)


TOPIC_MANIFEST = f"""
apiVersion: strom.dev/v1alpha1
kind: StromTopic
metadata: {{name: {TOPIC}, namespace: {NS}}}
spec:
  clusterRef: {{name: {NAME}}}
  partitions: 6
  replicationFactor: 3
  config: {{min.insync.replicas: 2}}
"""


def _replicas_per_broker(kube: Kube) -> dict[int, int]:
    topics = kube.strom_json(BOOTSTRAP, "topic", "describe")
    counts: dict[int, int] = {}
    for t in topics:
        for p in t["partitions"]:
            for b in p["replicas"]:
                counts[b] = counts.get(b, 0) + 1
    return counts


def _every_partition_written(kube: Kube, producer: subprocess.Popen[str]) -> list[int]:
    """The topic's high watermarks, once every partition has one above 0 (acknowledged data:
    acks=all records count only once the in-sync replicas hold them)."""
    (topic,) = kube.strom_json(BOOTSTRAP, "topic", "describe", TOPIC)
    hws = [p["high_watermark"] or 0 for p in topic["partitions"]]
    assert len(hws) == 6 and min(hws) > 0, (
        f"high watermarks so far {hws}, producer "
        + ("running" if producer.poll() is None else f"exited {producer.returncode}"))
    return hws


def _operator_metrics(kube: Kube) -> str:
    pods = kube.get("pods", "-n", "strom-system", "-l", "app.kubernetes.io/name=strom-operator")
    ip = next(p["status"]["podIP"] for p in pods["items"] if p["status"].get("podIP"))
    # No proxy: the pod address is in the cluster's range, routed only into the node.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{ip}:8081/metrics", timeout=10) as response:
        return str(response.read().decode())


def _metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") and f'cluster="{NAME}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def _sts_replicas(kube: Kube) -> int:
    return int(kube.get("statefulset", "-n", NS, f"{NAME}-broker")["spec"]["replicas"])


def test_scale_out_and_in_under_load(strom_platform: Kube, tmp_path: Path) -> None:
    kube = strom_platform
    # The docs' cluster (if the earlier tests made it) frees its 3 x 500m CPU for five brokers.
    kube.kubectl("delete", "stromcluster", "my-cluster", "-n", "default", "--ignore-not-found",
                 "--wait=true", "--timeout=180s", timeout=200)
    wait_for("the example cluster's pods gone", lambda: not kube.get(
        "pods", "-n", "default", "-l", "app.kubernetes.io/instance=my-cluster")["items"], 180)
    kube.kubectl("create", "namespace", NS)
    started = time.monotonic()
    kube.kubectl("apply", "-f", "-", stdin=_cluster_manifest())
    wait_for(f"StromCluster {NAME} Ready", lambda: _ready(kube), 480, every=3)
    kube.timings["scale: 3 brokers Ready after s"] = time.monotonic() - started
    kube.kubectl("apply", "-f", "-", stdin=TOPIC_MANIFEST)
    wait_for(f"StromTopic {TOPIC} Ready", lambda: condition(kube.get(
        "stromtopic", "-n", NS, TOPIC), "Ready").get("status") == "True", 120)
    figures: dict[str, Any] = {}

    producer = kube.popen_host([sys.executable, "-m", "strom.testing.kube.loadgen", "produce",
                                "--bootstrap", BOOTSTRAP, "--topic", TOPIC, "--source", "host",
                                "--count", "400000", "--rate", "400", "--max-seconds", "1500"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        load_started = time.monotonic()
        hws = wait_for(f"data in every partition of {TOPIC} before anything moves",
                       lambda: _every_partition_written(kube, producer), 120, every=1)
        figures["load: data in every partition after s"] = round(
            time.monotonic() - load_started, 1)
        figures["load: high watermarks before the scale-out"] = hws
        before = _replicas_per_broker(kube)
        assert set(before) == {0, 1, 2}, before

        # -- 3 -> 5 ---------------------------------------------------------------------------
        t = time.monotonic()
        kube.kubectl("scale", "stromcluster", NAME, "-n", NS, "--replicas=5")
        seen_progress: list[dict[str, Any]] = []
        seen_throttle: list[int] = []
        seen_metrics: list[float] = []

        def rebalanced() -> bool:
            obj = kube.get("stromcluster", "-n", NS, NAME)
            rebalancing = condition(obj, "Rebalancing")
            progress = (obj.get("status") or {}).get("rebalance")
            if rebalancing.get("status") == "True" and progress:
                seen_progress.append(dict(progress))
                status = kube.strom_json(BOOTSTRAP, "reassign", "status")
                if status.get("throttle_bytes_per_sec"):
                    seen_throttle.append(int(status["throttle_bytes_per_sec"]))
                moving = _metric(_operator_metrics(kube),
                                 "strom_operator_rebalance_partitions_moving")
                if moving is not None:
                    seen_metrics.append(moving)
            return bool(rebalancing.get("reason") == "Done" and _ready(kube))

        wait_for("scale-out rebalanced (Rebalancing=False/Done)", rebalanced, 900, every=1)
        figures["3->5: scale to rebalance done, s"] = round(time.monotonic() - t, 1)
        assert _sts_replicas(kube) == 5
        assert seen_progress, "status.rebalance never showed a running move"
        assert max(p["movesTotal"] for p in seen_progress) > 0
        assert seen_throttle and set(seen_throttle) == {2 * 1024 * 1024}, seen_throttle
        assert seen_metrics and max(seen_metrics) > 0, seen_metrics  # the operator's gauge
        figures["3->5: progress samples"] = seen_progress[:3] + seen_progress[-2:]
        figures["3->5: moving-partitions metric samples"] = seen_metrics[:10]
        after_out = _replicas_per_broker(kube)
        assert after_out.get(3, 0) > 0 and after_out.get(4, 0) > 0, after_out
        final = kube.strom_json(BOOTSTRAP, "reassign", "status")
        assert not final.get("throttle_bytes_per_sec"), final  # removed when done
        figures["3->5: replicas per broker"] = after_out

        # -- 5 -> 3 ---------------------------------------------------------------------------
        t = time.monotonic()
        kube.kubectl("scale", "stromcluster", NAME, "-n", NS, "--replicas=3")
        drain_reasons: set[str] = set()
        at_shrink: dict[int, int] = {}

        def shrunk() -> bool:
            obj = kube.get("stromcluster", "-n", NS, NAME)
            scaling = condition(obj, "Scaling")
            if _sts_replicas(kube) == 5:
                drain_reasons.add(str(scaling.get("reason")))
                return False
            at_shrink.update(_replicas_per_broker(kube))
            return True

        wait_for("the StatefulSet shrunk to 3 after the drain", shrunk, 900, every=1)
        figures["5->3: scale to StatefulSet shrink, s"] = round(time.monotonic() - t, 1)
        assert drain_reasons & {"Drain", "WaitForDrain"}, drain_reasons
        assert at_shrink.get(3, 0) == 0 and at_shrink.get(4, 0) == 0, at_shrink

        def unregistered() -> dict[str, Any] | None:
            desc = kube.strom_json(BOOTSTRAP, "cluster", "describe")
            ids = sorted(b["id"] for b in desc["brokers"])
            return desc if ids == [0, 1, 2] and _ready(kube) else None

        desc = wait_for("brokers 3 and 4 unregistered", unregistered, 300, every=3)
        figures["5->3: scale to unregistered, s"] = round(time.monotonic() - t, 1)
        assert desc["voters"] == [0, 1, 2]
        assert all(b["state"] == "alive" for b in desc["brokers"])
        assert producer.poll() is None, "the producer stopped before the scale-in was over"
        producer.send_signal(signal.SIGTERM)
        out, err = producer.communicate(timeout=300)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.communicate()
    assert producer.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    acked = {"host": loadgen.expand(result["acked_ranges"])}
    read_path = tmp_path / "read.jsonl"
    kube.host([sys.executable, "-m", "strom.testing.kube.loadgen", "read", "--bootstrap",
               BOOTSTRAP, "--topic", TOPIC, "--group", "scale-readers", "--out",
               str(read_path), "--max-seconds", "600"], timeout=700)
    with read_path.open(encoding="utf-8") as f:
        records = [tuple(json.loads(line)) for line in f]
    verdict = loadgen.check(acked, records)  # type: ignore[arg-type]
    figures.update({"sent": result["sent"], "acked": result["acked"],
                    "failed": result["failed"], "errors": result["errors"],
                    "longest ack wait per partition, s": result["max_ack_gap_s"]})
    print(f"scale figures: {json.dumps(figures)}")
    kube.timings.update({f"scale: {k}": v for k, v in figures.items()
                         if isinstance(v, (int, float))})
    assert result["acked"] > 0
    assert verdict["lost_count"] == 0, verdict
    assert verdict["duplicate_count"] == 0 and verdict["out_of_order_count"] == 0, verdict


def _ready(kube: Kube) -> bool:
    obj = kube.get("stromcluster", "-n", NS, NAME)
    return condition(obj, "Ready").get("status") == "True"
