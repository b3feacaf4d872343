"""Offsets as Spark stores them: ``{topic: {partition: offset}}`` JSON, and its parsing.

Spark keeps a streaming source's offsets in the query checkpoint as JSON. We use the same shape as
Spark's Kafka source (``{"events": {"0": 42, "1": 17}}``: partition numbers are JSON object keys,
so strings), which also is the shape of the ``startingOffsets`` / ``endingOffsets`` options, where
``-2`` means earliest and ``-1`` latest. Everything here is pure: no Spark, no network.

A checkpointed offset is the *next* offset to read in that partition, so a micro-batch covers
``[start, end)`` and the next one starts at the previous ``end``: no gap, no overlap.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from strom_spark.errors import StromOptionError

#: Kafka's sentinels inside offset JSON.
EARLIEST = -2
LATEST = -1


class TopicPartition(NamedTuple):
    """Same shape as ``strom.client.TopicPartition`` (plain tuples: they compare equal)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


PartitionOffsets = dict[TopicPartition, int]
#: The JSON-able form Spark checkpoints: ``{topic: {str(partition): offset}}``.
OffsetDict = dict[str, dict[str, int]]


def to_offset_dict(offsets: Mapping[TopicPartition, int]) -> OffsetDict:
    """``{TopicPartition: offset}`` -> ``{topic: {"p": offset}}``, sorted for stable checkpoints."""
    out: OffsetDict = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def from_offset_dict(data: Any, what: str = "offsets") -> PartitionOffsets:
    """Inverse of :func:`to_offset_dict`; accepts int or str partition keys. Validates the shape."""
    if not isinstance(data, Mapping):
        raise StromOptionError(
            f"{what} must be a JSON object like {{\"topic\": {{\"0\": 42}}}}, got {data!r}"
        )
    out: PartitionOffsets = {}
    for topic, parts in data.items():
        if not isinstance(topic, str) or not topic:
            raise StromOptionError(f"{what}: topic names must be non-empty strings, got {topic!r}")
        if not isinstance(parts, Mapping):
            raise StromOptionError(
                f"{what}: the value for topic {topic!r} must be an object of partition -> offset, "
                f"got {parts!r}"
            )
        for part, offset in parts.items():
            try:
                partition = int(part)
            except (TypeError, ValueError):
                raise StromOptionError(
                    f"{what}: partition {part!r} of topic {topic!r} is not an integer"
                ) from None
            if partition < 0:
                raise StromOptionError(f"{what}: partition {partition} of {topic!r} is negative")
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise StromOptionError(
                    f"{what}: offset for {topic}-{partition} must be an integer, got {offset!r}"
                )
            out[TopicPartition(topic, partition)] = offset
    return out


def parse_offsets_json(text: str, option: str) -> PartitionOffsets:
    """Parse the JSON form of ``startingOffsets`` / ``endingOffsets`` / ``assign``-like options."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StromOptionError(
            f"option {option}={text!r} is neither 'earliest', 'latest' nor valid JSON like "
            f"{{\"topic\": {{\"0\": 23, \"1\": -2}}}}: {exc.msg}"
        ) from None
    offsets = from_offset_dict(data, what=f"option {option}")
    for tp, off in offsets.items():
        if off < EARLIEST:
            raise StromOptionError(
                f"option {option}: offset {off} for {tp} is invalid; use an offset >= 0, "
                "-2 (earliest) or -1 (latest)"
            )
    return offsets


def parse_assign_json(text: str) -> list[TopicPartition]:
    """``assign`` is ``{"topicA": [0, 1], "topicB": [2]}`` as in Spark's Kafka source."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StromOptionError(
            f"option assign={text!r} is not valid JSON like {{\"topicA\": [0, 1]}}: {exc.msg}"
        ) from None
    if not isinstance(data, Mapping) or not data:
        raise StromOptionError(
            f"option assign={text!r} must be a non-empty JSON object like {{\"topicA\": [0, 1]}}"
        )
    out: list[TopicPartition] = []
    for topic, parts in data.items():
        if (
            not isinstance(parts, list)
            or not parts
            or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts)
        ):
            raise StromOptionError(
                f"option assign: topic {topic!r} must map to a non-empty list of partition "
                f"numbers, got {parts!r}"
            )
        out.extend(TopicPartition(topic, p) for p in parts)
    return sorted(set(out))


def parse_timestamps_json(text: str, option: str) -> PartitionOffsets:
    """``startingOffsetsByTimestamp``: ``{topic: {partition: epoch_ms}}``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StromOptionError(
            f"option {option}={text!r} is not valid JSON like {{\"topic\": {{\"0\": "
            f"1700000000000}}}}: {exc.msg}"
        ) from None
    stamps = from_offset_dict(data, what=f"option {option}")
    for tp, ts in stamps.items():
        if ts < 0:
            raise StromOptionError(
                f"option {option}: timestamp {ts} for {tp} must be >= 0 (ms since the epoch)"
            )
    return stamps


def dumps(offsets: Mapping[TopicPartition, int]) -> str:
    """Compact, sorted JSON (what tests and logs show)."""
    return json.dumps(to_offset_dict(offsets), sort_keys=True, separators=(",", ":"))


def describe_ranges(ranges: Mapping[TopicPartition, tuple[int, int]]) -> str:
    """``t-0 [5, 10), t-1 [0, 3)``: how error messages name offset ranges."""
    return ", ".join(f"{tp} [{a}, {b})" for tp, (a, b) in sorted(ranges.items()))
