"""The storage engine: per-partition logs of RecordBatch v2 segments on local disk.

Public front: ``LogConfig`` and the topic-config parser, ``PartitionLog`` (one partition replica)
and ``LogManager`` (all of a broker's partitions). Everything else is an internal part with one job
(segments, indexes, recovery, retention, compaction, checkpoints). Storage knows nothing of the
network or the broker (an import-linter contract).
"""

from strom.storage.config import (
    TOPIC_CONFIG_DEFS,
    ConfigDef,
    LogConfig,
    parse_topic_configs,
    topic_config_entries,
)
from strom.storage.log import AppendResult, PartitionLog, ReadResult
from strom.storage.manager import LogManager

__all__ = [
    "TOPIC_CONFIG_DEFS",
    "AppendResult",
    "ConfigDef",
    "LogConfig",
    "LogManager",
    "PartitionLog",
    "ReadResult",
    "parse_topic_configs",
    "topic_config_entries",
]
