"""Dashboards and alerts use only metrics that something really exports, and chart what brokers
export.

The names come from their one source each: ``strom.broker.metrics.EXPORTED`` (checked against a
busy cluster's real scrape by ``e2e/test_prometheus_dashboards.py``), the operator's
``strom_operator.handlers.metrics.EXPORTED``, and Prometheus' own ``up``.  Every metric-like name
in the dashboards and rules is extracted and must be one of them; every broker and operator metric
must be charted somewhere, except the few listed in ``NOT_CHARTED`` with the reason.
"""

from __future__ import annotations

import json
import re

from strom.broker.metrics import EXPORTED as BROKER_EXPORTED
from strom_operator.handlers.metrics import EXPORTED as OPERATOR_EXPORTED
from tests.helpers import CHART

#: Not ours, but standard: Prometheus' scrape health.
EXTERNAL = frozenset({"up"})
KNOWN = BROKER_EXPORTED | OPERATOR_EXPORTED | EXTERNAL

#: Exported but on no dashboard, and why.
NOT_CHARTED = {
    "strom_broker_info": "static build facts (version, cluster id), for joins and inventories",
    "strom_broker_connections_created_total": "accept rate; open connections are charted",
    "strom_broker_partition_errors_total": "only exists once an error happened (no series to "
    "chart on a healthy cluster); failed requests are charted",
    "strom_broker_request_duration_seconds_sum": "latency is charted as percentiles (_bucket)",
    "strom_broker_request_duration_seconds_count": "request rates come from requests_total",
}

_NAME = re.compile(r"\b(up|kubelet_[a-z_]+|strom_[a-z_]+)\b(?=\s*[{\[)\s<>=*/+-]|$)")


def _exprs() -> list[str]:
    out = []
    for path in sorted((CHART / "files" / "grafana-dashboards").glob("*.json")):
        doc = json.loads(path.read_text())
        for panel in doc["panels"]:
            out += [t["expr"] for t in panel.get("targets", [])]
            out += [t["expr"] for p in panel.get("panels", []) for t in p.get("targets", [])]
        for var in doc["templating"]["list"]:
            if var.get("type") == "query":
                out.append(str(var["query"]))
    rules = (CHART / "files" / "prometheus-rules.yaml").read_text()
    out += re.findall(r"expr:\s*(\|[\s\S]*?(?=\n\s+for:)|.+)", rules)
    return out


def _found() -> set[str]:
    found = set()
    for expr in _exprs():
        found |= {m.group(1) for m in _NAME.finditer(expr)}
    assert found, "no metric names found: the extraction is broken"
    return found


def test_every_metric_in_the_chart_is_exported():
    unknown = sorted(_found() - KNOWN)
    assert not unknown, f"dashboards/alerts use metrics nobody exports: {unknown}"


def test_every_exported_metric_is_charted():
    missing = sorted((BROKER_EXPORTED | OPERATOR_EXPORTED) - _found() - set(NOT_CHARTED))
    assert not missing, f"exported but on no dashboard or alert: {missing}"
    assert set(NOT_CHARTED) <= BROKER_EXPORTED | OPERATOR_EXPORTED
