"""The operator's cluster gauges follow the StromCluster status it wrote: readiness, partition
health and rebalancing progress (present from the first reconcile, so the dashboards' panels
are never empty)."""

from __future__ import annotations

from prometheus_client import generate_latest

from strom_operator.handlers import metrics


def _value(name: str, namespace: str, cluster: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, {"namespace": namespace, "cluster": cluster})


def test_a_cluster_that_never_rebalanced_shows_nothing_moving():
    metrics.record_cluster_status("ns1", "quiet", {"ready": "3/3", "conditions": []})
    assert _value("strom_operator_cluster_brokers_ready", "ns1", "quiet") == 3
    assert _value("strom_operator_cluster_rebalancing", "ns1", "quiet") == 0
    assert _value("strom_operator_rebalance_partitions_moving", "ns1", "quiet") == 0
    assert _value("strom_operator_rebalance_moves", "ns1", "quiet") == 0
    assert _value("strom_operator_rebalance_percent", "ns1", "quiet") == 100


def test_rebalance_progress_from_status():
    moving = {
        "conditions": [{"type": "Rebalancing", "status": "True", "reason": "Moving"}],
        "rebalance": {"state": "Moving", "movesTotal": 12, "partitionsMoving": 5, "percent": 40.0},
    }
    metrics.record_cluster_status("ns2", "busy", moving)
    assert _value("strom_operator_cluster_rebalancing", "ns2", "busy") == 1
    assert _value("strom_operator_rebalance_moves", "ns2", "busy") == 12
    assert _value("strom_operator_rebalance_partitions_moving", "ns2", "busy") == 5
    assert _value("strom_operator_rebalance_percent", "ns2", "busy") == 40
    # Moving with no percent known yet: the last percent stays, nothing is invented.
    metrics.record_cluster_status(
        "ns2", "busy", {**moving, "rebalance": {"movesTotal": 12, "partitionsMoving": 4}}
    )
    assert _value("strom_operator_rebalance_percent", "ns2", "busy") == 40
    done = {
        "conditions": [{"type": "Rebalancing", "status": "False", "reason": "Done"}],
        "rebalance": {"state": "Done", "movesTotal": 12, "partitionsMoving": 0, "percent": 100.0},
    }
    metrics.record_cluster_status("ns2", "busy", done)
    assert _value("strom_operator_cluster_rebalancing", "ns2", "busy") == 0
    assert _value("strom_operator_rebalance_partitions_moving", "ns2", "busy") == 0
    assert _value("strom_operator_rebalance_percent", "ns2", "busy") == 100


def test_exported_lists_every_sample_name():
    metrics.record_cluster_status("ns3", "c", {"ready": "1/1", "underReplicatedPartitions": 0,
                                               "offlinePartitions": 0})
    metrics.RECONCILE_TOTAL.labels("StromCluster", "ok").inc(0)
    metrics.RECONCILE_SECONDS.labels("StromCluster").observe(0)
    metrics.GROUP_LAG.labels("ns3", "g").set(0)
    text = generate_latest(metrics.REGISTRY).decode()
    names = {
        line.split("{")[0].split(" ")[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    names = {n for n in names if not n.endswith("_created")}
    assert names == metrics.EXPORTED
