"""Group protocols are opaque to the coordinator, as in Kafka: a custom assignor's user data in
subscriptions and assignments (what Kafka Streams relies on) reaches the leader and the members
unchanged, and a group of another protocol type (Kafka Connect's ``connect``) forms, syncs and
is described with its members' own bytes."""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka.coordinator.assignors.abstract import (
    AbstractPartitionAssignor,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from kio.schema.describe_groups.v5 import request as dg_req
from kio.schema.describe_groups.v5 import response as dg_resp
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9 import request as jg_req
from kio.schema.join_group.v9 import response as jg_resp
from kio.schema.sync_group.v5 import request as sg_req
from kio.schema.sync_group.v5 import response as sg_resp
from kio.static.primitive import i32Timedelta

from strom.testing import BrokerProcess
from strom.testing.compat import polled

from .conftest import kafka_call, new_topic

pytestmark = pytest.mark.integration


class UserDataAssignor(AbstractPartitionAssignor):
    """Round-robin over the partitions; every subscription carries ``member:<tag>`` and every
    assignment ``for:<the member's subscription user data>``, and what each side saw is kept."""

    name = "userdata"
    version = 0

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.seen_by_leader: dict[str, bytes] = {}
        self.received: list[bytes] = []

    def metadata(self, topics: Any) -> ConsumerProtocolSubscription:
        return ConsumerProtocolSubscription(self.version, sorted(topics),
                                            b"member:" + self.tag.encode())

    def assign(self, cluster: Any, members: Any) -> dict[str, ConsumerProtocolAssignment]:
        ids = sorted(m.member_id for m in members)
        self.seen_by_leader = {m.member_id: bytes(m.metadata.user_data or b"") for m in members}
        out: dict[str, list[tuple[str, int]]] = {i: [] for i in ids}
        topics = sorted({t for m in members for t in m.metadata.topics})
        n = 0
        for topic in topics:
            for p in sorted(cluster.partitions_for_topic(topic) or ()):
                out[ids[n % len(ids)]].append((topic, p))
                n += 1
        return {i: ConsumerProtocolAssignment(
            self.version,
            [(t, [p for tt, p in out[i] if tt == t]) for t in topics if any(
                tt == t for tt, _ in out[i])],
            b"for:" + self.seen_by_leader[i]) for i in ids}

    def on_assignment(self, assignment: Any, generation: int) -> None:
        self.received.append(bytes(assignment.user_data or b""))


@contextlib.contextmanager
def _polling(consumers: list[KafkaConsumer]) -> Iterator[None]:
    """Each consumer polls in its own thread (kafka-python joins and heartbeats from poll;
    :func:`strom.testing.compat.polled`), and is closed after."""
    try:
        with contextlib.ExitStack() as stack:
            for c in consumers:
                stack.enter_context(polled(c))
            yield
    finally:
        for c in consumers:
            c.close()


def test_a_custom_assignors_user_data_reaches_the_leader_and_every_member(
        broker: BrokerProcess) -> None:
    topic = new_topic(broker, partitions=4)
    assignors = [UserDataAssignor("a"), UserDataAssignor("b")]
    consumers = [KafkaConsumer(topic, bootstrap_servers=broker.kafka_bootstrap,
                               group_id=f"{topic}-g", partition_assignment_strategy=[a],
                               session_timeout_ms=6000, heartbeat_interval_ms=500,
                               enable_auto_commit=False) for a in assignors]
    with _polling(consumers):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assigned = [c.assignment() for c in consumers]
            if all(len(a) == 2 for a in assigned) and all(a.received for a in assignors):
                break
            time.sleep(0.2)
        assert all(len(c.assignment()) == 2 for c in consumers), \
            [c.assignment() for c in consumers]
        leaders = [a for a in assignors if len(a.seen_by_leader) == 2]
        assert leaders, [a.seen_by_leader for a in assignors]
        assert sorted(leaders[-1].seen_by_leader.values()) == [b"member:a", b"member:b"]
        assert assignors[0].received[-1] == b"for:member:a"
        assert assignors[1].received[-1] == b"for:member:b"


def _join(port: int, group: str, member_id: str, metadata: bytes) -> Any:
    return kafka_call(port, 11, 9, jg_req.JoinGroupRequest(
        group_id=group, session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)), member_id=member_id,
        group_instance_id=None, protocol_type="connect",
        protocols=(jg_req.JoinGroupRequestProtocol(name="sessioned", metadata=metadata),
                   jg_req.JoinGroupRequestProtocol(name="default", metadata=b"other")),
        reason=None), jg_resp.JoinGroupResponse)


def test_a_connect_protocol_group_relays_its_members_bytes(broker: BrokerProcess) -> None:
    """Kafka Connect's workers join with protocol type ``connect``: the coordinator selects a
    protocol and relays the metadata and the leader's assignment without reading them."""
    group = f"connect-{new_topic(broker)}"
    metadata = b"\x00\x01\x00\x15http://worker-1:8083/\x00\x00\x00\x00\x00\x00\x00\x07"
    assignment = b"\x00\x01\x00\x00\x00\x08worker-1\xff\xff\xff\xff"
    first = _join(broker.kafka_port, group, "", metadata)
    assert first.error_code == ErrorCode.member_id_required, first
    joined = _join(broker.kafka_port, group, first.member_id, metadata)
    assert joined.error_code == ErrorCode.none, joined
    assert (joined.protocol_type, joined.protocol_name) == ("connect", "sessioned")
    assert joined.leader == joined.member_id
    assert [(m.member_id, m.metadata) for m in joined.members] == [(joined.member_id, metadata)]

    synced = kafka_call(broker.kafka_port, 14, 5, sg_req.SyncGroupRequest(
        group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
        group_instance_id=None, protocol_type="connect", protocol_name="sessioned",
        assignments=(sg_req.SyncGroupRequestAssignment(member_id=joined.member_id,
                                                       assignment=assignment),)),
        sg_resp.SyncGroupResponse)
    assert synced.error_code == ErrorCode.none, synced
    assert synced.assignment == assignment

    described = kafka_call(broker.kafka_port, 15, 5, dg_req.DescribeGroupsRequest(
        groups=(group,), include_authorized_operations=False), dg_resp.DescribeGroupsResponse)
    (g,) = described.groups
    assert (g.group_state, g.protocol_type, g.protocol_data) == ("Stable", "connect", "sessioned")
    (m,) = g.members
    assert (m.member_metadata, m.member_assignment) == (metadata, assignment)
