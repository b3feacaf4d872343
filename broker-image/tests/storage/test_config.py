"""Topic config parsing with Kafka names, and DescribeConfigs entries."""

from __future__ import annotations

import pytest

from strom.protocol.errors import ErrorCode, StromError
from strom.storage import TOPIC_CONFIG_DEFS, LogConfig, parse_topic_configs, topic_config_entries


def test_defaults_are_kafkas():
    c = LogConfig()
    assert (c.segment_bytes, c.retention_ms, c.cleanup_policy) == (1073741824, 604800000,
                                                                   "delete")


def test_parse_overrides():
    c = parse_topic_configs({"retention.ms": "-1", "cleanup.policy": "delete,compact",
                             "message.timestamp.type": "LogAppendTime",
                             "unclean.leader.election.enable": "true",
                             "segment.bytes": "1048576"})
    assert c.retention_ms == -1 and c.compact and c.delete and c.log_append_time
    assert c.unclean_leader_election_enable and c.segment_bytes == 1048576
    assert parse_topic_configs({}, c) == c


@pytest.mark.parametrize("raw,fragment", [
    ({"retention.ms": "abc"}, "retention.ms='abc' is not an integer; use milliseconds, or -1"),
    ({"retention.ms": "-5"}, "out of range"),
    ({"cleanup.policy": "forever"}, "use delete, compact, or compact,delete"),
    ({"message.timestamp.type": "Now"}, "CreateTime, LogAppendTime"),
    ({"segment.bytes": "1"}, "segment.bytes='1'"),
    ({"unclean.leader.election.enable": "yes"}, "true or false"),
    ({"retention.msec": "1"}, "unknown topic config 'retention.msec'; valid keys are:"),
    ({"max.compaction.lag.ms": "0"}, "max.compaction.lag.ms='0' is out of range"),
    ({"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "1000"},
     "min.compaction.lag.ms=5000 is larger than max.compaction.lag.ms=1000"),
    ({"compression.type": "brotli"}, "use one of: producer, uncompressed, gzip"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "out of range [0, 1]"),
    ({"min.cleanable.dirty.ratio": "half"}, "is not a number"),
    ({"file.delete.delay.ms": "-1"}, "file.delete.delay.ms='-1' is out of range"),
])
def test_errors_name_key_value_and_fix(raw, fragment):
    with pytest.raises(StromError) as err:
        parse_topic_configs(raw)
    assert err.value.code is ErrorCode.INVALID_CONFIG
    assert fragment in err.value.message


def test_describe_entries():
    config = parse_topic_configs({"retention.ms": "1000"})
    entries = {n: (v, d) for n, v, d in topic_config_entries(config, {"retention.ms": "1000"})}
    assert set(entries) == set(TOPIC_CONFIG_DEFS)
    assert entries["retention.ms"] == ("1000", False)
    assert entries["cleanup.policy"] == ("delete", True)
    assert entries["unclean.leader.election.enable"] == ("false", True)
