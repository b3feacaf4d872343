"""Every topic config key, walked through the StromTopic CRD, the operator's spec parser and a real
broker: all three accept it or all three refuse it.

The keys walked are the union of what each layer knows, plus every topic config Kafka has, so a
key one layer adds alone (the drift this test was written for: a CRD that accepted
``compression.type`` which the broker refused, and refused ``index.interval.bytes`` which the
broker accepted) fails here. The CRD's CEL rules on ``spec.config`` are evaluated from the
generated file itself; a rule of a shape this test does not know fails it rather than being
skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from strom.broker.config import BrokerConfig, ConfigError
from strom.broker.config_keys import KEYS as BROKER_KEYS
from strom.client import Admin
from strom.client.models import NewTopic
from strom.storage.config import TOPIC_CONFIG_DEFS, UNSUPPORTED_MESSAGE, UNSUPPORTED_TOPIC_CONFIGS
from strom.testing import BrokerProcess, running_broker
from strom_operator.model import specs
from strom_operator.model.errors import SpecError
from tests.helpers import crd_for, validator_for

#: Kafka's topic configs (``TopicConfig`` in Apache Kafka 3.x/4.x).
KAFKA_TOPIC_CONFIGS = (
    "cleanup.policy", "compression.gzip.level", "compression.lz4.level", "compression.type",
    "compression.zstd.level", "delete.retention.ms", "file.delete.delay.ms", "flush.messages",
    "flush.ms", "follower.replication.throttled.replicas", "index.interval.bytes",
    "leader.replication.throttled.replicas", "local.retention.bytes", "local.retention.ms",
    "max.compaction.lag.ms", "max.message.bytes", "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.type", "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms", "min.insync.replicas", "preallocate", "remote.storage.enable",
    "retention.bytes", "retention.ms", "segment.bytes", "segment.index.bytes",
    "segment.jitter.ms", "segment.ms", "unclean.leader.election.enable",
)
#: A valid value for keys no layer implements (so only the key decides).
SAMPLE = {"compression.type": "zstd", "min.cleanable.dirty.ratio": "0.5", "preallocate": "false",
          "cleanup.policy": "compact"}

_ALL = re.compile(r"^self\.all\(k, k in (\[.*\])\)$")
_NONE = re.compile(r"^!self\.exists\(k, k in (\[.*\])\)$")


def _config_rules() -> list[dict[str, Any]]:
    spec = crd_for("StromTopic")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return list(spec["properties"]["spec"]["properties"]["config"]["x-kubernetes-validations"])


def crd_refusal(key: str) -> str | None:
    """The message of the first CEL rule on ``spec.config`` that refuses ``{key: ...}``."""
    for rule in _config_rules():
        text = " ".join(rule["rule"].split())
        if (m := _ALL.match(text)) is not None:
            ok = key in json.loads(m.group(1))
        elif (m := _NONE.match(text)) is not None:
            ok = key not in json.loads(m.group(1))
        else:
            raise AssertionError(f"a CEL rule of a shape this test can not evaluate: {text}")
        if not ok:
            return str(rule["message"])
    return None


def _value(key: str) -> str:
    if key in SAMPLE:
        return SAMPLE[key]
    definition = TOPIC_CONFIG_DEFS.get(key)
    if definition is None:
        return "1000"
    value = definition.default
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _topic(key: str) -> dict[str, Any]:
    return {
        "apiVersion": "strom.dev/v1alpha1", "kind": "StromTopic",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {"clusterRef": {"name": "c"}, "partitions": 1, "replicationFactor": 1,
                 "config": {key: _value(key)}},
    }


def _keys() -> list[str]:
    crd_known: set[str] = set()
    for rule in _config_rules():
        m = _ALL.match(" ".join(rule["rule"].split()))
        if m is not None:
            crd_known |= set(json.loads(m.group(1)))
    return sorted(set(KAFKA_TOPIC_CONFIGS) | set(TOPIC_CONFIG_DEFS) | set(specs.TOPIC_CONFIG_KEYS)
                  | set(UNSUPPORTED_TOPIC_CONFIGS) | crd_known | {"retention.msec"})


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("broker")) as b:
        yield b


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[Admin]:
    with Admin(broker.bootstrap) as a:
        yield a


@pytest.mark.integration
@pytest.mark.parametrize("key", _keys())
def test_crd_operator_and_broker_agree(key: str, admin: Admin) -> None:
    doc = _topic(key)
    schema_errors = [e.message for e in validator_for("StromTopic").iter_errors(doc)]
    assert not schema_errors, schema_errors  # the value's type is never the question here
    crd_message = crd_refusal(key)
    try:
        specs.parse_topic(doc["spec"])
        operator_message = None
    except SpecError as err:
        operator_message = str(err)
    result = admin.create_topics([NewTopic("t", 1, 1, {key: _value(key)})], validate_only=True,
                                 raise_on_error=False)["t"]
    broker_message = None if result is None else result.message

    verdicts = {"crd": crd_message is None, "operator": operator_message is None,
                "broker": broker_message is None}
    assert len(set(verdicts.values())) == 1, (key, verdicts, crd_message, operator_message,
                                              broker_message)
    assert verdicts["broker"] == (key in TOPIC_CONFIG_DEFS)
    if key in UNSUPPORTED_TOPIC_CONFIGS:  # refused everywhere with the same message
        for message in (crd_message, operator_message, broker_message):
            assert UNSUPPORTED_MESSAGE in str(message), message
    elif broker_message is not None:  # the operator says what the broker says
        assert broker_message in str(operator_message)


def test_the_walk_covers_the_drift_that_was_found() -> None:
    keys = _keys()
    assert {"compression.type", "file.delete.delay.ms", "max.compaction.lag.ms",
            "min.cleanable.dirty.ratio", "index.interval.bytes"} <= set(keys)


def _cluster_errors(config: dict[str, str]) -> list[str]:
    spec = {"storage": {"size": "1Gi"}, "brokers": {"replicas": 3}, "config": config}
    try:
        specs.parse_cluster(spec)
    except SpecError as err:
        return [str(e) for e in err.errors]
    return []


@pytest.mark.parametrize("value", ["-7", "3", "not-a-number"])
@pytest.mark.parametrize("key", sorted(specs.USER_BROKER_KEYS))
def test_operator_checks_broker_keys_as_the_broker_does(key: str, value: str) -> None:
    try:
        BrokerConfig.from_mapping({key: value})
        broker_message = None
    except ConfigError as err:
        broker_message = str(err)
    operator_errors = _cluster_errors({key: value})
    if broker_message is None:
        assert not operator_errors, (key, value, operator_errors)
    else:
        assert any(broker_message in e for e in operator_errors), (key, broker_message,
                                                                   operator_errors)


def test_users_may_set_every_broker_key_the_operator_does_not_own() -> None:
    assert set(BROKER_KEYS) - set(specs.OPERATOR_OWNED_BROKER_KEYS) == specs.USER_BROKER_KEYS
    assert "group.max.size" in specs.USER_BROKER_KEYS
    assert _cluster_errors({"port": "9000"}), "an owned key is refused"
