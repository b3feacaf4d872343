"""Every example validates against our CRD schema and parses with the operator's model."""

from __future__ import annotations

import copy

import pytest

from strom_operator.model import specs
from tests.helpers import EXAMPLES, load_all, validator_for

PARSERS = {
    "StromCluster": specs.parse_cluster,
    "StromTopic": specs.parse_topic,
    "StromConsumerGroup": specs.parse_consumer_group,
}
DOCS = [(p.name, i, d) for p in sorted(EXAMPLES.glob("*.yaml")) for i, d in enumerate(load_all(p))]


def test_the_examples_cover_every_kind():
    assert {d["kind"] for _, _, d in DOCS} == set(PARSERS)
    cluster = next(d for _, _, d in DOCS if d["kind"] == "StromCluster")
    assert cluster["spec"]["brokers"]["replicas"] == 3
    assert cluster["spec"]["storage"]["size"] == "10Gi"
    group = next(d for _, _, d in DOCS if d["kind"] == "StromConsumerGroup")
    assert group["spec"]["autoscale"]["lagPerReplica"] > 0


@pytest.mark.parametrize(("name", "index", "doc"), DOCS, ids=[f"{n}#{i}" for n, i, _ in DOCS])
def test_example_validates(name, index, doc):
    validator = validator_for(doc["kind"])
    errors = sorted(validator.iter_errors(doc), key=str)
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
    PARSERS[doc["kind"]](doc["spec"])


def test_schema_rejects_what_the_model_rejects():
    cluster = copy.deepcopy(next(d for _, _, d in DOCS if d["kind"] == "StromCluster"))
    validator = validator_for("StromCluster")
    cluster["spec"]["brokers"]["replicas"] = 0
    cluster["spec"]["storage"]["size"] = "ten"
    cluster["spec"]["typo"] = 1
    paths = {tuple(e.path) for e in validator.iter_errors(cluster)}
    assert ("spec", "brokers", "replicas") in paths
    assert ("spec", "storage", "size") in paths
    assert ("spec",) in paths  # unknown field


@pytest.mark.parametrize("kind", ["StromCluster", "StromTopic"])
def test_config_takes_integers_and_strings_and_refuses_bare_booleans(kind):
    """The CRD's config values are int-or-string (the API server compiles CEL against a typed
    schema): an unquoted YAML boolean is refused, by the schema and by the operator's parser."""
    doc = copy.deepcopy(next(d for _, _, d in DOCS if d["kind"] == kind))
    validator = validator_for(kind)
    retention = "log.retention.ms" if kind == "StromCluster" else "retention.ms"
    doc["spec"]["config"] = {"unclean.leader.election.enable": "false", retention: 1000}
    assert not list(validator.iter_errors(doc))
    PARSERS[kind](doc["spec"])
    doc["spec"]["config"] = {"unclean.leader.election.enable": False}
    paths = {tuple(e.path) for e in validator.iter_errors(doc)}
    assert ("spec", "config", "unclean.leader.election.enable") in paths
    with pytest.raises(specs.SpecError) as err:
        PARSERS[kind](doc["spec"])
    assert 'quote it: unclean.leader.election.enable: "false"' in str(err.value)
    assert "spec.config[unclean.leader.election.enable]" in str(err.value)
