"""The operator's own Prometheus metrics, served on ``:8081/metrics``
(``STROM_OPERATOR_METRICS_PORT`` changes the port; 0 disables it).

Counters and histograms of reconciles are updated by the handlers.  The cluster gauges are set from
what the reconcile learned: broker counts always; under-replicated and offline partitions and
consumer-group lag only when the Admin API answered (until then the series are absent, and the
alerts on them stay silent); rebalancing progress from ``status.rebalance`` after every
reconcile.  ``EXPORTED`` lists every metric name this module exports; the chart's dashboards and
alerts are tested against it.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import kopf
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry()

RECONCILE_TOTAL = Counter(
    "strom_operator_reconcile_total",
    "Reconciles by kind and result (ok, error, invalid).",
    ["kind", "result"],
    registry=REGISTRY,
)
RECONCILE_SECONDS = Histogram(
    "strom_operator_reconcile_duration_seconds",
    "Time one reconcile took.",
    ["kind"],
    registry=REGISTRY,
)
BROKERS_DESIRED = Gauge(
    "strom_operator_cluster_brokers_desired",
    "spec.brokers.replicas",
    ["namespace", "cluster"],
    registry=REGISTRY,
)
BROKERS_READY = Gauge(
    "strom_operator_cluster_brokers_ready",
    "Ready broker pods",
    ["namespace", "cluster"],
    registry=REGISTRY,
)
UNDER_REPLICATED = Gauge(
    "strom_operator_cluster_under_replicated_partitions",
    "Partitions with fewer in-sync replicas than replicas (from the Admin API).",
    ["namespace", "cluster"],
    registry=REGISTRY,
)
OFFLINE = Gauge(
    "strom_operator_cluster_offline_partitions",
    "Partitions without a leader (from the Admin API).",
    ["namespace", "cluster"],
    registry=REGISTRY,
)
REBALANCING = Gauge(
    "strom_operator_cluster_rebalancing",
    "1 while the operator moves partitions (condition Rebalancing=True), else 0.",
    ["namespace", "cluster"],
    registry=REGISTRY,
)
REBALANCE_MOVES = Gauge(
    "strom_operator_rebalance_moves",
    "Replica moves of the current or last rebalance or drain (status.rebalance.movesTotal).",
    ["namespace", "cluster"],
    registry=REGISTRY,
)
REBALANCE_MOVING = Gauge(
    "strom_operator_rebalance_partitions_moving",
    "Partitions still being moved (status.rebalance.partitionsMoving; 0 when none).",
    ["namespace", "cluster"],
    registry=REGISTRY,
)
REBALANCE_PERCENT = Gauge(
    "strom_operator_rebalance_percent",
    "Progress of the current or last rebalance, 0-100 (status.rebalance.percent).",
    ["namespace", "cluster"],
    registry=REGISTRY,
)
GROUP_LAG = Gauge(
    "strom_operator_consumer_group_lag",
    "Total lag of a StromConsumerGroup (records).",
    ["namespace", "group"],
    registry=REGISTRY,
)

#: Every metric name exported here, including the suffixes Prometheus adds.
EXPORTED = frozenset(
    {
        "strom_operator_reconcile_total",
        "strom_operator_reconcile_duration_seconds_bucket",
        "strom_operator_reconcile_duration_seconds_sum",
        "strom_operator_reconcile_duration_seconds_count",
        "strom_operator_cluster_brokers_desired",
        "strom_operator_cluster_brokers_ready",
        "strom_operator_cluster_under_replicated_partitions",
        "strom_operator_cluster_offline_partitions",
        "strom_operator_consumer_group_lag",
        "strom_operator_cluster_rebalancing",
        "strom_operator_rebalance_moves",
        "strom_operator_rebalance_partitions_moving",
        "strom_operator_rebalance_percent",
    }
)

#: ``STROM_OPERATOR_METRICS_PORT`` overrides the port; 0 disables the endpoint (tests).
PORT = int(os.environ.get("STROM_OPERATOR_METRICS_PORT", "8081"))


def record_cluster_status(namespace: str, cluster: str, status: dict[str, Any]) -> None:
    if "ready" in status:
        ready, _, desired = str(status["ready"]).partition("/")
        BROKERS_READY.labels(namespace, cluster).set(float(ready or 0))
        BROKERS_DESIRED.labels(namespace, cluster).set(float(desired or 0))
    if "underReplicatedPartitions" in status:
        UNDER_REPLICATED.labels(namespace, cluster).set(float(status["underReplicatedPartitions"]))
    if "offlinePartitions" in status:
        OFFLINE.labels(namespace, cluster).set(float(status["offlinePartitions"]))
    record_rebalance(namespace, cluster, status)


def record_rebalance(namespace: str, cluster: str, status: dict[str, Any]) -> None:
    """Rebalancing progress from ``status.rebalance`` and the Rebalancing condition; a cluster
    that never rebalanced shows 0 moving and 100 percent (nothing to do), so the series exist."""
    conditions = status.get("conditions") or []
    rebalancing = any(
        c.get("type") == "Rebalancing" and c.get("status") == "True" for c in conditions
    )
    block = status.get("rebalance") or {}
    REBALANCING.labels(namespace, cluster).set(1.0 if rebalancing else 0.0)
    REBALANCE_MOVES.labels(namespace, cluster).set(float(block.get("movesTotal") or 0))
    REBALANCE_MOVING.labels(namespace, cluster).set(float(block.get("partitionsMoving") or 0))
    percent = block.get("percent")
    if percent is None and not block.get("partitionsMoving"):
        percent = 100.0
    if percent is not None:
        REBALANCE_PERCENT.labels(namespace, cluster).set(float(percent))


@kopf.on.startup()
def serve_metrics(**_: Any) -> None:
    # OSError: already serving (a restarted operator loop in the same process, or tests).
    port = int(os.environ.get("STROM_OPERATOR_METRICS_PORT", str(PORT)))
    if port == 0:
        return
    with contextlib.suppress(OSError):
        start_http_server(port, registry=REGISTRY)
