"""The storage engine: per-partition logs of RecordBatch v2 segments on local disk.

Public front: ``LogConfig`` and the topic-config parser, ``PartitionLog`` (one partition replica)
and ``LogManager`` (all of a broker's partitions). Everything else is an internal part with one job
(segments, indexes, recovery, retention, compaction, checkpoints). Storage knows nothing of the
network or the broker (an import-linter contract).

The front is imported lazily, so the pure config table (``strom.storage.config``) can be imported
by the broker's config, the CLI and the operator without loading the engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOME = {"TOPIC_CONFIG_DEFS": "config", "ConfigDef": "config", "LogConfig": "config",
         "parse_topic_configs": "config", "topic_config_entries": "config",
         "AppendResult": "log", "PartitionLog": "log", "ReadResult": "log",
         "LogManager": "manager"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'strom.storage' has no attribute {name!r}")
    return getattr(importlib.import_module(f"strom.storage.{_HOME[name]}"), name)
