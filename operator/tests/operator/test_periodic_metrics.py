"""The periodic reconcile (where rebalances, drains and broker start-ups progress) updates the
cluster gauges too, not only the change handlers."""

from __future__ import annotations

import kopf

from strom_operator.handlers import cluster as handlers
from strom_operator.handlers import metrics
from strom_operator.reconcilers.cluster import Outcome


class _Reconciler:
    def reconcile(self, body, old_spec=None):
        return Outcome({"ready": "4/5", "underReplicatedPartitions": 7,
                        "rebalance": {"movesTotal": 9, "partitionsMoving": 3, "percent": 40.0},
                        "conditions": [{"type": "Rebalancing", "status": "True"}]}, [], True)


def test_periodic_reconcile_updates_the_cluster_gauges(monkeypatch):
    monkeypatch.setattr(handlers, "cluster_reconciler", _Reconciler)
    body = kopf.Body({"apiVersion": "strom.dev/v1alpha1", "kind": "StromCluster",
                      "metadata": {"name": "periodic-c", "namespace": "periodic-ns"},
                      "spec": {}})
    handlers.periodic(body=body)
    ready = metrics.BROKERS_READY.labels("periodic-ns", "periodic-c")._value.get()
    urp = metrics.UNDER_REPLICATED.labels("periodic-ns", "periodic-c")._value.get()
    assert (ready, urp) == (4.0, 7.0)
    moving = metrics.REBALANCE_MOVING.labels("periodic-ns", "periodic-c")._value.get()
    rebalancing = metrics.REBALANCING.labels("periodic-ns", "periodic-c")._value.get()
    assert (moving, rebalancing) == (3.0, 1.0)
