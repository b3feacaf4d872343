"""At start the logs on disk are made to match the metadata (crash between the two writes)."""

from __future__ import annotations

from collections.abc import Callable

from strom.broker.core import BrokerCore
from strom.broker.metadata import METADATA_FILE
from strom.storage.config import LogConfig


def test_stray_logs_are_deleted_and_missing_logs_created(
        make_core: Callable[..., BrokerCore]) -> None:
    core = make_core()
    core.topics.create_topic("kept", 2, configs={"retention.ms": "777"})
    core.logs.create("deleted-topic", 0, LogConfig())  # as if a delete crashed half-way
    kept1 = core.replicas.get("kept", 1)
    assert kept1 is not None
    core.logs.delete_partition("kept", 1)  # as if a create crashed half-way
    core.close()

    again = make_core()
    assert again.logs.get("deleted-topic", 0) is None
    plog = again.replicas.get("kept", 1)
    assert plog is not None and plog.config.retention_ms == 777
    assert again.replicas.get("kept", 0) is not None


def test_logs_without_metadata_are_adopted(make_core: Callable[..., BrokerCore]) -> None:
    core = make_core()
    core.topics.create_topic("orphan", 3)
    path = core.config.log_dirs[0] / METADATA_FILE
    core.close()
    path.unlink()

    again = make_core()
    record = again.metadata.topic("orphan")
    assert record is not None and record.partitions == 3
    assert again.replicas.get("orphan", 2) is not None
