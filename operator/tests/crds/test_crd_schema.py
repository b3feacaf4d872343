"""The CRDs: names, subresources, printer columns, schema facts and CEL rule placement."""

from __future__ import annotations

import kubernetes_validate
import pytest

from strom_operator.model import specs
from strom_operator.model.fields import Rule, class_rules, constraints_of
from tests.helpers import K8S_VERSION, crd_for

KINDS = ["StromCluster", "StromTopic", "StromConsumerGroup"]


@pytest.mark.parametrize("kind", KINDS)
def test_crd_is_a_valid_kubernetes_object(kind):
    kubernetes_validate.validate(crd_for(kind), K8S_VERSION, strict=True)


@pytest.mark.parametrize("kind", KINDS)
def test_names_and_categories(kind):
    names = crd_for(kind)["spec"]["names"]
    assert "sc" not in names["shortNames"]
    assert names["categories"] == ["strom"]
    assert crd_for(kind)["spec"]["group"] == "strom.dev"
    assert crd_for(kind)["spec"]["versions"][0]["name"] == "v1alpha1"


def test_short_names():
    assert crd_for("StromCluster")["spec"]["names"]["shortNames"] == ["strc"]
    assert crd_for("StromTopic")["spec"]["names"]["shortNames"] == ["stt"]
    assert crd_for("StromConsumerGroup")["spec"]["names"]["shortNames"] == ["stcg"]


def test_cluster_scale_subresource():
    version = crd_for("StromCluster")["spec"]["versions"][0]
    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.brokers.replicas",
        "statusReplicasPath": ".status.brokers",
        "labelSelectorPath": ".status.selector",
    }
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["brokers"]["type"] == "integer" and status["selector"]["type"] == "string"


def test_printer_columns():
    def cols(kind):
        return {c["name"] for c in crd_for(kind)["spec"]["versions"][0]["additionalPrinterColumns"]}

    assert {"Ready", "Brokers", "Partitions", "Age"} <= cols("StromCluster")
    assert {"Ready", "Partitions", "Age"} <= cols("StromTopic")
    assert {"Ready", "Lag", "Age"} <= cols("StromConsumerGroup")


def _spec_schema(kind):
    return crd_for(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_schema_facts():
    cluster = _spec_schema("StromCluster")
    assert cluster["required"] == ["storage"]
    replicas = cluster["properties"]["brokers"]["properties"]["replicas"]
    assert (replicas["type"], replicas["minimum"], replicas["default"]) == ("integer", 1, 3)
    assert cluster["properties"]["brokers"]["default"] == {}
    assert cluster["properties"]["controllers"]["properties"]["replicas"]["enum"] == [1, 3, 5]
    assert "pattern" in cluster["properties"]["storage"]["properties"]["size"]
    topic = _spec_schema("StromTopic")
    assert topic["properties"]["deletionPolicy"]["enum"] == ["Delete", "Retain"]
    assert topic["properties"]["deletionPolicy"]["default"] == "Retain"


def test_partitions_transition_rule_sits_on_the_field():
    partitions = _spec_schema("StromTopic")["properties"]["partitions"]
    rules = partitions["x-kubernetes-validations"]
    assert rules[0]["rule"] == "self >= oldSelf"
    assert rules[0]["reason"] == "FieldValueForbidden"


def _all_rules():
    import dataclasses
    import typing

    seen: list[Rule] = []

    def walk(cls):
        seen.extend(class_rules(cls))
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            seen.extend(constraints_of(f).rules)
            tp = hints[f.name]
            for arg in (tp, *typing.get_args(tp)):
                if isinstance(arg, type) and dataclasses.is_dataclass(arg):
                    walk(arg)

    for cls in (specs.StromClusterSpec, specs.StromTopicSpec, specs.StromConsumerGroupSpec):
        walk(cls)
    return {r.name: r for r in seen}


def _cel_in(doc):
    out = []
    if isinstance(doc, dict):
        out += [v["rule"] for v in doc.get("x-kubernetes-validations", [])]
        for v in doc.values():
            out += _cel_in(v)
    elif isinstance(doc, list):
        for v in doc:
            out += _cel_in(v)
    return out


def test_every_cel_rule_in_the_crds_has_a_python_twin():
    twins = {r.cel for r in _all_rules().values()}
    for kind in KINDS:
        for cel in _cel_in(crd_for(kind)):
            assert cel in twins, f"CEL rule without a Python twin: {cel}"


def test_transition_rules_are_not_under_lists():
    """CEL transition rules need a correlatable old value: never below an array."""

    def walk(doc, under_list):
        if isinstance(doc, dict):
            for v in doc.get("x-kubernetes-validations", []):
                if "oldSelf" in v["rule"]:
                    assert not under_list, v
            for k, v in doc.items():
                walk(v, under_list or k == "items")
        elif isinstance(doc, list):
            for v in doc:
                walk(v, under_list)

    for kind in KINDS:
        walk(_spec_schema(kind), False)


# The Python twins of the CEL rules, exercised directly (the API server runs the CEL).
def test_cel_twins_behave():
    rules = _all_rules()
    grow = rules["partitions-only-grow"].check
    assert grow(6, 3) and grow(3, 3) and not grow(2, 3)
    storage = rules["storage-size-no-shrink"].check
    small = specs.Storage(size="10Gi")
    big = specs.Storage(size="20Gi")
    assert storage(big, small) and not storage(small, big)
    assert storage(specs.Storage(size="10240Mi"), small)
    owned = rules["config-no-operator-keys"].check
    assert owned({"num.partitions": 3}, None) and not owned({"log.dirs": "/x"}, None)
    reset = rules["reset-offsets-needs-value"].check
    assert reset(specs.ResetOffsets(to="earliest"), None)
    assert not reset(specs.ResetOffsets(to="offset"), None)
    assert reset(specs.ResetOffsets(to="offset", offset=5), None)
    known = rules["topic-config-known-keys"].check
    assert known({"retention.ms": 1}, None) and not known({"retention.msec": 1}, None)
    assert all(r.is_transition == ("oldSelf" in r.cel) for r in rules.values())


def _typed(node):
    """What the API server needs to give a schema node a CEL type (its declType)."""
    return "type" in node or node.get("x-kubernetes-int-or-string") is True


def _untyped_under_rules(node, path, under_rule):
    """Paths of schema nodes at or below a CEL rule that have no type.

    Kubernetes compiles each rule against the types of the whole subtree it sees; a node that is
    only ``x-kubernetes-preserve-unknown-fields`` has none, and the CRD is refused with "failed
    to convert to declType for CEL validation rules" (measured on 1.34; kubernetes-validate and
    jsonschema do not compile CEL, so they never caught it).
    """
    under_rule = under_rule or bool(node.get("x-kubernetes-validations"))
    out = [path] if under_rule and not _typed(node) else []
    for key, child in node.get("properties", {}).items():
        out += _untyped_under_rules(child, f"{path}.{key}", under_rule)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            out += _untyped_under_rules(node[key], f"{path}.{key}", under_rule)
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_every_schema_node_a_cel_rule_sees_has_a_type(kind):
    assert _untyped_under_rules(_spec_schema(kind), "spec", False) == []


def test_the_typed_check_finds_the_schema_kubernetes_refused():
    """The schema 1.34 refused (config values with no type under a CEL rule) fails the check."""
    refused = {
        "type": "object",
        "x-kubernetes-validations": [{"rule": "self.all(k, k != 'x')"}],
        "additionalProperties": {"x-kubernetes-preserve-unknown-fields": True},
    }
    assert _untyped_under_rules(refused, "config", False) == ["config.additionalProperties"]


@pytest.mark.parametrize("kind", KINDS)
def test_maps_and_lists_a_rule_iterates_are_bounded(kind):
    """A rule that walks a map or list is costed by the largest one the schema allows: without
    maxProperties/maxItems the config rules exceeded the API server's budget (by 1.3x on 1.34)."""

    def walk(node, path):
        bad = []
        rules = [v["rule"] for v in node.get("x-kubernetes-validations", [])]
        iterates = any(f"self.{m}(" in r for r in rules for m in ("all", "exists", "map", "filter"))
        if iterates and "maxProperties" not in node and "maxItems" not in node:
            bad.append(path)
        for key, child in node.get("properties", {}).items():
            bad += walk(child, f"{path}.{key}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                bad += walk(node[key], f"{path}.{key}")
        return bad

    assert walk(_spec_schema(kind), "spec") == []


@pytest.mark.parametrize("kind", ["StromCluster", "StromTopic"])
def test_config_values_are_int_or_string_and_booleans_are_quoted(kind):
    config = _spec_schema(kind)["properties"]["config"]
    assert config["additionalProperties"] == {"x-kubernetes-int-or-string": True}
    assert config["maxProperties"] == 256
    assert 'quote booleans and fractions, e.g. "true"' in config["description"]
