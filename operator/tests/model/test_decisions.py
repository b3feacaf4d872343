"""Storage, scaling, topic diff and autoscale decisions."""

from __future__ import annotations

import pytest

from strom_operator.model import autoscale, scaling, storage, topics
from strom_operator.model.quantity import parse_quantity
from strom_operator.model.specs import Autoscale, ScaleTarget, parse_topic


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10Gi", 10 * 2**30),
        ("500m", 0.5),
        ("1.5G", 1_500_000_000),
        ("1e3", 1000),
        ("2E", 2 * 10**18),
        ("100", 100),
        ("1Ki", 1024),
    ],
)
def test_parse_quantity(text, value):
    assert parse_quantity(text) == value


def test_parse_quantity_rejects_garbage():
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity("10GB")


def test_storage_grow_shrink_and_not_expandable():
    claims = {"data-c-broker-0": "10Gi", "data-c-broker-1": "10Gi"}
    grow = storage.decide("20Gi", claims, True)
    assert grow.action == "Expand" and grow.pvcs == tuple(sorted(claims))
    assert storage.decide("10Gi", claims, True).action == "None"
    shrink = storage.decide("5Gi", claims, True)
    assert shrink.action == "RejectShrink" and "can not shrink" in shrink.message
    assert storage.decide("20Gi", claims, False).action == "RejectNotExpandable"
    assert storage.decide("20Gi", claims, None).action == "Expand"


def test_scaling_out_grows_at_once():
    d = scaling.decide(
        desired=5,
        current=3,
        registered=None,
        replicas_per_broker=None,
        max_replication_factor=3,
        reassignment_in_progress=False,
    )
    assert d.step == "GrowStatefulSet"


def test_scaling_in_refuses_below_rf_and_drains_first():
    common = dict(
        desired=2,
        current=5,
        registered=frozenset(range(5)),
        max_replication_factor=3,
        reassignment_in_progress=False,
    )
    assert scaling.decide(**common, replicas_per_broker={}).step == "Refuse"
    common["desired"] = 3
    d = scaling.decide(**common, replicas_per_broker={0: 4, 3: 2, 4: 0})
    assert d.step == "Drain" and d.leaving == (3, 4)
    d = scaling.decide(**{**common, "reassignment_in_progress": True}, replicas_per_broker={3: 1})
    assert d.step == "WaitForDrain"
    d = scaling.decide(**common, replicas_per_broker={0: 4, 1: 4, 2: 4})
    assert d.step == "ShrinkStatefulSet"
    d = scaling.decide(**common, replicas_per_broker=None)
    assert d.step == "WaitForDrain", "never shrink while the placement is unknown"


def test_scaling_steady_waits_for_registration_then_rebalances():
    base = dict(desired=5, current=5, max_replication_factor=3, reassignment_in_progress=False)
    d = scaling.decide(**base, registered=frozenset({0, 1, 2}), replicas_per_broker=None)
    assert d.step == "WaitForBrokers"
    d = scaling.decide(
        **base, registered=frozenset(range(5)), replicas_per_broker={0: 4, 1: 4, 2: 4, 3: 0, 4: 0}
    )
    assert d.step == "Rebalance"


def _topic(**spec):
    return parse_topic({"clusterRef": {"name": "c"}, **spec})


RACKS = {0: "a", 1: "b", 2: "c", 3: "a"}


def test_topic_create_grow_reject_shrink_and_config():
    spec = _topic(partitions=3, replicationFactor=2, config={"retention.ms": 1000})
    assert topics.diff(spec, "t", None, RACKS).create
    live = topics.LiveTopic("t", {0: [0, 1], 1: [1, 2]}, {"retention.ms": "5", "segment.ms": "9"})
    changes = topics.diff(spec, "t", live, RACKS)
    assert changes.grow_to == 3
    assert changes.set_config == {"retention.ms": "1000"}
    assert changes.delete_config == ("segment.ms",)
    live3 = topics.LiveTopic("t", {0: [0, 1], 1: [1, 2], 2: [2, 0], 3: [0, 1]}, {})
    rejected = topics.diff(spec, "t", live3, RACKS)
    assert rejected.rejected and "only grow" in rejected.rejected


def test_topic_rf_change_becomes_reassignment():
    spec = _topic(partitions=2, replicationFactor=3)
    live = topics.LiveTopic("t", {0: [0, 1], 1: [1, 2]}, {})
    changes = topics.diff(spec, "t", live, RACKS)
    assert set(changes.reassign) == {0, 1}
    for p, replicas in changes.reassign.items():
        assert len(set(replicas)) == 3 and replicas[:2] == live.assignment[p]
    too_big = topics.diff(_topic(replicationFactor=5), "t", live, RACKS)
    assert too_big.rejected and "exceeds" in too_big.rejected


def test_unmanaged_topics_are_reported_not_deleted():
    assert topics.unmanaged(["a", "b", "__consumer_offsets"], ["a"]) == ["b"]


def _auto(**kw):
    base = dict(target=ScaleTarget(name="w"), max_replicas=10, lag_per_replica=100)
    return Autoscale(**{**base, **kw})


def test_autoscale_ceil_of_lag_capped_by_partitions_and_max():
    assert autoscale.desired_replicas(_auto(), 250, 12) == 3
    assert autoscale.desired_replicas(_auto(), 5000, 6) == 6
    assert autoscale.desired_replicas(_auto(max_replicas=4), 5000, 12) == 4
    assert autoscale.desired_replicas(_auto(min_replicas=2), 0, 12) == 2


def test_autoscale_scale_to_zero_and_activation():
    spec = _auto(min_replicas=0, activation_lag=50)
    assert autoscale.desired_replicas(spec, 40, 12) == 0
    assert autoscale.desired_replicas(spec, 60, 12) == 1


def test_autoscale_cooldown_only_delays_scale_down():
    spec = _auto(cooldown_seconds=300)
    up = autoscale.decide(
        spec, total_lag=900, partitions=12, current=2, seconds_since_last_scale=10
    )
    assert up.changed and up.replicas == 9
    down = autoscale.decide(
        spec, total_lag=100, partitions=12, current=9, seconds_since_last_scale=10
    )
    assert not down.changed and "cooling down" in down.reason
    later = autoscale.decide(
        spec, total_lag=100, partitions=12, current=9, seconds_since_last_scale=301
    )
    assert later.changed and later.replicas == 1
    unknown = autoscale.decide(
        spec, total_lag=None, partitions=12, current=3, seconds_since_last_scale=None
    )
    assert not unknown.changed
