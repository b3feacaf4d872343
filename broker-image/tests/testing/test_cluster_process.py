"""``running_cluster`` with real broker processes: it forms, survives kill -9, cleans up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strom.testing import ClusterTimeout, running_cluster

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_three_brokers_form_a_cluster_and_fail_over(tmp_path: Path) -> None:
    pids: list[int] = []
    with running_cluster(tmp_path, brokers=3) as cluster:
        pids = [b.pid for b in cluster.brokers.values()]
        desc = cluster.wait_all_registered(timeout=30)
        assert sorted(b.broker_id for b in desc.brokers) == [0, 1, 2]
        assert desc.voters == [0, 1, 2] and not desc.fenced_broker_ids
        assert desc.controller_id in (0, 1, 2)
        with cluster.admin() as admin:
            admin.create_topic("t", partitions=1, replication_factor=3)
        isr = cluster.wait_for_isr("t", 0, 3, timeout=30)
        assert isr == [0, 1, 2]
        leader = cluster.wait_for_leader("t", 0, timeout=30)
        cluster.kill(leader)
        new = cluster.wait_for_leader("t", 0, timeout=30, not_in=[leader])
        assert new != leader
        cluster.wait_until(lambda: leader in cluster.describe().fenced_broker_ids, timeout=30,
                           what=f"broker {leader} fenced after kill -9")
        cluster.restart(leader)
        cluster.wait_all_registered(timeout=30)
        cluster.wait_for_isr("t", 0, 3, timeout=60)
        assert cluster.controller_id() in (0, 1, 2)
        with cluster.admin() as admin:
            admin.alter_partition_reassignments({("t", 0): [2, 1]})
        cluster.wait_reassignments_done(["t"], timeout=30)
        assert cluster.partition("t", 0).replicas == [2, 1]
        with pytest.raises(ClusterTimeout, match="never"):
            cluster.wait_until(lambda: False, timeout=0.2, what="never")
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_every_process_is_stopped_when_the_test_fails(tmp_path: Path) -> None:
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="boom"), running_cluster(tmp_path, brokers=2) as c:
        pids = [b.pid for b in c.brokers.values()]
        c.pause(1)  # a paused broker must be stopped too
        raise RuntimeError("boom")
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
