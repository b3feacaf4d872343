"""Replication metrics are read from the replica manager at scrape time."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest

from strom.broker.metrics import BrokerMetrics
from strom.protocol.records import encode_batch
from strom.replication.state import PartitionView
from strom.storage.config import LogConfig

from .harness import Cluster, wait_until


async def test_scrape_shows_replication_state(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, (0, 1))
    try:
        await cluster.start(0)
        await cluster.start(1)
        cluster.set_view(PartitionView("t", 0, 0, 0, 0, (0, 1), (0,)))
        cluster.set_view(PartitionView("u", 0, -1, 1, 0, (0, 1), ()))
        leader = cluster.nodes[0].m
        await leader.append("t", 0, encode_batch([(None, b"v" * 50)]), 1, LogConfig(), 1000)
        metrics = BrokerMetrics(0)
        metrics.watch_replicas(leader)
        text = generate_latest(metrics.registry).decode()
        assert "strom_under_replicated_partitions 1.0" in text
        assert "strom_offline_partitions 1.0" in text
        assert "strom_leader_partitions 1.0" in text
        await wait_until(lambda: cluster.view().isr == (0, 1), what="ISR expansion")
        text = generate_latest(metrics.registry).decode()
        assert "strom_under_replicated_partitions 0.0" in text
        assert "strom_isr_expands_total 1.0" in text
        assert "strom_isr_shrinks_total 0.0" in text
        assert "strom_replication_bytes_out_total" in text
        assert "strom_replica_fetch_sessions 1.0" in text  # broker 1's one session
        follower = BrokerMetrics(1)
        follower.watch_replicas(cluster.nodes[1].m)
        ftext = generate_latest(follower.registry).decode()
        assert "strom_replica_fetcher_max_lag 0.0" in ftext
        assert "strom_offline_partitions 0.0" in ftext  # broker 0 is u-0's preferred replica
        assert "strom_replication_bytes_in_total" in ftext
    finally:
        await cluster.close()
