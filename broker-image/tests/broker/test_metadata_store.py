"""The single-broker metadata store persists atomically and survives restarts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strom.broker.metadata import METADATA_FILE, BrokerInfo, LocalMetadataStore
from strom.protocol.errors import ErrorCode, StromError

ME = BrokerInfo(0, "127.0.0.1", 9092)


def test_topics_persist_across_reopen(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, ME)
    assert not store.existed
    record = store.create_topic("t", 3, 1, {"retention.ms": "5"})
    store.set_partitions("t", 4)
    store.set_configs("t", {"cleanup.policy": "compact"})
    store.create_topic("gone", 1, 1, {})
    store.delete_topic("gone")
    again = LocalMetadataStore(tmp_path, ME)
    assert again.existed
    assert again.cluster_id == store.cluster_id
    loaded = again.topic("t")
    assert loaded is not None
    assert (loaded.topic_id, loaded.partitions, dict(loaded.configs)) == (
        record.topic_id, 4, {"cleanup.policy": "compact"})
    assert again.topic("gone") is None
    assert not (tmp_path / (METADATA_FILE + ".tmp")).exists()
    assert json.loads((tmp_path / METADATA_FILE).read_text())["version"] == 1


def test_single_broker_leads_everything_at_epoch_0(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, ME)
    store.create_topic("t", 2, 1, {})
    state = store.partition_state("t", 1)
    assert state is not None
    assert (state.leader, state.leader_epoch, state.replicas, state.isr) == (0, 0, (0,), (0,))
    assert store.partition_state("t", 2) is None
    assert store.partition_state("u", 0) is None


def test_errors(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, ME)
    store.create_topic("t", 1, 1, {})
    with pytest.raises(StromError) as info:
        store.create_topic("t", 1, 1, {})
    assert info.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    with pytest.raises(StromError) as info:
        store.delete_topic("u")
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_cluster_id_mismatch_is_refused(tmp_path: Path) -> None:
    LocalMetadataStore(tmp_path, ME, cluster_id="one")
    with pytest.raises(StromError, match="another cluster"):
        LocalMetadataStore(tmp_path, ME, cluster_id="two")


def test_corrupt_file_names_the_fix(tmp_path: Path) -> None:
    (tmp_path / METADATA_FILE).write_text("{not json")
    with pytest.raises(StromError, match="move it away"):
        LocalMetadataStore(tmp_path, ME)
