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
