"""StromCluster reconcile decisions that depend on the cluster's Admin API (fake cluster)."""

from __future__ import annotations

from strom.controller.placement import assign_replicas
from strom.model import reassign as rebalance
from strom_operator.reconcilers import cluster as rc
from strom_operator.reconcilers.admin import DEFAULT_THROTTLE_BYTES_PER_SEC
from tests.reconcilers.fake import FakeApi
from tests.reconcilers.fake_admin import FakeCluster
from tests.reconcilers.test_cluster_reconciler import _pod


def _spec(replicas):
    return {"storage": {"size": "1Gi"}, "brokers": {"replicas": replicas}}


def _body(api, replicas, generation=1):
    live = api.find("StromCluster", "c")
    return {
        "apiVersion": "strom.dev/v1alpha1",
        "kind": "StromCluster",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u-1", "generation": generation},
        "spec": _spec(replicas),
        "status": (live or {}).get("status") or {},
    }


def _cond(api, type_):
    obj = api.find("StromCluster", "c")
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


def _sts(api):
    return api.find("StatefulSet", "c-broker")["spec"]["replicas"]


def _layout(partitions, rf, brokers):
    start = dict(enumerate(assign_replicas(partitions, rf, dict.fromkeys(brokers))))
    return {("t", p): r for p, r in start.items()}


def _run(api, fake, replicas):
    return rc.ClusterReconciler(api, fake).reconcile(_body(api, replicas))


def test_scale_out_rebalances_onto_new_brokers_with_progress_then_done():
    api = FakeApi()
    fake = FakeCluster([0, 1, 2], _layout(10, 3, [0, 1, 2]))
    _run(api, fake, 3)
    assert _cond(api, "AdminApiAvailable")["status"] == "True"
    assert not fake.calls
    _run(api, fake, 5)
    assert _sts(api) == 5
    out = _run(api, fake, 5)
    assert not any(c[0] == "reassign" for c in fake.calls), "waits until 3 and 4 registered"
    assert _cond(api, "Scaling")["status"] == "False"

    fake.brokers += [3, 4]
    out = _run(api, fake, 5)
    (call,) = [c for c in fake.calls if c[0] == "reassign"]
    _, targets, throttle = call
    assert throttle == DEFAULT_THROTTLE_BYTES_PER_SEC
    moved_to = {b for r in targets.values() for b in r}
    assert {3, 4} <= moved_to
    reb = _cond(api, "Rebalancing")
    assert reb["status"] == "True" and reb["reason"] == "Started"
    status = api.find("StromCluster", "c")["status"]
    assert status["rebalance"]["state"] == "Moving"
    assert status["rebalance"]["movesTotal"] == rebalance.minimum_balance_moves(
        rebalance.loads(fake.assignment, range(5))
    )
    assert out.requeue

    api.find("StatefulSet", "c-broker")["status"] = {"replicas": 5, "readyReplicas": 5}
    _run(api, fake, 5)
    reb = _cond(api, "Rebalancing")
    assert reb["reason"] == "Moving" and "40.0% done" in reb["message"]
    ready = _cond(api, "Ready")
    assert ready["reason"] == "InProgress" and "Rebalancing" in ready["message"]
    assert api.find("StromCluster", "c")["status"]["rebalance"]["partitionsMoving"] == len(targets)
    assert len([c for c in fake.calls if c[0] == "reassign"]) == 1, "no second plan while moving"

    fake.finish()
    fake.leaders[("t", 0)] = fake.assignment[("t", 0)][1]  # a non-preferred leader to fix
    out = _run(api, fake, 5)
    reb = _cond(api, "Rebalancing")
    assert reb["status"] == "False" and reb["reason"] == "Done"
    assert ("clear_throttle",) in fake.calls and fake.throttle is None
    assert ("elect", [("t", 0)]) in fake.calls
    loads = fake.load()
    assert max(loads.values()) - min(loads.values()) <= 1 and loads[3] > 0 and loads[4] > 0
    assert api.find("StromCluster", "c")["status"]["rebalance"]["state"] == "Done"

    _run(api, fake, 5)
    assert len([c for c in fake.calls if c[0] == "reassign"]) == 1, "balanced: nothing more"
    assert _cond(api, "Ready")["status"] == "True"


def test_scale_in_drains_before_shrinking():
    api = FakeApi()
    fake = FakeCluster(range(5), _layout(10, 3, range(5)))
    _run(api, fake, 5)
    assert _sts(api) == 5 and not fake.calls

    _run(api, fake, 3)
    assert _sts(api) == 5, "no shrink while brokers 3 and 4 hold replicas"
    assert _cond(api, "Scaling")["reason"] == "Drain"
    (call,) = [c for c in fake.calls if c[0] == "reassign"]
    targets = call[1]
    assert all(set(r) <= {0, 1, 2} for r in targets.values())
    assert {tp for tp, r in fake.assignment.items() if {3, 4} & set(r)} == set(targets)

    _run(api, fake, 3)
    assert _sts(api) == 5
    assert _cond(api, "Scaling")["reason"] == "WaitForDrain"
    assert _cond(api, "Rebalancing")["reason"] == "Moving"

    fake.finish()
    _run(api, fake, 3)
    assert _sts(api) == 3
    assert _cond(api, "Scaling")["reason"] == "ShrinkStatefulSet"
    assert _cond(api, "Rebalancing")["reason"] == "Done"
    assert fake.load()[3] == 0 and fake.load()[4] == 0
    assert not any(c[0] == "unregister" for c in fake.calls), "not while their pods may run"

    fake.fenced |= {3, 4}  # the pods are gone: the controller fenced brokers 3 and 4
    _run(api, fake, 3)
    assert ("unregister", [3, 4]) in fake.calls
    assert sorted(fake.brokers) == [0, 1, 2]
    _run(api, fake, 3)
    assert [c for c in fake.calls if c[0] == "unregister"] == [("unregister", [3, 4])]


def test_a_fenced_broker_that_holds_data_is_never_unregistered():
    api = FakeApi()
    fake = FakeCluster(range(3), _layout(4, 2, range(3)))
    _run(api, fake, 3)
    fake.fenced.add(2)  # down, but it still has replicas
    _run(api, fake, 3)
    assert not any(c[0] == "unregister" for c in fake.calls)


def test_scale_in_below_the_replication_factor_is_refused():
    api = FakeApi()
    fake = FakeCluster(range(3), _layout(4, 3, range(3)))
    _run(api, fake, 3)
    _run(api, fake, 2)
    assert _sts(api) == 3
    c = _cond(api, "Scaling")
    assert c["reason"] == "ScaleInRefused" and "replication factor 3" in c["message"]
    assert not any(c[0] == "reassign" for c in fake.calls)


def test_unreachable_cluster_is_unknown_not_a_crash_and_never_shrinks():
    api = FakeApi()
    fake = FakeCluster(range(5), _layout(10, 3, range(5)))
    _run(api, fake, 5)
    fake.reachable = False
    out = _run(api, fake, 3)
    c = _cond(api, "AdminApiAvailable")
    assert c["status"] == "False" and "NETWORK_EXCEPTION" in c["message"]
    assert _sts(api) == 5 and _cond(api, "Scaling")["reason"] == "WaitForDrain"
    assert out.requeue


def test_roll_waits_for_isr_and_restarts_the_active_controller_last():
    api = FakeApi()
    fake = FakeCluster(range(3), _layout(3, 3, range(3)), controller=2)
    fake.out_of_isr = {("t", 0)}
    for i in range(3):
        api.put(_pod(i, "stale"))
    _run(api, fake, 3)
    assert not [c for c in api.calls if c[0] == "delete"]
    roll = _cond(api, "RollingRestart")
    assert roll["reason"] == "Waiting" and "under-replicated" in roll["message"]

    fake.out_of_isr = set()
    order = []
    for _ in range(3):
        _run(api, fake, 3)
        deleted = [c[2] for c in api.calls if c[0] == "delete"]
        new = deleted[len(order) :]
        assert len(new) == 1
        order += new
        fresh = api.find("StromCluster", "c")["status"]["configHash"]
        api.put(_pod(int(new[0].rsplit("-", 1)[1]), fresh))
        # The restarted broker is not back in the ISR yet: nobody else restarts meanwhile.
        fake.out_of_isr = {("t", 0)}
        _run(api, fake, 3)
        assert len([c for c in api.calls if c[0] == "delete"]) == len(order)
        fake.out_of_isr = set()
    # controllers.replicas defaults to 1: broker 0 is the voter, 2 the active controller (fake).
    assert order == ["c-broker-1", "c-broker-0", "c-broker-2"], "active controller last"


def test_unmanaged_topics_are_reported_not_deleted():
    api = FakeApi()
    fake = FakeCluster(range(3), {("orders", 0): [0, 1, 2], ("legacy", 0): [1, 2, 0]})
    api.put(
        {
            "apiVersion": "strom.dev/v1alpha1",
            "kind": "StromTopic",
            "metadata": {"name": "orders", "namespace": "ns"},
            "spec": {"clusterRef": {"name": "c"}},
        }
    )
    _run(api, fake, 3)
    assert api.find("StromCluster", "c")["status"]["unmanagedTopics"] == ["legacy"]
    assert not any(c[0] == "delete" for c in fake.calls)


def test_scale_out_raises_consumer_offsets_replication():
    """A cluster that started with one broker has __consumer_offsets at RF 1 (the coordinator
    creates it at min(offsets.topic.replication.factor, live brokers)); after scaling out the
    operator raises it to min(3, brokers) with the reassignment (issue 12)."""
    api = FakeApi()
    layout = {("__consumer_offsets", p): [0] for p in range(4)}
    layout.update({("t", p): [0] for p in range(2)})
    fake = FakeCluster([0], layout)
    _run(api, fake, 1)
    _run(api, fake, 3)
    fake.brokers += [1, 2]
    _run(api, fake, 3)
    (call,) = [c for c in fake.calls if c[0] == "reassign"]
    targets = call[1]
    for p in range(4):
        replicas = targets[("__consumer_offsets", p)]
        assert sorted(replicas) == [0, 1, 2], targets  # with the rebalance's moves
    assert all(len(r) == 1 for tp, r in targets.items() if tp[0] == "t"), "user topics keep RF"
    fake.finish()
    _run(api, fake, 3)
    _run(api, fake, 3)
    assert len([c for c in fake.calls if c[0] == "reassign"]) == 1, "raised once, then steady"
    assert all(len(fake.assignment[("__consumer_offsets", p)]) == 3 for p in range(4))
