"""Option parsing: Kafka-source names, defaults per mode, and errors that name the option."""

from __future__ import annotations

import pytest

from strom_spark.errors import StromOptionError
from strom_spark.offsets import TopicPartition
from strom_spark.options import parse_read_options, parse_write_options

BASE = {"bootstrap.servers": "127.0.0.1:9092", "subscribe": "events"}


def test_defaults_streaming_and_batch() -> None:
    s = parse_read_options(BASE, "streaming")
    assert s.starting.kind == "latest"
    assert s.ending.kind == "latest"
    assert s.fail_on_data_loss is True
    assert s.include_headers is False
    assert s.max_offsets_per_trigger is None
    assert s.read_format == "arrow"
    b = parse_read_options(BASE, "batch")
    assert b.starting.kind == "earliest"


def test_keys_are_case_insensitive_and_kafka_prefix_is_accepted() -> None:
    # Spark lowercases keys in the map it hands to a Python data source.
    opts = {
        "kafka.bootstrap.servers": "h1:1,h2:2",
        "subscribepattern": "sensor-.*",
        "maxoffsetspertrigger": "500",
        "failondataloss": "false",
        "includeheaders": "TRUE",
        "minpartitions": "8",
    }
    o = parse_read_options(opts, "streaming")
    assert o.bootstrap_servers == "h1:1,h2:2"
    assert o.subscription.kind == "subscribePattern"
    assert o.subscription.matches("sensor-1")
    assert not o.subscription.matches("xsensor-1")  # full match, as in Java
    assert o.max_offsets_per_trigger == 500
    assert o.fail_on_data_loss is False
    assert o.include_headers is True
    assert o.min_partitions == 8


def test_unknown_option_names_it_and_suggests() -> None:
    with pytest.raises(StromOptionError, match=r"unknown option 'startingOffset'.*startingOffsets"):
        parse_read_options({**BASE, "startingOffset": "earliest"}, "batch")


def test_unsupported_kafka_option_is_named() -> None:
    with pytest.raises(StromOptionError, match=r"'kafka\.group\.id' of Spark's Kafka source"):
        parse_read_options({**BASE, "kafka.group.id": "g"}, "streaming")


def test_spark_generic_options_are_ignored() -> None:
    parse_read_options({**BASE, "path": "", "checkpointLocation": "/tmp/x"}, "streaming")
    parse_write_options({"bootstrap.servers": "h:1", "checkpointlocation": "/tmp/x"})


def test_missing_bootstrap() -> None:
    with pytest.raises(StromOptionError, match=r"bootstrap\.servers is required"):
        parse_read_options({"subscribe": "t"}, "batch")
    with pytest.raises(StromOptionError, match="'nohost' is not HOST:PORT"):
        parse_read_options({"subscribe": "t", "bootstrap.servers": "nohost"}, "batch")


def test_exactly_one_subscription_strategy() -> None:
    with pytest.raises(StromOptionError, match="exactly one of"):
        parse_read_options({"bootstrap.servers": "h:1"}, "batch")
    with pytest.raises(StromOptionError, match="got subscribe, assign"):
        parse_read_options({**BASE, "assign": '{"t": [0]}'}, "batch")


def test_assign_json() -> None:
    o = parse_read_options({"bootstrap.servers": "h:1", "assign": '{"a": [1, 0], "b": [2]}'},
                           "batch")
    assert o.subscription.assigned == (
        TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 2))
    with pytest.raises(StromOptionError, match="option assign"):
        parse_read_options({"bootstrap.servers": "h:1", "assign": '{"a": "0"}'}, "batch")
    with pytest.raises(StromOptionError, match="not valid JSON"):
        parse_read_options({"bootstrap.servers": "h:1", "assign": "a:0"}, "batch")


def test_bad_pattern() -> None:
    with pytest.raises(StromOptionError, match="subscribePattern"):
        parse_read_options({"bootstrap.servers": "h:1", "subscribePattern": "(unclosed"}, "batch")


def test_starting_offsets_json() -> None:
    o = parse_read_options({**BASE, "startingOffsets": '{"events": {"0": 23, "1": -2}}'},
                           "streaming")
    assert o.starting.kind == "offsets"
    assert o.starting.offset_map() == {TopicPartition("events", 0): 23,
                                       TopicPartition("events", 1): -2}


def test_starting_offsets_for_other_topic_is_rejected() -> None:
    with pytest.raises(StromOptionError, match="topic 'other', which is not in subscribe=events"):
        parse_read_options({**BASE, "startingOffsets": '{"other": {"0": 1}}'}, "streaming")


def test_starting_offsets_bad_values() -> None:
    with pytest.raises(StromOptionError, match="neither 'earliest', 'latest' nor valid JSON"):
        parse_read_options({**BASE, "startingOffsets": "beginning"}, "streaming")
    with pytest.raises(StromOptionError, match="offset -3 for events-0 is invalid"):
        parse_read_options({**BASE, "startingOffsets": '{"events": {"0": -3}}'}, "streaming")
    with pytest.raises(StromOptionError, match="must be an integer"):
        parse_read_options({**BASE, "startingOffsets": '{"events": {"0": "5"}}'}, "streaming")


def test_batch_rejects_latest_start_and_streaming_rejects_ending() -> None:
    with pytest.raises(StromOptionError, match="not valid for a batch"):
        parse_read_options({**BASE, "startingOffsets": "latest"}, "batch")
    with pytest.raises(StromOptionError, match="not valid for a batch"):
        parse_read_options({**BASE, "startingOffsets": '{"events": {"0": -1}}'}, "batch")
    with pytest.raises(StromOptionError, match="endingOffsets is only valid for batch"):
        parse_read_options({**BASE, "endingOffsets": "latest"}, "streaming")
    with pytest.raises(StromOptionError, match="endingOffsets=earliest"):
        parse_read_options({**BASE, "endingOffsets": "earliest"}, "batch")


def test_ending_offsets_json_batch() -> None:
    o = parse_read_options({**BASE, "endingOffsets": '{"events": {"0": 100, "1": -1}}'}, "batch")
    assert o.ending.offset_map()[TopicPartition("events", 1)] == -1


def test_starting_timestamp_wins() -> None:
    o = parse_read_options({**BASE, "startingTimestamp": "1700000000000",
                            "startingOffsets": "earliest"}, "streaming")
    assert o.starting.kind == "timestamp"
    assert o.starting.timestamp == 1_700_000_000_000
    with pytest.raises(StromOptionError, match="startingTimestamp='yesterday' is not an integer"):
        parse_read_options({**BASE, "startingTimestamp": "yesterday"}, "streaming")
    o = parse_read_options({**BASE, "startingOffsetsByTimestamp": '{"events": {"0": 5}}',
                            "startingOffsetsByTimestampStrategy": "latest"}, "batch")
    assert o.starting.kind == "timestamps"
    assert o.timestamp_strategy == "latest"


def test_numbers_and_booleans_validated() -> None:
    with pytest.raises(StromOptionError, match="maxOffsetsPerTrigger=0 must be >= 1"):
        parse_read_options({**BASE, "maxOffsetsPerTrigger": "0"}, "streaming")
    with pytest.raises(StromOptionError, match="minPartitions='many' is not an integer"):
        parse_read_options({**BASE, "minPartitions": "many"}, "streaming")
    with pytest.raises(StromOptionError, match="failOnDataLoss='maybe' must be true or false"):
        parse_read_options({**BASE, "failOnDataLoss": "maybe"}, "streaming")


def test_duplicate_spelling_conflict() -> None:
    with pytest.raises(StromOptionError, match="given twice"):
        parse_read_options({**BASE, "kafka.bootstrap.servers": "other:1"}, "batch")


def test_write_options() -> None:
    w = parse_write_options({"kafka.bootstrap.servers": "h:1", "topic": "alerts",
                             "kafka.linger.ms": "20", "compression.type": "zstd"})
    assert (w.topic, w.linger_ms, w.compression_type) == ("alerts", 20, "zstd")
    assert parse_write_options({"bootstrap.servers": "h:1"}).topic is None
    with pytest.raises(StromOptionError, match="unknown option 'subscribe' for a strom write"):
        parse_write_options({"bootstrap.servers": "h:1", "subscribe": "x"})
    with pytest.raises(StromOptionError, match=r"compression\.type='brotli'"):
        parse_write_options({"bootstrap.servers": "h:1", "compression.type": "brotli"})


def test_options_pickle() -> None:
    import pickle

    o = parse_read_options({**BASE, "startingOffsets": '{"events": {"0": 1}}'}, "streaming")
    assert pickle.loads(pickle.dumps(o)) == o


def test_commit_marker_options() -> None:
    w = parse_write_options({"bootstrap.servers": "h:1"})
    assert (w.commit_topic, w.commit_markers) == ("__strom_spark_commits", True)
    w = parse_write_options({"bootstrap.servers": "h:1", "committopic": "my.commits",
                             "commitmarkers": "false"})
    assert (w.commit_topic, w.commit_markers) == ("my.commits", False)
    with pytest.raises(StromOptionError, match="commitTopic='bad topic'"):
        parse_write_options({"bootstrap.servers": "h:1", "commitTopic": "bad topic"})
    with pytest.raises(StromOptionError, match="commitMarkers='maybe' must be true or false"):
        parse_write_options({"bootstrap.servers": "h:1", "commitMarkers": "maybe"})
