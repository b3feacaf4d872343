"""Dashboards and alerts use only metrics that something really exports.

``USED`` is the one list of metric names the chart's Grafana dashboards and PrometheusRule use.
It must be a subset of what is exported: the broker's metrics (named by the broker's
``strom.broker`` metrics), the operator's own (``strom_operator.handlers.metrics.EXPORTED``) and
two well-known external sources (Prometheus' ``up``, the kubelet's volume stats).  A second test
extracts every metric-like name from the dashboards and rules, so ``USED`` can not fall behind.
"""

from __future__ import annotations

import json
import re

from strom_operator.handlers.metrics import EXPORTED as OPERATOR_EXPORTED
from tests.helpers import CHART

#: Exported by the broker (strom.broker), with the suffixes Prometheus adds to the histogram.
BROKER_EXPORTED = frozenset(
    {
        "strom_broker_bytes_in_total",
        "strom_broker_bytes_out_total",
        "strom_broker_messages_in_total",
        "strom_broker_requests_total",
        "strom_broker_request_duration_seconds_bucket",
        "strom_broker_request_duration_seconds_sum",
        "strom_broker_request_duration_seconds_count",
        "strom_log_size_bytes",
        "strom_log_end_offset",
        "strom_log_start_offset",
        "strom_broker_active_connections",
        "strom_broker_connections",
        "strom_broker_partitions",
    }
)
#: Not ours, but standard: Prometheus' scrape health and the kubelet's volume statistics.
EXTERNAL = frozenset(
    {
        "up",
        "kubelet_volume_stats_used_bytes",
        "kubelet_volume_stats_capacity_bytes",
    }
)
KNOWN = BROKER_EXPORTED | OPERATOR_EXPORTED | EXTERNAL

#: THE list: every metric the dashboards and alerts use.
USED = frozenset(
    {
        "up",
        "kubelet_volume_stats_used_bytes",
        "kubelet_volume_stats_capacity_bytes",
        "strom_broker_bytes_in_total",
        "strom_broker_bytes_out_total",
        "strom_broker_messages_in_total",
        "strom_broker_requests_total",
        "strom_broker_request_duration_seconds_bucket",
        "strom_broker_request_duration_seconds_sum",
        "strom_broker_request_duration_seconds_count",
        "strom_broker_active_connections",
        "strom_broker_connections",
        "strom_broker_partitions",
        "strom_log_size_bytes",
        "strom_log_end_offset",
        "strom_log_start_offset",
        "strom_operator_reconcile_total",
        "strom_operator_reconcile_duration_seconds_bucket",
        "strom_operator_reconcile_duration_seconds_sum",
        "strom_operator_reconcile_duration_seconds_count",
        "strom_operator_cluster_brokers_ready",
        "strom_operator_cluster_brokers_desired",
        "strom_operator_cluster_under_replicated_partitions",
        "strom_operator_cluster_offline_partitions",
        "strom_operator_consumer_group_lag",
    }
)

_NAME = re.compile(r"\b(up|kubelet_[a-z_]+|strom_[a-z_]+)\b(?=\s*[{\[)\s<>=*/+-]|$)")


def _exprs() -> list[str]:
    out = []
    for path in sorted((CHART / "files" / "grafana-dashboards").glob("*.json")):
        doc = json.loads(path.read_text())
        for panel in doc["panels"]:
            out += [t["expr"] for t in panel.get("targets", [])]
        for var in doc["templating"]["list"]:
            if var.get("type") == "query":
                out.append(str(var["query"]))
    rules = (CHART / "files" / "prometheus-rules.yaml").read_text()
    out += re.findall(r"expr:\s*(\|[\s\S]*?(?=\n\s+for:)|.+)", rules)
    return out


def test_used_metrics_are_all_exported():
    unknown = sorted(USED - KNOWN)
    assert not unknown, f"dashboards/alerts use metrics nobody exports: {unknown}"


def test_every_metric_in_the_chart_is_in_used():
    found = set()
    for expr in _exprs():
        found |= {m.group(1) for m in _NAME.finditer(expr)}
    assert found, "no metric names found: the extraction is broken"
    assert found <= USED, f"add to USED (and make sure they are exported): {sorted(found - USED)}"
    assert found >= USED, f"USED lists metrics no dashboard or alert uses: {sorted(USED - found)}"
