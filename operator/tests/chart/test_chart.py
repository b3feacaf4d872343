"""The Helm chart, rendered and linted by Helm's own Go library (``helm-python-sdk``; no ``helm``
binary and no cluster needed), for the default values and each documented variant.

Rendered objects must be valid Kubernetes objects (``kubernetes-validate``, strict); the
prometheus-operator kinds, which it has no schema for, are checked structurally. RBAC is compared
with what the operator's code says it touches (``reconcilers.kube.RESOURCES``), so the rules cannot
grow or shrink without a test noticing. A few checks stay static because rendering cannot catch
them: a ``.Values`` path that does not exist renders silently as empty.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from strom.testing.tools import require_tool
from strom_operator import main as operator_main
from strom_operator.model.manifests import RACK_CLUSTER_ROLE
from strom_operator.reconcilers.kube import RESOURCES
from tests.helpers import CHART, CRDS, K8S_VERSION

RELEASE = "rel"
NAMESPACE = "strom-system"
FULLNAME = "rel-strom"
WEBHOOK = f"{FULLNAME}-webhook"
#: Kinds kubernetes-validate has no schema for (prometheus-operator CRDs): checked structurally.
MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
DASHBOARDS = {"cluster-overview", "topics", "consumer-groups", "controller", "operator"}
RULE_TESTS = Path(__file__).with_name("prometheus-rules.test.yaml")

#: The documented variants of values.yaml (its comments and docs/operations.md).
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "namespaced": {"watch": {"clusterWide": False, "namespaces": ["team-a", "team-b"]}},
    "namespaced-release-ns": {"watch": {"clusterWide": False}},
    "monitoring": {
        "serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "prom"}},
        "podMonitor": {"enabled": True, "interval": "10s", "labels": {"release": "prom"}},
        "prometheusRule": {
            "enabled": True,
            "labels": {"release": "prom"},
            "consumerLagThreshold": 500,
            "diskUsageThreshold": 0.9,
        },
    },
    # Without the prometheus-operator CRDs on the API server, "auto" renders none of them.
    "monitoring-auto": {
        "serviceMonitor": {"enabled": "auto"},
        "podMonitor": {"enabled": "auto"},
        "prometheusRule": {"enabled": "auto"},
        "metrics": {"podAnnotations": False},
    },
    "no-dashboards": {"dashboards": {"enabled": False}},
    "dashboards-elsewhere": {
        "dashboards": {
            "namespace": "grafana",
            "label": "grafana_dashboard_strom",
            "labelValue": "yes",
            "annotations": {"grafana_folder": "Strom"},
        }
    },
    "custom": {
        "image": {
            "repository": "registry.example/strom-op",
            "tag": "9.9.9",
            "pullPolicy": "Always",
        },
        "imagePullSecrets": [{"name": "regcred"}],
        "logLevel": "DEBUG",
        "admin": {"timeoutMs": 1500, "rebalanceThrottleBytesPerSec": 0},
        "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "metrics": {"port": 9100},
        "serviceAccount": {"name": "strom-op", "annotations": {"iam.example/role": "x"}},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops"}],
        "podAnnotations": {"example/scrape": "true"},
    },
    "no-rbac-no-sa": {"rbac": {"create": False}, "serviceAccount": {"create": False}},
    "no-webhook": {"webhook": {"enabled": False}},
}


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart: helm.Chart, values: dict[str, Any]) -> list[dict[str, Any]]:
    rendered = chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return [
        doc
        for text in rendered.values()
        for doc in yaml.safe_load_all(text)
        if doc  # templates disabled by a value render as empty documents
    ]


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def kinds(objs: list[dict[str, Any]]) -> list[str]:
    return sorted(o["kind"] for o in objs)


# ---------------------------------------------------------------------------------------------
# helm lint, schema validity, inventory


@pytest.mark.parametrize("variant", VARIANTS)
def test_helm_lint_strict(variant):
    report = helm.lint(
        CHART, VARIANTS[variant], strict=True, namespace=NAMESPACE, kube_version="v1.31.0"
    )
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors
    assert report["total_charts_linted"] == 1
    assert not problems and not report["errors"], problems or report["errors"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_rendered_object_is_valid_kubernetes(chart, variant):
    objs = render(chart, VARIANTS[variant])
    assert objs
    seen = set()
    for obj in objs:
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace"), meta["name"])
        assert key not in seen, f"rendered twice: {key}"
        seen.add(key)
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert meta["labels"]["app.kubernetes.io/instance"] == RELEASE
        if obj["kind"] in MONITORING_KINDS:
            continue  # checked in test_service_monitor_* and test_prometheus_rule_*
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_inventory_per_variant(chart):
    webhook = ["Service", "Secret", "ValidatingWebhookConfiguration"]
    webhook_rbac = ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"]
    base = ["ClusterRole", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service",
            *webhook, *webhook_rbac]
    rbac_cluster_wide = ["ClusterRole", "ClusterRoleBinding"]
    dashboards = ["ConfigMap"] * len(DASHBOARDS)
    sa = ["ServiceAccount"]
    expected = {
        "defaults": base + rbac_cluster_wide + dashboards + sa,
        "namespaced": [*base, "Role", "Role", "RoleBinding", "RoleBinding", *dashboards, *sa],
        "namespaced-release-ns": [*base, "Role", "RoleBinding", *dashboards, *sa],
        "monitoring": [
            *base,
            *rbac_cluster_wide,
            *dashboards,
            *sa,
            "PodMonitor",
            "PrometheusRule",
            "ServiceMonitor",
        ],
        "monitoring-auto": base + rbac_cluster_wide + dashboards + sa,
        "no-dashboards": base + rbac_cluster_wide + sa,
        "dashboards-elsewhere": base + rbac_cluster_wide + dashboards + sa,
        "custom": base + rbac_cluster_wide + dashboards + sa,
        "no-rbac-no-sa": ["Deployment", "Service", *webhook, *dashboards],
        "no-webhook": ["ClusterRole", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service",
                       *rbac_cluster_wide, *dashboards, *sa],
    }
    assert set(expected) == set(VARIANTS)
    for variant, want in expected.items():
        assert kinds(render(chart, VARIANTS[variant])) == sorted(want), variant


def test_namespaced_objects_carry_the_release_namespace(chart):
    for variant in VARIANTS:
        for obj in render(chart, VARIANTS[variant]):
            if obj["kind"] in {"ClusterRole", "ClusterRoleBinding",
                               "ValidatingWebhookConfiguration"}:
                assert "namespace" not in obj["metadata"]
            elif obj["kind"] in {"Role", "RoleBinding"}:
                assert obj["metadata"]["namespace"] in {NAMESPACE, "team-a", "team-b"}
            elif obj["kind"] == "ConfigMap" and variant == "dashboards-elsewhere":
                assert obj["metadata"]["namespace"] == "grafana"
            else:
                assert obj["metadata"]["namespace"] == NAMESPACE, (variant, obj["kind"])


def test_crds_installed_are_exactly_the_generated_ones(chart):
    crds = {Path(c["filename"]).name: c["data"] for c in chart.crds}
    files = {p.name: p.read_text() for p in sorted(CRDS.glob("*.yaml"))}
    generated = {
        "stromclusters.strom.dev.yaml",
        "stromconsumergroups.strom.dev.yaml",
        "stromtopics.strom.dev.yaml",
    }
    assert crds.keys() == files.keys() == generated
    for name, text in files.items():
        assert yaml.safe_load(crds[name]) == yaml.safe_load(text), name
    # Templates never install CRDs (Helm's crds/ directory does, before the templates).
    for variant in VARIANTS:
        assert "CustomResourceDefinition" not in kinds(render(chart, VARIANTS[variant]))


# ---------------------------------------------------------------------------------------------
# values.schema.json


def _schema_paths(schema: dict[str, Any], prefix: str = "") -> set[str]:
    out = set()
    for key, sub in schema.get("properties", {}).items():
        out.add(prefix + key)
        out |= _schema_paths(sub, f"{prefix}{key}.")
    return out


def _value_paths(values: dict[str, Any], schema: dict[str, Any], prefix: str = "") -> set[str]:
    """Paths of values.yaml down to where the schema stops listing properties (free-form
    objects such as resources.requests or nodeSelector)."""
    out = set()
    for key, sub in values.items():
        out.add(prefix + key)
        sub_schema = schema.get("properties", {}).get(key, {})
        if isinstance(sub, dict) and "properties" in sub_schema:
            out |= _value_paths(sub, sub_schema, f"{prefix}{key}.")
    return out


def test_schema_covers_values_yaml_and_the_templates(chart):
    schema = chart.schema
    assert schema is not None
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    known = _schema_paths(schema)
    assert _value_paths(values, schema) <= known
    # Every .Values path a template uses is a default in values.yaml and in the schema (Helm
    # renders a missing path as empty, silently).
    for path in sorted((CHART / "templates").glob("*")):
        for ref in re.findall(r"\.Values\.([A-Za-z0-9_.]+)", path.read_text()):
            node = values
            for key in ref.split("."):
                assert isinstance(node, dict) and key in node, f"{path.name}: .Values.{ref} missing"
                node = node[key]
            assert ref in known, f"{path.name}: .Values.{ref} not in values.schema.json"


@pytest.mark.parametrize("variant", VARIANTS)
def test_schema_accepts_the_documented_variants(chart, variant):
    chart.validate_schema(chart.merge_values(VARIANTS[variant]))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"logLevel": "TRACE"}, "/logLevel"),
        ({"replicaCount": 2}, "/replicaCount"),
        ({"watch": {"clusterwide": False}}, "clusterwide"),
        ({"watch": {"clusterWide": "no"}}, "/watch/clusterWide"),
        ({"watch": {"namespaces": ["Team_A"]}}, "/watch/namespaces/0"),
        ({"image": {"tag": 1.2}}, "/image/tag"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"metrics": {"port": 8080}}, "/metrics/port"),
        ({"metrics": {"port": 0}}, "/metrics/port"),
        ({"admin": {"timeoutMs": 0}}, "/admin/timeoutMs"),
        ({"admin": {"rebalanceThrottleBytesPerSec": -1}}, "/admin/rebalanceThrottleBytesPerSec"),
        ({"prometheusRule": {"diskUsageThreshold": 1.5}}, "/prometheusRule/diskUsageThreshold"),
        ({"prometheusRule": {"consumerLagThreshold": "many"}}, "/prometheusRule/consumer"),
        ({"serviceMonitor": {"interval": "30"}}, "/serviceMonitor/interval"),
        ({"dashboards": {"labelValue": 1}}, "/dashboards/labelValue"),
        ({"logLevl": "INFO"}, "logLevl"),
    ],
)
def test_schema_rejects_bad_values_naming_them(chart, values, message):
    with pytest.raises(helm.HelmValuesError, match=re.escape(message)):
        chart.validate_schema(chart.merge_values(values))
    # helm install/template validate too: a bad value never renders.
    with pytest.raises(helm.HelmValuesError, match=re.escape(message)):
        chart.render(values=values, name=RELEASE, namespace=NAMESPACE)


# ---------------------------------------------------------------------------------------------
# the operator Deployment


def _container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") or e["valueFrom"]["fieldRef"]["fieldPath"]
            for e in container["env"]}


def test_deployment_defaults(chart):
    objs = render(chart, {})
    deploy = one(objs, "Deployment", FULLNAME)
    spec = deploy["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]
    assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["serviceAccountName"] == FULLNAME
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["runAsUser"] == 10001  # the image's user
    container = _container(objs)
    app_version = chart.metadata["appVersion"]
    assert container["image"] == f"ghcr.io/strom/strom-operator:{app_version}"
    assert container["imagePullPolicy"] == "IfNotPresent"
    # cluster-wide: no --namespace; the webhook flags are checked in the webhook's test
    assert [a for a in container["args"] if not a.startswith("--webhook-")] == [
        "--log-level=INFO"]
    assert _env(container) == {
        "STROM_OPERATOR_ADMIN_TIMEOUT_MS": "5000",
        "STROM_OPERATOR_REBALANCE_THROTTLE": "52428800",
        "STROM_OPERATOR_METRICS_PORT": "8081",
        "STROM_OPERATOR_NAMESPACE": "metadata.namespace",
        # the NetworkPolicy's operator rule selects these (the Deployment's selector labels)
        "STROM_OPERATOR_POD_LABELS": ",".join(
            f"{k}={v}" for k, v in spec["selector"]["matchLabels"].items()),
    }
    assert container["resources"] == {
        "requests": {"cpu": "50m", "memory": "128Mi"},
        "limits": {"memory": "256Mi"},
    }
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8081, "health": 8080, "webhook": 9443}
    # The liveness probe hits the endpoint strom-operator serves by default.
    default_liveness = operator_main.parse_args([]).liveness
    assert default_liveness == "http://0.0.0.0:8080/healthz"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_deployment_gets_custom_values(chart):
    objs = render(chart, VARIANTS["custom"])
    pod = one(objs, "Deployment")["spec"]["template"]
    container = _container(objs)
    assert container["image"] == "registry.example/strom-op:9.9.9"
    assert container["imagePullPolicy"] == "Always"
    assert [a for a in container["args"] if not a.startswith("--webhook-")] == [
        "--log-level=DEBUG"]
    env = _env(container)
    assert env.pop("STROM_OPERATOR_POD_LABELS").endswith("app.kubernetes.io/instance=rel")
    assert env.pop("STROM_OPERATOR_NAMESPACE") == "metadata.namespace"
    assert env == {
        "STROM_OPERATOR_ADMIN_TIMEOUT_MS": "1500",
        "STROM_OPERATOR_REBALANCE_THROTTLE": "0",
        "STROM_OPERATOR_METRICS_PORT": "9100",
    }
    assert container["resources"] == VARIANTS["custom"]["resources"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"] == 9100
    assert pod["metadata"]["annotations"] == {
        "example/scrape": "true",
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9100",
        "prometheus.io/path": "/metrics",
    }
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["spec"]["tolerations"] == VARIANTS["custom"]["tolerations"]
    assert pod["spec"]["serviceAccountName"] == "strom-op"
    sa = one(objs, "ServiceAccount")
    assert sa["metadata"]["name"] == "strom-op"
    assert sa["metadata"]["annotations"] == {"iam.example/role": "x"}
    for binding in (o for o in objs if o["kind"].endswith("Binding")):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "strom-op", "namespace": NAMESPACE}
        ]
    service = one(objs, "Service", f"{FULLNAME}-metrics")
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9100, "targetPort": "metrics"}]


def test_metrics_service_selects_the_operator_pod(chart):
    objs = render(chart, {})
    pod_labels = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    service = one(objs, "Service", f"{FULLNAME}-metrics")
    assert service["spec"]["selector"].items() <= pod_labels.items()


@pytest.mark.parametrize(
    ("variant", "namespaces"),
    [
        ("defaults", []),
        ("namespaced", ["team-a", "team-b"]),
        ("namespaced-release-ns", [NAMESPACE]),
    ],
)
def test_operator_parses_the_rendered_args(chart, variant, namespaces):
    """The rendered args are what ``strom-operator`` accepts, and mean the chosen watch mode."""
    args = operator_main.parse_args(_container(render(chart, VARIANTS[variant]))["args"])
    assert args.namespace == namespaces  # empty: kopf clusterwide=True
    assert args.log_level == "INFO"


DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


@pytest.mark.parametrize("release", ["a" * 53, "strom", "x"])  # 53: Helm's longest release name
def test_object_names_are_valid_and_unique_for_any_release_name(chart, release):
    """kubernetes-validate does not check names: a Service name over 63 characters, or
    dashboards whose truncated names collide, would only fail at install time."""
    helm.validate_release_name(release)
    rendered = chart.render(values={}, name=release, namespace=NAMESPACE)
    objs = [d for t in rendered.values() for d in yaml.safe_load_all(t) if d]
    names = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert len(names) == len(set(names)), names
    for kind, name in names:
        pattern = DNS_1035_LABEL if kind == "Service" else DNS_1123_SUBDOMAIN
        assert pattern.match(name), f"{kind} {name!r} ({len(name)} characters)"
    for obj in objs:
        assert all(len(v) <= 63 for v in obj["metadata"]["labels"].values())


def test_release_name_containing_strom_is_the_full_name(chart):
    rendered = chart.render(values={}, name="strom", namespace=NAMESPACE)
    objs = [d for t in rendered.values() for d in yaml.safe_load_all(t) if d]
    assert one(objs, "Deployment")["metadata"]["name"] == "strom"


# ---------------------------------------------------------------------------------------------
# RBAC: least privilege. Which resources: the operator's own table (reconcilers.kube.RESOURCES),
# plus what kopf needs. Which verbs: the table below, one line per resource saying who uses it.


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


RW = frozenset({"get", "list", "watch", "create", "patch", "delete"})
READ = frozenset({"get", "list", "watch"})
#: Verbs per (apiGroup, resource) inside each watched namespace. No `update` anywhere but
#: finalizers: neither kopf nor the operator sends PUT (patches, server-side apply, /scale).
NAMESPACED_VERBS: dict[tuple[str, str], frozenset[str]] = {
    # kopf watches and patches (finalizers, progress); reconcilers get clusters, list topics.
    ("strom.dev", "stromclusters"): READ | {"patch"},
    ("strom.dev", "stromtopics"): READ | {"patch"},
    ("strom.dev", "stromconsumergroups"): READ | {"patch"},
    ("strom.dev", "stromclusters/status"): frozenset({"patch"}),
    ("strom.dev", "stromtopics/status"): frozenset({"patch"}),
    ("strom.dev", "stromconsumergroups/status"): frozenset({"patch"}),
    # blockOwnerDeletion on owner references (OwnerReferencesPermissionEnforcement checks update).
    ("strom.dev", "stromclusters/finalizers"): frozenset({"update"}),
    # Applied per cluster (server-side apply: create + patch).
    ("", "configmaps"): RW,
    ("", "services"): RW,
    ("", "serviceaccounts"): RW,
    ("apps", "statefulsets"): RW,
    ("policy", "poddisruptionbudgets"): RW,
    ("networking.k8s.io", "networkpolicies"): RW,
    ("monitoring.coreos.com", "servicemonitors"): RW,
    # Rolling restarts delete pods one by one; volumes grow by patching their claims.
    ("", "pods"): READ | {"delete"},
    ("", "persistentvolumeclaims"): READ | {"patch"},
    # kopf's events (core API).
    ("", "events"): frozenset({"create"}),
    # StromConsumerGroup autoscaling: read the target, set replicas through /scale only.
    ("apps", "deployments"): frozenset({"get"}),
    ("apps", "deployments/scale"): frozenset({"patch"}),
    ("apps", "statefulsets/scale"): frozenset({"patch"}),
}
#: Cluster-scoped, in both watch modes.
CLUSTER_VERBS: dict[tuple[str, str], frozenset[str]] = {
    ("storage.k8s.io", "storageclasses"): frozenset({"get"}),  # can volumes grow?
    # Its own namespace's labels (is a NetworkPolicy enforced?): resourceNames-limited.
    ("", "namespaces"): frozenset({"get"}),
    # Brokers' rack bindings: applied, deleted with their StromCluster.
    ("rbac.authorization.k8s.io", "clusterrolebindings"): frozenset(
        {"get", "create", "patch", "delete"}
    ),
    ("rbac.authorization.k8s.io", "clusterroles"): frozenset({"bind"}),  # strom-broker-rack only
}
#: kopf watching every namespace observes CRDs (it lists namespaces only when it watches some).
CLUSTER_WIDE_VERBS: dict[tuple[str, str], frozenset[str]] = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): READ,
}


def test_verb_table_covers_exactly_what_the_operator_touches():
    touched = {(_group(av), plural): ns for (av, _), (plural, ns) in RESOURCES.items()}
    subresources = {k for k in NAMESPACED_VERBS if "/" in k[1]}
    assert set(NAMESPACED_VERBS) - subresources == {k for k, ns in touched.items() if ns}
    assert set(CLUSTER_VERBS) - {("rbac.authorization.k8s.io", "clusterroles")} == {
        k for k, ns in touched.items() if not ns
    }


def _rules(obj: dict[str, Any]) -> Iterator[tuple[str, str, frozenset[str], list[str] | None]]:
    for rule in obj["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                yield group, resource, frozenset(rule["verbs"]), rule.get("resourceNames")


def _grants(role: dict[str, Any]) -> dict[tuple[str, str], frozenset[str]]:
    out: dict[tuple[str, str], frozenset[str]] = {}
    for group, resource, verbs, _ in _rules(role):
        out[(group, resource)] = out.get((group, resource), frozenset()) | verbs
    return out


def _operator_roles(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The roles bound to the operator's ServiceAccount (not the brokers' strom-broker-rack)."""
    subject = [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
    bound = {
        (b["roleRef"]["kind"], b["metadata"].get("namespace"), b["roleRef"]["name"])
        for b in objs
        if b["kind"] in {"RoleBinding", "ClusterRoleBinding"} and b["subjects"] == subject
    }
    return [o for o in objs if (o["kind"], *_scope_and_name(o)) in bound]


def _scope_and_name(obj: dict[str, Any]) -> tuple[str | None, str]:
    namespace = obj["metadata"].get("namespace") if obj["kind"] == "Role" else None
    return namespace, obj["metadata"]["name"]


@pytest.mark.parametrize("variant", ["defaults", "namespaced", "namespaced-release-ns"])
def test_rbac_grants_exactly_what_the_operator_uses(chart, variant):
    objs = render(chart, VARIANTS[variant])
    cluster_wide = VARIANTS[variant].get("watch", {}).get("clusterWide", True)
    roles = [r for r in _operator_roles(objs) if r["metadata"]["name"] != WEBHOOK]
    watched = {NAMESPACE} if variant != "namespaced" else {"team-a", "team-b"}
    assert {r["metadata"]["namespace"] for r in roles if r["kind"] == "Role"} == (
        set() if cluster_wide else watched
    )
    cluster_grants: dict[tuple[str, str], frozenset[str]] = {}
    for role in roles:
        if role["kind"] == "Role":
            assert _grants(role) == NAMESPACED_VERBS, role["metadata"]["namespace"]
        else:
            for key, verbs in _grants(role).items():
                cluster_grants[key] = cluster_grants.get(key, frozenset()) | verbs
    if cluster_wide:
        assert cluster_grants == NAMESPACED_VERBS | CLUSTER_VERBS | CLUSTER_WIDE_VERBS
    else:  # nothing namespaced is granted cluster-wide
        assert cluster_grants == CLUSTER_VERBS

    for role in roles:
        for group, resource, verbs, names in _rules(role):
            assert "*" not in {group, resource, *verbs}
            if "bind" in verbs:  # bind only the brokers' rack role, nothing else
                assert resource == "clusterroles" and names == [RACK_CLUSTER_ROLE]
            elif resource == "namespaces":  # its own namespace only
                assert names == [NAMESPACE] and verbs == {"get"}
            else:
                assert names is None


def test_broker_rack_role_only_reads_nodes(chart):
    objs = render(chart, {})
    rack = one(objs, "ClusterRole", RACK_CLUSTER_ROLE)
    assert list(_rules(rack)) == [("", "nodes", {"get"}, None)]
    assert not [o for o in objs if o.get("roleRef", {}).get("name") == RACK_CLUSTER_ROLE]


def test_no_rbac_when_disabled(chart):
    objs = render(chart, VARIANTS["no-rbac-no-sa"])
    assert not [o for o in objs if o["apiVersion"].startswith("rbac.authorization.k8s.io/")]
    # Without a ServiceAccount of its own, the pod runs as the named (pre-existing) one.
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == FULLNAME


# ---------------------------------------------------------------------------------------------
# dashboards and prometheus-operator objects


def test_dashboards_are_grafana_json():
    uids = set()
    paths = sorted((CHART / "files" / "grafana-dashboards").glob("*.json"))
    assert {p.stem for p in paths} == DASHBOARDS
    for path in paths:
        doc = json.loads(path.read_text())
        assert doc["uid"] not in uids
        uids.add(doc["uid"])
        assert doc["title"].startswith("Strom / ") and doc["panels"]
        for panel in doc["panels"]:
            if panel["type"] == "row":
                assert not panel.get("targets") and panel["title"]
                continue
            assert panel["targets"] and all(t["expr"] for t in panel["targets"])


@pytest.mark.parametrize(
    ("variant", "namespace", "label", "value"),
    [
        ("defaults", NAMESPACE, "grafana_dashboard", "1"),
        ("dashboards-elsewhere", "grafana", "grafana_dashboard_strom", "yes"),
    ],
)
def test_dashboard_configmaps_for_the_grafana_sidecar(chart, variant, namespace, label, value):
    maps = [o for o in render(chart, VARIANTS[variant]) if o["kind"] == "ConfigMap"]
    assert len(maps) == len(DASHBOARDS)
    names = set()
    for cm in maps:
        assert cm["metadata"]["namespace"] == namespace
        assert cm["metadata"]["labels"][label] == value
        ((key, text),) = cm["data"].items()
        source = CHART / "files" / "grafana-dashboards" / key
        assert json.loads(text) == json.loads(source.read_text())
        names.add(cm["metadata"]["name"])
    assert names == {f"{FULLNAME}-dashboard-{d}" for d in DASHBOARDS}
    if variant == "dashboards-elsewhere":
        assert all(cm["metadata"]["annotations"] == {"grafana_folder": "Strom"} for cm in maps)


def test_service_monitor_scrapes_the_metrics_service(chart):
    objs = render(chart, VARIANTS["monitoring"])
    monitor = one(objs, "ServiceMonitor", FULLNAME)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    service = one(objs, "Service", f"{FULLNAME}-metrics")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    endpoint = {"port": "metrics", "path": "/metrics", "interval": "15s", "honorLabels": True}
    assert monitor["spec"]["endpoints"] == [endpoint]
    assert {p["name"] for p in service["spec"]["ports"]} == {"metrics"}
    assert set(monitor) == {"apiVersion", "kind", "metadata", "spec"}


def _prometheus_rule(chart: helm.Chart, values: dict[str, Any]) -> dict[str, Any]:
    rule = one(render(chart, values), "PrometheusRule", FULLNAME)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(rule["spec"]) == {"groups"}
    return rule


def test_prometheus_rule_alerts_and_thresholds(chart):
    rule = _prometheus_rule(chart, VARIANTS["monitoring"])
    assert rule["metadata"]["labels"]["release"] == "prom"
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert all(set(r) <= {"alert", "expr", "for", "labels", "annotations"} for r in rules)
    by_name = {r["alert"]: r for r in rules}
    assert {
        "StromUnderReplicatedPartitions",
        "StromOfflinePartitions",
        "StromBrokerDown",
        "StromConsumerGroupLag",
        "StromBrokerDiskAlmostFull",
    } <= set(by_name)
    assert "500" in str(by_name["StromConsumerGroupLag"]["expr"])
    assert "0.9" in str(by_name["StromBrokerDiskAlmostFull"]["expr"])
    assert "__" not in json.dumps(rule["spec"])


def test_promtool_check_rules(chart, tmp_path):
    promtool = require_tool("promtool", "Debian package prometheus")
    path = tmp_path / "rules.yaml"
    rule = _prometheus_rule(chart, {"prometheusRule": {"enabled": True}})
    path.write_text(yaml.safe_dump(rule["spec"]))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _alert_names(spec: dict[str, Any]) -> set[str]:
    return {r["alert"] for g in spec["groups"] for r in g["rules"] if "alert" in r}


def test_every_alert_has_a_case_that_fires_and_one_that_does_not(chart):
    """The promtool tests cover every alert both ways (and name no alert that does not exist)."""
    alerts = _alert_names(_prometheus_rule(chart, {"prometheusRule": {"enabled": True}})["spec"])
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert fires <= alerts and quiet <= alerts, sorted((fires | quiet) - alerts)
    assert not alerts - fires, f"no case where these fire: {sorted(alerts - fires)}"
    assert not alerts - quiet, f"no case where these stay quiet: {sorted(alerts - quiet)}"
    assert len(alerts) >= 13


def _promtool_test_rules(tmp_path, rules_yaml):
    """`promtool test rules` of the chart's alert tests against ``rules_yaml``."""
    promtool = require_tool("promtool", "Debian package prometheus")
    (tmp_path / "rules.yaml").write_text(rules_yaml)
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    return subprocess.run(
        [promtool, "test", "rules", RULE_TESTS.name],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


def test_promtool_test_rules(chart, tmp_path):
    """`promtool test rules` on the rules as the chart renders them with its default thresholds."""
    rule = _prometheus_rule(chart, {"prometheusRule": {"enabled": True}})
    result = _promtool_test_rules(tmp_path, yaml.safe_dump(rule["spec"]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_test_rules_catches_a_broken_alert(chart, tmp_path):
    """The alert tests can fail: a lag alert that never fires is caught."""
    rule = _prometheus_rule(chart, {"prometheusRule": {"enabled": True}})
    text = yaml.safe_dump(rule["spec"]).replace("> 10000", "> 1e12")
    assert text != yaml.safe_dump(rule["spec"])
    result = _promtool_test_rules(tmp_path, text)
    assert result.returncode != 0 and "StromConsumerGroupLag" in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("variant", "selector"),
    [("monitoring", {"any": True}), ("namespaced", {"matchNames": ["team-a", "team-b"]})],
)
def test_pod_monitor_scrapes_every_broker_pod(chart, variant, selector):
    values = {**VARIANTS[variant], "podMonitor": {"enabled": True, "interval": "10s"}}
    monitor = one(render(chart, values), "PodMonitor", f"{FULLNAME}-brokers")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["namespaceSelector"] == selector
    # The labels and port name the operator gives broker pods.
    from strom_operator.model import manifests

    broker_labels = manifests.selector_labels("any-cluster")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= broker_labels.items()
    assert monitor["spec"]["podMetricsEndpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "10s"}
    ]


def test_operator_pod_carries_scrape_annotations_by_default(chart):
    pod = one(render(chart, {}), "Deployment")["spec"]["template"]
    assert pod["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8081",
        "prometheus.io/path": "/metrics",
    }
    off = one(render(chart, VARIANTS["monitoring-auto"]), "Deployment")["spec"]["template"]
    assert "annotations" not in off["metadata"]


def test_documented_kubernetes_sd_config_matches_the_pods(chart):
    """The documented plain-Prometheus config selects the labels and annotations the chart and
    the operator put on pods (the kube test runs Prometheus with it for real)."""
    from strom_operator.model import manifests

    doc = yaml.safe_load((CHART.parents[1] / "docs" / "prometheus" / "kubernetes-sd-scrape.yaml")
                         .read_text())
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    assert set(jobs) == {"strom-brokers", "strom-operator"}
    broker_sel = jobs["strom-brokers"]["kubernetes_sd_configs"][0]["selectors"][0]["label"]
    labels = manifests.selector_labels("c")
    assert broker_sel == ",".join(
        f"{k}={labels[k]}" for k in ("app.kubernetes.io/name", "app.kubernetes.io/component")
    )
    deploy = one(render(chart, {}), "Deployment")["spec"]["template"]
    op_sel = jobs["strom-operator"]["kubernetes_sd_configs"][0]["selectors"][0]["label"]
    key, value = op_sel.split("=")
    assert deploy["metadata"]["labels"][key] == value
    assert jobs["strom-operator"]["honor_labels"] is True
    for job in jobs.values():
        keep = job["relabel_configs"][0]
        assert keep["source_labels"] == ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"]
        targets = {r.get("target_label") for r in job["relabel_configs"]}
        assert {"namespace", "pod", "container", "__metrics_path__", "__address__"} <= targets
        for rule in job["relabel_configs"]:
            # Prometheus' regexes are RE2: no backreferences (a `\1` fails the whole config).
            assert not re.search(r"\\[1-9]", str(rule.get("regex", ""))), rule


def test_chart_metadata(chart):
    meta = chart.metadata
    assert meta["apiVersion"] == "v2" and meta["name"] == "strom" and meta["type"] == "application"
    assert re.match(r"^\d+\.\d+\.\d+$", meta["version"])


# ---------------------------------------------------------------------------------------------
# The admission webhook: registered for the three kinds, served through its Service, its
# certificate kept by the operator (which may touch only that Secret and that configuration).


@pytest.mark.parametrize("variant", ["defaults", "namespaced"])
def test_webhook_is_registered_for_the_three_kinds_through_its_service(chart, variant):
    objs = render(chart, VARIANTS[variant])
    config = one(objs, "ValidatingWebhookConfiguration", FULLNAME)
    hooks = {h["rules"][0]["resources"][0]: h for h in config["webhooks"]}
    assert set(hooks) == {"stromclusters", "stromtopics", "stromconsumergroups"}
    service = one(objs, "Service", WEBHOOK)
    deployment = one(objs, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    port = {p["name"]: p["containerPort"] for p in container["ports"]}["webhook"]
    assert service["spec"]["ports"] == [{"name": "webhook", "port": 443,
                                         "targetPort": "webhook"}]
    assert container["readinessProbe"]["tcpSocket"]["port"] == "webhook"
    args = operator_main.parse_args(container["args"])
    assert (args.webhook_port, args.webhook_service, args.webhook_secret,
            args.webhook_configuration) == (port, WEBHOOK, f"{WEBHOOK}-tls", FULLNAME)
    for plural, hook in hooks.items():
        assert hook["clientConfig"]["service"] == {
            "name": WEBHOOK, "namespace": NAMESPACE, "path": f"/validate-{plural}", "port": 443}
        assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
        assert hook["sideEffects"] == "None" and hook["failurePolicy"] == "Fail"
        if variant == "namespaced":
            assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == [
                "team-a", "team-b"]
        else:
            assert "namespaceSelector" not in hook
    assert one(objs, "Secret", f"{WEBHOOK}-tls").get("data") is None  # the operator fills it


def test_webhook_rbac_is_its_own_secret_and_configuration_only(chart):
    objs = render(chart, {})
    role = one(objs, "Role", WEBHOOK)
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                              "resourceNames": [f"{WEBHOOK}-tls"], "verbs": ["get", "patch"]}]
    cluster_role = one(objs, "ClusterRole", WEBHOOK)
    assert cluster_role["rules"] == [{"apiGroups": ["admissionregistration.k8s.io"],
                                      "resources": ["validatingwebhookconfigurations"],
                                      "resourceNames": [FULLNAME], "verbs": ["get", "patch"]}]
    assert WEBHOOK in {r["metadata"]["name"] for r in _operator_roles(objs)}
    assert [o for o in render(chart, VARIANTS["no-webhook"])
            if o["kind"] == "ValidatingWebhookConfiguration"] == []
