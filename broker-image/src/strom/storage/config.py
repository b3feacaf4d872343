"""Per-topic log configuration with Kafka's names, defaults and validation.

Operators and tools already know Kafka's topic configs (``retention.ms``, ``cleanup.policy``, ...),
so Strom accepts exactly those names with exactly those meanings. This module is the one place
that knows them: ``TOPIC_CONFIG_DEFS`` drives parsing (CreateTopics / AlterConfigs) and
``topic_config_entries`` drives DescribeConfigs. Errors name the key, the bad value and the fix,
because an operator reading them usually has a YAML file open and nothing else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from strom.protocol.errors import ErrorCode, StromError

INT32_MAX = 2147483647
INT64_MAX = 9223372036854775807


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Kafka topic-config semantics and defaults (field comments give the Kafka name)."""

    segment_bytes: int = 1073741824  # segment.bytes
    segment_ms: int = 604800000  # segment.ms
    retention_ms: int = 604800000  # retention.ms (-1 = unlimited)
    retention_bytes: int = -1  # retention.bytes (-1 = unlimited), per partition
    cleanup_policy: str = "delete"  # cleanup.policy: "delete" | "compact" | "compact,delete"
    delete_retention_ms: int = 86400000  # delete.retention.ms (tombstone lifetime)
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = INT64_MAX  # max.compaction.lag.ms
    max_message_bytes: int = 1048588  # max.message.bytes (max size of one batch)
    flush_messages: int = INT64_MAX  # flush.messages (fsync after N messages)
    flush_ms: int = INT64_MAX  # flush.ms
    index_interval_bytes: int = 4096  # index.interval.bytes
    segment_index_bytes: int = 10485760  # segment.index.bytes (max index size; roll when full)
    message_timestamp_type: str = "CreateTime"  # or "LogAppendTime"
    message_timestamp_before_max_ms: int = INT64_MAX  # message.timestamp.before.max.ms
    message_timestamp_after_max_ms: int = 3600000  # message.timestamp.after.max.ms (Kafka 4)
    min_insync_replicas: int = 1  # min.insync.replicas (used by replication)
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"  # compression.type: producer | uncompressed | a codec
    file_delete_delay_ms: int = 60000  # file.delete.delay.ms (deleted segments linger this long)
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def max_segment_ms(self) -> int:
        """How long the active segment may stay open: ``segment.ms``, and for a compacted topic
        at most ``max.compaction.lag.ms`` (Kafka's ``LogConfig.maxSegmentMs``): compaction only
        cleans closed segments, so rolling is what bounds how long a record stays uncompacted."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"


Validator = Callable[[str, str], object]


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One topic config: Kafka name, type name, default, parser/validator, doc, LogConfig field."""

    name: str
    type: str
    default: object
    validator: Validator
    doc: str
    field: str


def _bad(name: str, value: str, why: str) -> StromError:
    return StromError(ErrorCode.INVALID_CONFIG, f"{name}={value!r} {why}")


def _int(minimum: int, maximum: int = INT64_MAX, *, hint: str, allow_minus_one: bool = False
         ) -> Validator:
    def parse(name: str, value: str) -> int:
        try:
            number = int(value.strip())
        except ValueError:
            raise _bad(name, value, f"is not an integer; {hint}") from None
        if allow_minus_one and number == -1:
            return number
        if not minimum <= number <= maximum:
            raise _bad(name, value, f"is out of range [{minimum}, {maximum}]; {hint}")
        return number

    return parse


def _choice(*choices: str) -> Validator:
    def parse(name: str, value: str) -> str:
        if value not in choices:
            raise _bad(name, value, f"is not valid; use one of: {', '.join(choices)}")
        return value

    return parse


def _ratio(name: str, value: str) -> float:
    try:
        number = float(value.strip())
    except ValueError:
        raise _bad(name, value, "is not a number; use a ratio between 0 and 1") from None
    if not 0.0 <= number <= 1.0:
        raise _bad(name, value, "is out of range [0, 1]; use a ratio between 0 and 1")
    return number


def _policy(name: str, value: str) -> str:
    parts = sorted({p.strip() for p in value.split(",") if p.strip()})
    if not parts or any(p not in ("compact", "delete") for p in parts):
        raise _bad(name, value, "is not valid; use delete, compact, or compact,delete")
    return ",".join(parts)


def _bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise _bad(name, value, "is not a boolean; use true or false")
    return lowered == "true"


_D = LogConfig()
_MS = "use milliseconds"

TOPIC_CONFIG_DEFS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef("segment.bytes", "int", _D.segment_bytes,
                  _int(14, INT32_MAX, hint="use a size in bytes, at least 14"),
                  "Size of one segment file; the active segment rolls when it would exceed it.",
                  "segment_bytes"),
        ConfigDef("segment.ms", "long", _D.segment_ms, _int(1, hint=_MS + ", at least 1"),
                  "Roll the active segment after this long even if it is not full.",
                  "segment_ms"),
        ConfigDef("retention.ms", "long", _D.retention_ms,
                  _int(0, hint=_MS + ", or -1 for unlimited", allow_minus_one=True),
                  "Delete whole segments whose newest record is older than this.",
                  "retention_ms"),
        ConfigDef("retention.bytes", "long", _D.retention_bytes,
                  _int(0, hint="use bytes per partition, or -1 for unlimited",
                       allow_minus_one=True),
                  "Delete the oldest whole segments while the partition is larger than this.",
                  "retention_bytes"),
        ConfigDef("cleanup.policy", "list", _D.cleanup_policy, _policy,
                  "delete (retention), compact (keep the last record per key), or both.",
                  "cleanup_policy"),
        ConfigDef("delete.retention.ms", "long", _D.delete_retention_ms,
                  _int(0, hint=_MS), "How long compaction keeps tombstones.",
                  "delete_retention_ms"),
        ConfigDef("min.compaction.lag.ms", "long", _D.min_compaction_lag_ms, _int(0, hint=_MS),
                  "Minimum age of a record before compaction may remove it.",
                  "min_compaction_lag_ms"),
        ConfigDef("max.compaction.lag.ms", "long", _D.max_compaction_lag_ms,
                  _int(1, hint=_MS + ", at least 1"),
                  "Longest a record stays ineligible for compaction: a compacted topic's active "
                  "segment rolls after this long.", "max_compaction_lag_ms"),
        ConfigDef("max.message.bytes", "int", _D.max_message_bytes,
                  _int(0, INT32_MAX, hint="use the largest record batch size in bytes"),
                  "Largest record batch accepted from a producer.", "max_message_bytes"),
        ConfigDef("flush.messages", "long", _D.flush_messages,
                  _int(1, hint="use a message count, at least 1"),
                  "fsync the log after this many messages.", "flush_messages"),
        ConfigDef("flush.ms", "long", _D.flush_ms, _int(0, hint=_MS),
                  "fsync the log when this long has passed since the last fsync.", "flush_ms"),
        ConfigDef("index.interval.bytes", "int", _D.index_interval_bytes,
                  _int(0, INT32_MAX, hint="use bytes between offset-index entries"),
                  "Bytes of log between two offset-index entries.", "index_interval_bytes"),
        ConfigDef("segment.index.bytes", "int", _D.segment_index_bytes,
                  _int(12, INT32_MAX, hint="use bytes, at least 12"),
                  "Maximum size of a segment's offset index; the segment rolls when full.",
                  "segment_index_bytes"),
        ConfigDef("message.timestamp.type", "string", _D.message_timestamp_type,
                  _choice("CreateTime", "LogAppendTime"),
                  "Keep the producer's timestamp (CreateTime) or stamp the broker's time.",
                  "message_timestamp_type"),
        ConfigDef("message.timestamp.before.max.ms", "long",
                  _D.message_timestamp_before_max_ms, _int(0, hint=_MS),
                  "Refuse CreateTime records stamped more than this before the broker's time.",
                  "message_timestamp_before_max_ms"),
        ConfigDef("message.timestamp.after.max.ms", "long",
                  _D.message_timestamp_after_max_ms, _int(0, hint=_MS),
                  "Refuse CreateTime records stamped more than this after the broker's time.",
                  "message_timestamp_after_max_ms"),
        ConfigDef("min.insync.replicas", "int", _D.min_insync_replicas,
                  _int(1, INT32_MAX, hint="use a replica count, at least 1"),
                  "Replicas that must have a record before acks=all succeeds.",
                  "min_insync_replicas"),
        ConfigDef("unclean.leader.election.enable", "boolean",
                  _D.unclean_leader_election_enable, _bool,
                  "Allow an out-of-sync replica to become leader (may lose data).",
                  "unclean_leader_election_enable"),
        ConfigDef("compression.type", "string", _D.compression_type,
                  _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
                  "Codec the log stores batches in: producer keeps the producer's, another value "
                  "makes the leader recompress batches that differ.", "compression_type"),
        ConfigDef("file.delete.delay.ms", "long", _D.file_delete_delay_ms, _int(0, hint=_MS),
                  "How long a segment deleted by retention or compaction stays on disk (renamed "
                  "*.deleted) before its files are removed.", "file_delete_delay_ms"),
        ConfigDef("min.cleanable.dirty.ratio", "double", _D.min_cleanable_dirty_ratio, _ratio,
                  "Compact only when the not-yet-compacted share of the closed segments' bytes "
                  "reaches this ratio (or max.compaction.lag.ms forces it).",
                  "min_cleanable_dirty_ratio"),
    )
}


#: Kafka topic configs Strom does not implement, refused by name (by the broker, the CLI and the
#: StromTopic CRD alike) rather than accepted and ignored.
UNSUPPORTED_TOPIC_CONFIGS: tuple[str, ...] = ()
#: The one message for them, after the key name.
UNSUPPORTED_MESSAGE = "is a Kafka topic config that Strom does not implement; remove it"


def unknown_topic_config_message(name: str) -> str:
    """Why ``name`` is refused: a Kafka config Strom does not implement, or not a config at all."""
    if name in UNSUPPORTED_TOPIC_CONFIGS:
        return f"topic config {name!r} {UNSUPPORTED_MESSAGE}"
    return (f"unknown topic config {name!r}; valid keys are: "
            f"{', '.join(sorted(TOPIC_CONFIG_DEFS))}")


def parse_topic_configs(raw: Mapping[str, str], base: LogConfig = LogConfig()) -> LogConfig:
    """Apply Kafka-named overrides to ``base``; StromError(INVALID_CONFIG) on any bad entry."""
    changes: dict[str, object] = {}
    for name, value in raw.items():
        definition = TOPIC_CONFIG_DEFS.get(name)
        if definition is None:
            raise StromError(ErrorCode.INVALID_CONFIG, unknown_topic_config_message(name))
        if not isinstance(value, str):
            raise _bad(name, str(value), "must be given as a string")
        changes[definition.field] = definition.validator(name, value)
    config = dataclasses.replace(base, **changes)  # type: ignore[arg-type]
    if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
        raise StromError(ErrorCode.INVALID_CONFIG,
                         f"min.compaction.lag.ms={config.min_compaction_lag_ms} is larger than "
                         f"max.compaction.lag.ms={config.max_compaction_lag_ms}; lower the first "
                         f"or raise the second")
    return config


def _render(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def topic_config_entries(config: LogConfig, overrides: Mapping[str, str]
                         ) -> list[tuple[str, str, bool]]:
    """(name, value, is_default) for every topic config, sorted by name, for DescribeConfigs."""
    entries = []
    for name in sorted(TOPIC_CONFIG_DEFS):
        definition = TOPIC_CONFIG_DEFS[name]
        value = getattr(config, definition.field)
        entries.append((name, _render(value), name not in overrides))
    return entries
