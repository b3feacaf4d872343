"""AdminClusterAdmin's mapping of strom.client answers, with a stand-in Admin (no brokers)."""

from __future__ import annotations

from strom.client.models import (
    BrokerDescription,
    ClusterDescription,
    PartitionDescription,
    PartitionReassignment,
    TopicDescription,
)
from strom.protocol.errors import ErrorCode, StromError
from strom_operator.model.manifests import ClusterRef
from strom_operator.model.specs import parse_cluster
from strom_operator.reconcilers.admin import AdminClusterAdmin

REF = ClusterRef(name="c", namespace="ns", uid="u", generation=1)
SPEC = parse_cluster({"storage": {"size": "1Gi"}})


def _part(p, replicas, isr, leader):
    return PartitionDescription(p, leader, 0, list(replicas), list(isr))


class StandIn:
    opened: list[tuple[str, int]] = []

    def __init__(self, address, timeout_ms, fail=None):
        self.opened.append((address, timeout_ms))
        self.fail = fail
        self.closed = False

    def describe_cluster(self):
        if self.fail:
            raise self.fail
        return ClusterDescription(
            "id",
            1,
            [BrokerDescription(b, "h", 1, rack=f"r{b % 2}") for b in range(4)],
            fenced_broker_ids=[3],
        )

    def describe_topics(self, names=None, include_internal=False):
        return [
            TopicDescription(
                "t",
                "x",
                False,
                [_part(0, [0, 1, 2], [0, 1, 2], 0), _part(1, [1, 2, 3], [1, 2], 1)],
                {"retention.ms": "1000"},
            ),
            TopicDescription("__consumer_offsets", "y", True, [_part(0, [2], [2], -1)]),
        ]

    def list_partition_reassignments(self, topics=None):
        return [PartitionReassignment("t", 1, [1, 2, 3, 0], [0], [3], [1, 2], 1)]

    def close(self):
        self.closed = True


def test_describe_builds_the_cluster_state():
    admin = AdminClusterAdmin({"ns/c": "10.0.0.1:9092"}, timeout_ms=1234, factory=StandIn)
    state = admin.describe(REF, SPEC)
    assert StandIn.opened[-1] == ("10.0.0.1:9092", 1234)
    assert state is not None and admin.last_error is None
    assert state.registered == frozenset({0, 1, 2}) and state.active_controller == 1
    assert state.replicas_per_broker == {0: 1, 1: 2, 2: 3, 3: 1}
    assert state.under_replicated == 1 and state.offline == 1 and state.partitions == 3
    assert state.topics == ("t",), "internal topics are not reported as unmanaged"
    assert state.reassignment_in_progress and state.racks[1] == "r1"
    view = admin.topic(REF, SPEC, "t")
    assert view.live is not None and view.live.config == {"retention.ms": "1000"}
    assert view.moving and 3 not in view.racks


def test_unreachable_or_broken_answers_are_unknown():
    def refused(address, timeout_ms):
        return StandIn(address, timeout_ms, StromError(ErrorCode.NETWORK_EXCEPTION, "refused"))

    admin = AdminClusterAdmin(factory=refused)
    assert admin.describe(REF, SPEC) is None
    assert "c-bootstrap.ns.svc:9092" in admin.last_error and "refused" in admin.last_error

    def bad_address(address, timeout_ms):
        raise ValueError("bad address")

    admin = AdminClusterAdmin(factory=bad_address)
    assert admin.describe(REF, SPEC) is None and "bad address" in admin.last_error


class GroupStandIn(StandIn):
    def describe_group(self, group_id):
        from strom.client.models import GroupDescription

        return GroupDescription(group_id=group_id, state="Empty")

    def group_lag(self, group_id):
        from strom.client.models import GroupPartitionLag

        return [
            GroupPartitionLag("t", 0, committed=40, log_start_offset=0, log_end_offset=100),
            GroupPartitionLag("t", 1, committed=None, log_start_offset=30, log_end_offset=100),
            # a topic deleted since the group committed: its log end is unknown
            GroupPartitionLag("gone", 0, committed=7, log_start_offset=-1, log_end_offset=-1),
        ]


def test_group_view_takes_the_one_lag_definition_and_skips_deleted_topics():
    admin = AdminClusterAdmin({"ns/c": "10.0.0.1:9092"}, factory=GroupStandIn)
    view = admin.group(REF, SPEC, "g", ["t", "gone"])
    assert [(r.topic, r.partition, r.lag) for r in view.lags] == [("t", 0, 60), ("t", 1, 70)]
