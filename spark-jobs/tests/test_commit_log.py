"""The marker topic's I/O against real brokers (no Spark): creation, the backward scan, failover."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from strom_spark import commit_log
from strom_spark.commit_log import ensure_commit_topic, last_marker, record_commit
from strom_spark.markers import SCAN_STEP, CommitMarker

pytestmark = [pytest.mark.slow, pytest.mark.integration]

QA, QB = "query-a", "query-b"


def test_last_marker_scans_back_across_windows(broker: str, topic_name: str,
                                               helpers: Any) -> None:
    from strom.client import Admin

    topic = f"{topic_name}-commits"
    assert last_marker(broker, topic, QA) is None  # no topic yet: nothing committed ...
    with Admin(broker) as admin:
        assert topic not in admin.list_topics(include_internal=True)  # ... and not created
    ensure_commit_topic(broker, topic)
    with Admin(broker) as admin:
        configs = {c.name: c.value for c in admin.describe_configs(topic)}
        assert configs["cleanup.policy"] == "compact"
        assert len(admin.describe_topics([topic])[0].partitions) == 1
    assert last_marker(broker, topic, QA) is None  # empty topic

    for batch in range(3):
        record_commit(broker, topic, CommitMarker(QA, batch, records=10, writers=(f"w{batch}",)))
    # another query commits far more often: A's newest marker is 2.5 scan windows back
    n_b = SCAN_STEP * 5 // 2
    helpers.produce(broker, topic, [(CommitMarker(QB, b).key(), CommitMarker(QB, b).value())
                                    for b in range(n_b)], partition=0)
    found = last_marker(broker, topic, QA)
    assert found is not None and (found.batch, found.writers) == (2, ("w2",))
    found_b = last_marker(broker, topic, QB)
    assert found_b is not None and found_b.batch == n_b - 1
    assert last_marker(broker, topic, "query-c") is None


def test_marker_topic_is_replicated_and_survives_a_leader_failover(tmp_path: Path) -> None:
    from strom.testing import running_cluster

    topic = "__strom_spark_commits"
    with running_cluster(tmp_path, brokers=3) as cluster:
        bootstrap = cluster.bootstrap
        commit_log._ensured.discard((bootstrap, topic))
        record_commit(bootstrap, topic, CommitMarker(QA, 0, records=1))
        with cluster.admin() as admin:
            desc = admin.describe_topics([topic], include_internal=True)[0]
        assert len(desc.partitions[0].replicas) == 3
        cluster.wait_for_isr(topic, 0, 3, timeout=30)
        leader = cluster.wait_for_leader(topic, 0, timeout=30)
        cluster.kill(leader)
        cluster.wait_for_leader(topic, 0, timeout=30, not_in=[leader])
        record_commit(bootstrap, topic, CommitMarker(QA, 1, records=1))
        found = last_marker(bootstrap, topic, QA)
        assert found is not None and found.batch == 1
