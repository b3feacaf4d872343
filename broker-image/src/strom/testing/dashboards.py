"""Grafana dashboards as the queries Grafana would send: every panel target of every dashboard,
with the dashboard's template variables filled in, ready for a real Prometheus to evaluate.

Pure (files in, strings out): the tests that run Prometheus against busy brokers, locally and on
Kubernetes, use it to prove that no panel of ours is empty. Grafana's built-in interval
variables are replaced by fixed windows (``$__rate_interval`` by ``rate_interval``), and each
template variable by the value the caller chooses; :func:`variable_queries` gives the
``label_values(...)`` lookups so a test can check its chosen value is one Grafana would offer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<match>.+),\s*)?(?P<label>\w+)\s*\)\s*$")


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    ref_id: str
    expr: str

    def __str__(self) -> str:
        return f"{self.dashboard} / {self.panel} [{self.ref_id}]: {self.expr}"


@dataclass(frozen=True)
class VariableQuery:
    dashboard: str
    name: str
    label: str
    match: str | None


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or [])  # collapsed rows hold their panels


def substitute(expr: str, values: Mapping[str, str], rate_interval: str = "1m") -> str:
    """``expr`` with ``$__rate_interval``/``$__interval``/``$__range`` and every ``$name`` /
    ``${name}`` of ``values`` replaced; a variable left over is an error naming it."""
    out = expr.replace("$__rate_interval", rate_interval).replace("$__interval", rate_interval)
    out = out.replace("$__range", "1h")
    for name in sorted(values, key=len, reverse=True):
        out = out.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    left = re.findall(r"\$\{?\w+", out)
    if left:
        raise ValueError(f"no value for template variable(s) {sorted(set(left))} in {expr!r}")
    return out


def panel_queries(path: Path, values: Mapping[str, str],
                  rate_interval: str = "1m") -> list[PanelQuery]:
    """Every target of every panel (rows included) of the dashboard at ``path``, filled in."""
    doc = load(path)
    out = []
    for panel in _panels(doc.get("panels") or []):
        for target in panel.get("targets") or []:
            expr = substitute(str(target["expr"]), values, rate_interval)
            out.append(PanelQuery(doc["title"], str(panel.get("title")),
                                  str(target.get("refId", "")), expr))
    return out


def variable_queries(path: Path, values: Mapping[str, str]) -> list[VariableQuery]:
    """The ``label_values`` template variables of the dashboard, with earlier variables filled
    into their match expressions (Grafana chains them the same way)."""
    doc = load(path)
    out = []
    for var in (doc.get("templating") or {}).get("list") or []:
        if var.get("type") != "query":
            continue
        query = var["query"]
        query = query.get("query", "") if isinstance(query, dict) else str(query)
        found = _LABEL_VALUES.match(query)
        if found is None:
            raise ValueError(f"{path.name}: variable {var['name']} is not a label_values() query: "
                             f"{query!r}")
        match = found["match"]
        out.append(VariableQuery(doc["title"], str(var["name"]), found["label"],
                                 substitute(match, values) if match else None))
    return out


def panel_count(path: Path) -> int:
    return sum(1 for p in _panels(load(path).get("panels") or []) if p.get("targets"))
