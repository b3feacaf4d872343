"""The {topic: {partition: offset}} JSON Spark checkpoints."""

from __future__ import annotations

import json

import pytest

from strom_spark.errors import StromOptionError
from strom_spark.offsets import (
    TopicPartition,
    dumps,
    from_offset_dict,
    parse_offsets_json,
    to_offset_dict,
)


def test_round_trip_through_json() -> None:
    offsets = {TopicPartition("b", 1): 7, TopicPartition("a", 10): 3, TopicPartition("a", 2): 0}
    d = to_offset_dict(offsets)
    assert d == {"a": {"2": 0, "10": 3}, "b": {"1": 7}}
    # Spark stores it as JSON and hands back the parsed dict: string partition keys.
    assert from_offset_dict(json.loads(json.dumps(d))) == offsets


def test_client_topic_partition_compatible() -> None:
    # strom.client.TopicPartition is a NamedTuple of the same shape: equal and same hash.
    assert TopicPartition("t", 0) == ("t", 0)
    assert hash(TopicPartition("t", 0)) == hash(("t", 0))


def test_dumps_is_sorted_and_compact() -> None:
    assert dumps({TopicPartition("t", 1): 5, TopicPartition("t", 0): 4}) == '{"t":{"0":4,"1":5}}'


@pytest.mark.parametrize(
    "data, match",
    [
        ([], "must be a JSON object"),
        ({"t": [1]}, "must be an object of partition -> offset"),
        ({"t": {"x": 1}}, "partition 'x' of topic 't' is not an integer"),
        ({"t": {"-1": 1}}, "is negative"),
        ({"t": {"0": True}}, "must be an integer"),
        ({"": {"0": 1}}, "non-empty strings"),
    ],
)
def test_bad_shapes(data: object, match: str) -> None:
    with pytest.raises(StromOptionError, match=match):
        from_offset_dict(data)


def test_parse_offsets_json_names_option() -> None:
    with pytest.raises(StromOptionError, match="option endingOffsets"):
        parse_offsets_json("{", "endingOffsets")
