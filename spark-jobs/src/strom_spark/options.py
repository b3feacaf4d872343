"""Parsing and validation of the ``strom`` options, named as Spark's Kafka source names them.

Spark hands a Python data source its options as a case-insensitive string map. This module turns
that map into typed, frozen (and therefore picklable) settings, once, on the driver, and rejects
anything it does not understand with a message naming the option and the fix: a typo like
``startingOffset`` must fail the query at ``load()``, not silently read from "latest".

Read options (batch and streaming):

===============================  ===========================================================
``bootstrap.servers``            ``host:port[,host:port]``; ``kafka.bootstrap.servers`` too
``subscribe``                    comma-separated topic list        (exactly one of these three)
``subscribePattern``             Python regular expression matched against the whole name
``assign``                       JSON ``{"topicA": [0, 1]}``
``startingOffsets``              ``earliest`` | ``latest`` | JSON ``{"t": {"0": 23, "1": -2}}``
                                 (default ``latest`` streaming, ``earliest`` batch)
``startingTimestamp``            ms since the epoch, for every partition (wins over the others)
``startingOffsetsByTimestamp``   JSON ``{"t": {"0": 1700000000000}}``
``startingOffsetsByTimestampStrategy``  ``error`` (default) | ``latest``: when no record is that new
``endingOffsets``                batch only: ``latest`` (default) | JSON (``-1`` = latest)
``maxOffsetsPerTrigger``         streaming: at most this many records per micro-batch
``minPartitions``                split offset ranges so there are at least this many tasks
``failOnDataLoss``               ``true`` (default) | ``false``: error or skip-with-warning when
                                 offsets to read were deleted by retention
``includeHeaders``               ``false`` (default) | ``true``: add the ``headers`` column
``fetch.max.bytes``              bytes per Fetch call (default 4 MiB; ``kafka.`` prefix allowed)
``readFormat``                   ``arrow`` (default) | ``tuples``: how ``read()`` hands rows to
                                 Spark; ``tuples`` exists for the benchmark and for debugging
===============================  ===========================================================

Write options: ``bootstrap.servers``, ``topic`` (used when a row has no ``topic`` column or it is
null), ``linger.ms``, ``batch.size``, ``compression.type`` (each also with a ``kafka.`` prefix);
streaming only: ``commitTopic`` (marker topic of committed micro-batches, default
``__strom_spark_commits``) and ``commitMarkers`` (``true`` default | ``false``: no markers, so a
replayed micro-batch is written again; see :mod:`strom_spark.sink`).
Spark's own generic options (``path``, ``checkpointLocation``, ...) are accepted and ignored.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from strom_spark.errors import StromOptionError
from strom_spark.markers import DEFAULT_COMMIT_TOPIC
from strom_spark.offsets import (
    EARLIEST,
    LATEST,
    PartitionOffsets,
    TopicPartition,
    parse_assign_json,
    parse_offsets_json,
    parse_timestamps_json,
)

DEFAULT_FETCH_MAX_BYTES = 4 * 1024 * 1024

_READ_OPTIONS = (
    "bootstrap.servers",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets",
    "maxOffsetsPerTrigger",
    "minPartitions",
    "failOnDataLoss",
    "includeHeaders",
    "fetch.max.bytes",
    "readFormat",
)
_WRITE_OPTIONS = (
    "bootstrap.servers",
    "topic",
    "linger.ms",
    "batch.size",
    "compression.type",
    "commitTopic",
    "commitMarkers",
)
#: Options with a Kafka-client meaning, accepted with or without the ``kafka.`` prefix.
_CLIENT_OPTIONS = frozenset(
    {"bootstrap.servers", "fetch.max.bytes", "linger.ms", "batch.size", "compression.type"}
)
#: Options Spark itself may put in the map; not ours to judge.
_SPARK_GENERIC = frozenset(
    {"path", "paths", "checkpointlocation", "queryname", "__partition_columns"}
)
#: Options of Spark's Kafka source that Strom does not implement (yet): a precise error beats
#: "unknown option" for someone porting a Kafka job.
_KAFKA_UNSUPPORTED = frozenset(
    {
        "endingtimestamp",
        "endingoffsetsbytimestamp",
        "minoffsetspertrigger",
        "maxtriggerdelay",
        "groupidprefix",
        "kafka.group.id",
        "fetchoffset.numretries",
        "fetchoffset.retryintervalms",
        "kafkaconsumer.polltimeoutms",
        "maxoffsetspertrigger.bytes",
    }
)

Mode = Literal["batch", "streaming"]


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions to read: exactly one of the three Kafka strategies."""

    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[TopicPartition, ...] = ()

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return "assign=" + ",".join(str(tp) for tp in self.assigned)

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` belongs to the subscription (pattern: full match, like Java's)."""
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(tp.topic == topic for tp in self.assigned)


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where to start (or end): earliest, latest, explicit offsets, or by timestamp."""

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    #: ``kind == "offsets"``: per partition, with -2/-1 meaning earliest/latest.
    #: ``kind == "timestamps"``: per partition epoch ms.
    offsets: tuple[tuple[TopicPartition, int], ...] = ()
    #: ``kind == "timestamp"``: one epoch-ms timestamp for every partition.
    timestamp: int = -1

    def offset_map(self) -> PartitionOffsets:
        return dict(self.offsets)


EARLIEST_SPEC = OffsetSpec("earliest")
LATEST_SPEC = OffsetSpec("latest")


@dataclass(frozen=True, slots=True)
class ReadOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec = LATEST_SPEC
    timestamp_strategy: Literal["error", "latest"] = "error"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    read_format: Literal["arrow", "tuples"] = "arrow"


@dataclass(frozen=True, slots=True)
class WriteOptions:
    bootstrap_servers: str
    topic: str | None = None
    linger_ms: int = 5
    batch_size: int = 256 * 1024
    compression_type: str = "none"
    #: Streaming: where committed micro-batches are recorded, and whether they are.
    commit_topic: str = DEFAULT_COMMIT_TOPIC
    commit_markers: bool = True


# --- helpers -----------------------------------------------------------------------------------


def _normalise(
    options: Mapping[str, str], known: tuple[str, ...], mode: str
) -> dict[str, str]:
    """Map every key to its canonical spelling; reject unknown ones with a suggestion."""
    canonical = {name.lower(): name for name in known}
    out: dict[str, str] = {}
    for raw_key, value in options.items():
        key = raw_key.lower()
        if key in _SPARK_GENERIC:
            continue
        if key.startswith("kafka.") and key[len("kafka."):] in {
            c.lower() for c in _CLIENT_OPTIONS
        }:
            key = key[len("kafka."):]
        if key in canonical:
            name = canonical[key]
            if name in out and out[name] != value:
                raise StromOptionError(
                    f"option {name} is given twice with different values "
                    f"({out[name]!r} and {value!r}); pass it once"
                )
            out[name] = value
            continue
        if key in _KAFKA_UNSUPPORTED:
            raise StromOptionError(
                f"option {raw_key!r} of Spark's Kafka source is not supported by the strom "
                f"data source; supported {mode} options: {', '.join(known)}"
            )
        close = difflib.get_close_matches(key, list(canonical), n=1, cutoff=0.75)
        hint = f"; did you mean {canonical[close[0]]!r}?" if close else ""
        raise StromOptionError(
            f"unknown option {raw_key!r} for a strom {mode}{hint} "
            f"(supported: {', '.join(known)})"
        )
    return out


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    if name not in opts:
        return default
    text = opts[name].strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise StromOptionError(f"option {name}={opts[name]!r} must be true or false")


def _int(opts: Mapping[str, str], name: str, minimum: int) -> int | None:
    if name not in opts:
        return None
    try:
        value = int(opts[name].strip())
    except ValueError:
        raise StromOptionError(f"option {name}={opts[name]!r} is not an integer") from None
    if value < minimum:
        raise StromOptionError(f"option {name}={value} must be >= {minimum}")
    return value


def _bootstrap(opts: Mapping[str, str]) -> str:
    servers = opts.get("bootstrap.servers", "").strip()
    if not servers:
        raise StromOptionError(
            "option bootstrap.servers is required (or kafka.bootstrap.servers), "
            "e.g. .option('bootstrap.servers', 'my-cluster-bootstrap.strom.svc:9092')"
        )
    for item in servers.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise StromOptionError(
                f"option bootstrap.servers: {item.strip()!r} is not HOST:PORT, "
                "e.g. 127.0.0.1:9092"
            )
    return servers


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribePattern", "assign") if name in opts]
    if len(given) != 1:
        raise StromOptionError(
            "exactly one of the options subscribe, subscribePattern or assign must be given"
            + (f"; got {', '.join(given)}" if given else "")
        )
    name = given[0]
    value = opts[name].strip()
    if name == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise StromOptionError("option subscribe is empty; give comma-separated topic names")
        return Subscription("subscribe", topics=topics)
    if name == "subscribePattern":
        if not value:
            raise StromOptionError("option subscribePattern is empty")
        try:
            re.compile(value)
        except re.error as exc:
            raise StromOptionError(
                f"option subscribePattern={value!r} is not a valid regular expression: {exc}"
            ) from None
        return Subscription("subscribePattern", pattern=value)
    return Subscription("assign", assigned=tuple(parse_assign_json(value)))


def _offset_spec(
    opts: Mapping[str, str], name: str, default: OffsetSpec, sub: Subscription
) -> OffsetSpec:
    if name not in opts:
        return default
    text = opts[name].strip()
    if text.lower() == "earliest":
        return EARLIEST_SPEC
    if text.lower() == "latest":
        return LATEST_SPEC
    offsets = parse_offsets_json(text, name)
    _check_covered(offsets, sub, name)
    return OffsetSpec("offsets", offsets=tuple(sorted(offsets.items())))


def _check_covered(offsets: PartitionOffsets, sub: Subscription, name: str) -> None:
    """Offsets given for partitions outside the subscription are a mistake, not a no-op."""
    for tp in offsets:
        if sub.kind == "assign" and tp not in sub.assigned:
            raise StromOptionError(
                f"option {name} names {tp}, which is not in {sub.describe()}"
            )
        if sub.kind != "assign" and not sub.matches(tp.topic):
            raise StromOptionError(
                f"option {name} names topic {tp.topic!r}, which is not in {sub.describe()}"
            )


def _starting(opts: Mapping[str, str], mode: Mode, sub: Subscription) -> OffsetSpec:
    if "startingTimestamp" in opts:
        ts = _int(opts, "startingTimestamp", 0)
        assert ts is not None
        return OffsetSpec("timestamp", timestamp=ts)
    if "startingOffsetsByTimestamp" in opts:
        stamps = parse_timestamps_json(
            opts["startingOffsetsByTimestamp"], "startingOffsetsByTimestamp"
        )
        _check_covered(stamps, sub, "startingOffsetsByTimestamp")
        return OffsetSpec("timestamps", offsets=tuple(sorted(stamps.items())))
    default = LATEST_SPEC if mode == "streaming" else EARLIEST_SPEC
    spec = _offset_spec(opts, "startingOffsets", default, sub)
    if mode == "batch" and (spec.kind == "latest" or any(o == LATEST for _, o in spec.offsets)):
        raise StromOptionError(
            "option startingOffsets=latest (or -1 in the JSON) is not valid for a batch "
            "query: it would always read nothing; use earliest or explicit offsets"
        )
    return spec


def _ending(opts: Mapping[str, str], mode: Mode, sub: Subscription) -> OffsetSpec:
    if "endingOffsets" not in opts:
        return LATEST_SPEC
    if mode == "streaming":
        raise StromOptionError(
            "option endingOffsets is only valid for batch queries (spark.read); a streaming "
            "query reads until it is stopped (use trigger(availableNow=True) to stop at the end)"
        )
    spec = _offset_spec(opts, "endingOffsets", LATEST_SPEC, sub)
    if spec.kind == "earliest" or any(o == EARLIEST for _, o in spec.offsets):
        raise StromOptionError(
            "option endingOffsets=earliest (or -2 in the JSON) is not valid: it would read "
            "nothing; use latest or explicit offsets"
        )
    return spec


# --- public ------------------------------------------------------------------------------------


def parse_read_options(options: Mapping[str, str], mode: Mode) -> ReadOptions:
    """Validate the options of ``spark.read`` (``mode="batch"``) or ``spark.readStream``."""
    opts = _normalise(options, _READ_OPTIONS, f"{mode} read")
    sub = _subscription(opts)
    strategy = opts.get("startingOffsetsByTimestampStrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise StromOptionError(
            f"option startingOffsetsByTimestampStrategy={strategy!r} must be error or latest"
        )
    read_format = opts.get("readFormat", "arrow").strip().lower()
    if read_format not in ("arrow", "tuples"):
        raise StromOptionError(f"option readFormat={read_format!r} must be arrow or tuples")
    fetch_max = _int(opts, "fetch.max.bytes", 1024)
    return ReadOptions(
        bootstrap_servers=_bootstrap(opts),
        subscription=sub,
        starting=_starting(opts, mode, sub),
        ending=_ending(opts, mode, sub),
        timestamp_strategy="latest" if strategy == "latest" else "error",
        max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger", 1),
        min_partitions=_int(opts, "minPartitions", 1),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        fetch_max_bytes=fetch_max if fetch_max is not None else DEFAULT_FETCH_MAX_BYTES,
        read_format="tuples" if read_format == "tuples" else "arrow",
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Validate the options of ``df.write`` / ``df.writeStream``."""
    opts = _normalise(options, _WRITE_OPTIONS, "write")
    topic = opts.get("topic", "").strip() or None
    linger = _int(opts, "linger.ms", 0)
    batch = _int(opts, "batch.size", 1)
    compression = opts.get("compression.type", "none").strip().lower()
    if compression not in ("none", "gzip", "snappy", "lz4", "zstd"):
        raise StromOptionError(
            f"option compression.type={compression!r} must be none, gzip, snappy, lz4 or zstd"
        )
    commit_topic = opts.get("commitTopic", DEFAULT_COMMIT_TOPIC).strip()
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", commit_topic):
        raise StromOptionError(
            f"option commitTopic={commit_topic!r} is not a valid topic name (1-249 ASCII "
            "letters, digits, '.', '_' or '-')"
        )
    return WriteOptions(
        bootstrap_servers=_bootstrap(opts),
        topic=topic,
        linger_ms=5 if linger is None else linger,
        batch_size=256 * 1024 if batch is None else batch,
        compression_type=compression,
        commit_topic=commit_topic,
        commit_markers=_bool(opts, "commitMarkers", True),
    )
