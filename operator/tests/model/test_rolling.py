"""Roll order: one pod at a time, stale only, unready first, the active controller last."""

from __future__ import annotations

from strom_operator.model.rolling import BrokerPod, next_restart, roll_order


def pods(n, stale=(), unready=(), terminating=()):
    return [
        BrokerPod(
            f"c-broker-{i}", i, "old" if i in stale else "new", i not in unready, i in terminating
        )
        for i in range(n)
    ]


def test_up_to_date_pods_are_skipped():
    decision = next_restart(pods(3), "new", controller_voters=1)
    assert decision.restart is None and decision.reason == "UpToDate"


def test_order_brokers_then_voters_then_active_controller():
    order = roll_order(pods(5, stale=range(5)), "new", controller_voters=3, active_controller=1)
    assert [p.ordinal for p in order] == [3, 4, 0, 2, 1]


def test_one_at_a_time_waits_for_ready():
    ps = pods(3, stale=(0, 1), unready=(2,))
    decision = next_restart(ps, "new", controller_voters=1)
    assert decision.restart is None and "c-broker-2" in decision.message


def test_stale_unready_pod_goes_first():
    ps = pods(3, stale=(0, 2), unready=(2,))
    decision = next_restart(ps, "new", controller_voters=1, active_controller=0)
    assert decision.restart == "c-broker-2"


def test_waits_for_under_replicated_partitions():
    decision = next_restart(pods(3, stale=(1,)), "new", controller_voters=1, under_replicated=4)
    assert decision.restart is None and "under-replicated" in decision.message
    decision = next_restart(pods(3, stale=(1,)), "new", controller_voters=1, under_replicated=0)
    assert decision.restart == "c-broker-1" and "unknown" not in decision.message


def test_waits_while_a_pod_terminates():
    decision = next_restart(pods(3, stale=(1,), terminating=(0,)), "new", controller_voters=1)
    assert decision.restart is None and "terminate" in decision.message


def test_full_roll_sequence_restarts_each_stale_pod_once_controller_last():
    current = {i: "old" for i in range(4)}
    restarted = []
    for _ in range(10):
        ps = [BrokerPod(f"c-broker-{i}", i, h, True) for i, h in current.items()]
        d = next_restart(ps, "new", controller_voters=3, active_controller=0, under_replicated=0)
        if d.restart is None:
            break
        i = int(d.restart.rsplit("-", 1)[1])
        restarted.append(i)
        current[i] = "new"
    assert restarted == [3, 1, 2, 0]
