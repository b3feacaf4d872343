"""The Helm chart without helm (not installable here): static checks of every file.

Checked: Chart.yaml and values.yaml parse; every ``.Values.x.y`` a template uses exists in
values.yaml; the templates' ``{{ }}`` blocks balance; dashboards are valid Grafana JSON with unique
uids; the dashboards' ConfigMap template carries the configurable sidecar label (default
``grafana_dashboard: "1"``); RBAC names the verbs the operator uses and nothing cluster-wide
beyond them; the PrometheusRule rules pass ``promtool check rules`` (skipped without promtool).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from tests.helpers import CHART

TEMPLATES = sorted((CHART / "templates").glob("*"))


def values():
    return yaml.safe_load((CHART / "values.yaml").read_text())


def test_chart_metadata():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "strom"
    assert re.match(r"^\d+\.\d+\.\d+$", chart["version"])


def test_values_referenced_by_templates_exist():
    v = values()
    for path in TEMPLATES:
        for ref in re.findall(r"\.Values\.([A-Za-z0-9_.]+)", path.read_text()):
            node = v
            for key in ref.split("."):
                assert isinstance(node, dict) and key in node, f"{path.name}: .Values.{ref} missing"
                node = node[key]


def test_template_delimiters_balance():
    for path in TEMPLATES:
        text = path.read_text()
        assert text.count("{{") == text.count("}}"), path.name
        opens = len(re.findall(r"{{-?\s*(if|range|with|define)\b", text))
        ends = len(re.findall(r"{{-?\s*end\b", text))
        assert opens == ends, f"{path.name}: {opens} blocks opened, {ends} closed"


def test_values_defaults():
    v = values()
    assert v["watch"]["clusterWide"] is True
    assert v["dashboards"]["label"] == "grafana_dashboard" and v["dashboards"]["labelValue"] == "1"
    assert {
        "serviceMonitor",
        "prometheusRule",
        "dashboards",
        "image",
        "resources",
        "logLevel",
    } <= set(v)


def test_dashboards_are_grafana_json():
    uids = set()
    paths = sorted((CHART / "files" / "grafana-dashboards").glob("*.json"))
    assert {p.stem for p in paths} == {"cluster-overview", "topics", "consumer-groups", "operator"}
    for path in paths:
        doc = json.loads(path.read_text())
        assert doc["uid"] not in uids
        uids.add(doc["uid"])
        assert doc["title"].startswith("Strom / ") and doc["panels"]
        for panel in doc["panels"]:
            assert panel["targets"] and all(t["expr"] for t in panel["targets"])


def test_dashboard_configmaps_use_the_sidecar_label():
    text = (CHART / "templates" / "dashboards.yaml").read_text()
    assert '.Files.Glob "files/grafana-dashboards/*.json"' in text
    assert "{{ $.Values.dashboards.label }}: {{ $.Values.dashboards.labelValue | quote }}" in text


def test_rbac_least_privilege():
    text = (CHART / "templates" / "rbac.yaml").read_text()
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert "kind: Role\n" in text and "kind: ClusterRole\n" in text  # both watch modes
    assert "'*'" not in text + helpers and '"*"' not in text + helpers
    assert "resourceNames: [strom-broker-rack]" in text and "verbs: [bind]" in text
    for needed in (
        "stromclusters/status",
        "statefulsets",
        "poddisruptionbudgets",
        "persistentvolumeclaims",
        "events",
    ):
        assert needed in helpers


def _rules_with_defaults(tmp_path):
    v = values()["prometheusRule"]
    text = (CHART / "files" / "prometheus-rules.yaml").read_text()
    text = text.replace("__CONSUMER_LAG_THRESHOLD__", str(v["consumerLagThreshold"]))
    text = text.replace("__DISK_USAGE_THRESHOLD__", str(v["diskUsageThreshold"]))
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    return path


def test_alerts_cover_the_issue(tmp_path):
    rules = yaml.safe_load(_rules_with_defaults(tmp_path).read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {
        "StromUnderReplicatedPartitions",
        "StromOfflinePartitions",
        "StromBrokerDown",
        "StromConsumerGroupLag",
        "StromBrokerDiskAlmostFull",
    } <= alerts
    assert "__" not in json.dumps(rules)


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)"
)
def test_promtool_check_rules(tmp_path):
    path = _rules_with_defaults(tmp_path)
    result = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_chart_crds_are_the_generated_ones():
    assert sorted(p.name for p in (CHART / "crds").glob("*.yaml")) == [
        "stromclusters.strom.dev.yaml",
        "stromconsumergroups.strom.dev.yaml",
        "stromtopics.strom.dev.yaml",
    ]
