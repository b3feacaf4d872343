"""``__consumer_offsets`` records: codec round trips, replay, deletion, expiry, partition choice."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.groups.membership import (
    Group,
    GroupConfig,
    GroupState,
    Heartbeat,
    HeartbeatResponse,
    JoinGroup,
    JoinGroupResponse,
    Subscription,
    SyncGroup,
    SyncGroupResponse,
)
from strom.groups.offsets import (
    GroupKey,
    GroupMetadata,
    OffsetAndMetadata,
    OffsetKey,
    OffsetStore,
    Record,
    StoredMember,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_value,
    encode_key,
    encode_offset_value,
    group_metadata_from_snapshot,
    group_record,
    java_string_hash,
    partition_for_group,
    snapshot_from_group_metadata,
)
from strom.protocol.errors import ErrorCode, StromError

DAY = 24 * 60 * 60 * 1000


def java_hash_by_hand(s: str) -> int:
    """s[0]*31^(n-1) + ... + s[n-1], in 32-bit two's complement (ASCII ids)."""
    n = len(s)
    h = int(sum(ord(c) * 31 ** (n - 1 - i) for i, c in enumerate(s)) % 2**32)
    return h - 2**32 if h >= 2**31 else h


@pytest.mark.parametrize("group_id", ["abc", "my-group", "console-consumer-12345", ""])
def test_java_string_hash_matches_the_formula(group_id: str) -> None:
    assert java_string_hash(group_id) == java_hash_by_hand(group_id)


def test_partition_for_group_known_values() -> None:
    # "abc".hashCode() = 97*31^2 + 98*31 + 99 = 96354
    assert java_string_hash("abc") == 96354
    assert partition_for_group("abc", 50) == 96354 % 50 == 4
    # "my-group".hashCode() is negative (-1906497762): Utils.abs masks the sign bit.
    h = java_hash_by_hand("my-group")
    assert h == -1906497762
    assert partition_for_group("my-group", 50) == (h & 0x7FFFFFFF) % 50
    # The famous string whose hashCode is Integer.MIN_VALUE: Utils.abs gives 0, not a negative.
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for_group("polygenelubricants", 50) == 0


names = st.text(min_size=0, max_size=20)


@given(group=names, topic=names, partition=st.integers(0, 2**31 - 1))
def test_key_round_trip(group: str, topic: str, partition: int) -> None:
    for key in (OffsetKey(group, topic, partition), GroupKey(group)):
        assert decode_key(encode_key(key)) == key


@given(
    offset=st.integers(0, 2**63 - 1),
    ts=st.integers(0, 2**62),
    epoch=st.integers(-1, 2**31 - 1),
    metadata=names,
)
def test_offset_value_round_trip(offset: int, ts: int, epoch: int, metadata: str) -> None:
    value = OffsetAndMetadata(offset, ts, epoch, metadata)
    assert decode_offset_value(encode_offset_value(value)) == value


def test_group_value_round_trip() -> None:
    value = GroupMetadata(
        protocol_type="consumer",
        generation=7,
        protocol_name="cooperative-sticky",
        leader_id="a-1",
        state_timestamp_ms=1_700_000_000_000,
        members=(
            StoredMember(
                "a-1",
                None,
                "a",
                "/10.0.0.1",
                300_000,
                45_000,
                ("t", "u"),
                (("t", 0), ("t", 1), ("u", 3)),
            ),
            StoredMember("b-2", "pod-b", "b", "/10.0.0.2", 300_000, 45_000, ("t",), ()),
        ),
    )
    assert decode_group_value(encode_group_value(value)) == value
    empty = GroupMetadata("consumer", 8, None, None, 5)
    assert decode_group_value(encode_group_value(empty)) == empty


def test_offset_key_layout_is_kafkas() -> None:
    # version int16=1, group "g", topic "t", partition int32=2
    assert encode_key(OffsetKey("g", "t", 2)) == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x02"


def test_corrupt_record_raises() -> None:
    with pytest.raises(StromError) as err:
        decode_key(b"\x00\x01\x00\x05ab")
    assert err.value.code is ErrorCode.CORRUPT_MESSAGE


def test_replay_rebuilds_offsets_and_tombstones_delete() -> None:
    live = OffsetStore()
    log: list[Record] = []

    def append(records: list[Record]) -> None:
        for r in records:
            log.append(r)
            live.apply(r)

    append(
        live.commit("g1", {("t", 0): OffsetAndMetadata(10, 1), ("t", 1): OffsetAndMetadata(5, 1)})
    )
    append(live.commit("g1", {("t", 0): OffsetAndMetadata(42, 2)}))
    append(live.commit("g2", {("t", 0): OffsetAndMetadata(7, 3)}))
    append([group_record("g2", GroupMetadata("consumer", 1, "range", "m", 3))])
    append(live.delete_group("g2"))

    replayed = OffsetStore.load(log)  # a new coordinator reading the partition from the start
    assert replayed == live
    assert replayed.fetch("g1") == {
        ("t", 0): OffsetAndMetadata(42, 2),
        ("t", 1): OffsetAndMetadata(5, 1),
    }
    assert replayed.fetch("g1", [("t", 9)]) == {("t", 9): None}
    assert replayed.fetch("g2") == {}
    assert "g2" not in replayed.groups


def test_negative_commit_is_rejected() -> None:
    with pytest.raises(StromError) as err:
        OffsetStore().commit("g", {("t", 0): OffsetAndMetadata(-5, 0)})
    assert err.value.code is ErrorCode.INVALID_COMMIT_OFFSET_SIZE


def _member() -> StoredMember:
    return StoredMember("m", None, "c", "h", 1, 1, ("t",), (("t", 0),))


def test_offsets_do_not_expire_while_the_group_has_members() -> None:
    store = OffsetStore()
    for r in store.commit("g", {("t", 0): OffsetAndMetadata(1, 0)}):
        store.apply(r)
    store.apply(group_record("g", GroupMetadata("consumer", 1, "range", "m", 0, (_member(),))))
    assert store.expire(now_ms=30 * DAY, retention_ms=7 * DAY) == []


def test_offsets_expire_retention_after_the_group_became_empty() -> None:
    store = OffsetStore()
    for r in store.commit(
        "g", {("t", 0): OffsetAndMetadata(1, 0), ("t", 1): OffsetAndMetadata(2, 0)}
    ):
        store.apply(r)
    emptied_at = 10 * DAY
    store.apply(group_record("g", GroupMetadata("consumer", 2, None, None, emptied_at)))
    assert store.expire(now_ms=emptied_at + 7 * DAY - 1, retention_ms=7 * DAY) == []
    tombstones = store.expire(now_ms=emptied_at + 7 * DAY, retention_ms=7 * DAY)
    assert [decode_key(r.key) for r in tombstones] == [
        OffsetKey("g", "t", 0),
        OffsetKey("g", "t", 1),
        GroupKey("g"),
    ]
    assert all(r.value is None for r in tombstones)
    for r in tombstones:
        store.apply(r)
    assert store.fetch("g") == {} and "g" not in store.groups


def test_standalone_commits_expire_by_commit_time() -> None:
    store = OffsetStore()
    for r in store.commit("solo", {("t", 0): OffsetAndMetadata(1, 5 * DAY)}):
        store.apply(r)
    assert store.expire(now_ms=11 * DAY, retention_ms=7 * DAY) == []
    (tomb,) = store.expire(now_ms=12 * DAY, retention_ms=7 * DAY)
    assert decode_key(tomb.key) == OffsetKey("solo", "t", 0) and tomb.value is None


def test_coordinator_failover_restores_group_without_rebalance() -> None:
    """Persist a Stable group, replay on a new coordinator, and members carry on heartbeating."""

    g = Group("g", GroupConfig(initial_rebalance_delay_ms=0), new_member_id=lambda c: f"{c}-1")
    (r,) = g.handle(JoinGroup(1, "", Subscription(("t",)), client_id="a"), 0)
    assert isinstance(r, JoinGroupResponse)
    out = g.handle(JoinGroup(2, r.member_id, Subscription(("t",)), client_id="a"), 0)
    (joined,) = [o for o in out if isinstance(o, JoinGroupResponse)]
    g.handle(SyncGroup(3, joined.member_id, 1, None, {joined.member_id: (("t", 0),)}), 10)
    assert g.state is GroupState.STABLE

    record = group_record("g", group_metadata_from_snapshot(g.snapshot(), 10))
    loaded = OffsetStore.load([record])
    restored = Group.restore(snapshot_from_group_metadata("g", loaded.groups["g"]), 1_000)
    assert restored.state is GroupState.STABLE and restored.generation == 1
    (hb,) = restored.handle(Heartbeat(4, joined.member_id, 1), 1_500)
    assert hb == HeartbeatResponse(4, ErrorCode.NONE)
    (sync,) = restored.handle(SyncGroup(5, joined.member_id, 1), 1_600)
    assert getattr(sync, "assignment", None) == (("t", 0),)


def test_kafka_members_opaque_bytes_survive_a_coordinator_failover() -> None:
    """A ``connect`` group's metadata and assignment bytes are stored as Kafka stores them (the
    selected protocol's metadata, the leader's assignment) and come back unchanged on replay."""
    metadata, assignment = b"\x00\x01connect-worker-url", b"\x00\x01\x00\x00leader-assignment"
    g = Group("c", GroupConfig(initial_rebalance_delay_ms=0), new_member_id=lambda c: f"{c}-1")
    sub = Subscription((), protocol_metadata=(("sessioned", metadata), ("default", b"x")))
    (r,) = g.handle(JoinGroup(1, "", sub, protocols=("sessioned", "default"),
                              protocol_type="connect", client_id="w"), 0)
    assert isinstance(r, JoinGroupResponse)
    out = g.handle(JoinGroup(2, r.member_id, sub, protocols=("sessioned", "default"),
                             protocol_type="connect", client_id="w"), 0)
    (joined,) = [o for o in out if isinstance(o, JoinGroupResponse)]
    assert joined.members[0].subscription.metadata_for("sessioned") == metadata
    (synced,) = [o for o in g.handle(SyncGroup(3, joined.member_id, 1, None, None,
                                               {joined.member_id: assignment}), 10)
                 if isinstance(o, SyncGroupResponse)]
    assert synced.assignment_data == assignment and synced.assignment == ()

    stored = group_metadata_from_snapshot(g.snapshot(), 10)
    assert stored.members[0].subscription_data == metadata
    loaded = OffsetStore.load([group_record("c", stored)])
    snapshot = snapshot_from_group_metadata("c", loaded.groups["c"])
    assert snapshot.protocol_type == "connect" and snapshot.members[0].subscription.topics == ()
    assert snapshot.members[0].subscription.metadata_for("sessioned") == metadata
    restored = Group.restore(snapshot, 1_000)
    (sync,) = restored.handle(SyncGroup(5, joined.member_id, 1), 1_600)
    assert isinstance(sync, SyncGroupResponse) and sync.assignment_data == assignment


def test_a_strom_members_record_restores_without_protocol_metadata() -> None:
    """Records of gRPC members hold their topics encoded: those are not Kafka metadata bytes."""
    value = GroupMetadata("consumer", 3, "range", "m", 0, (
        StoredMember("m", None, "c", "", 1000, 1000, ("t",), (("t", 0),)),))
    snapshot = snapshot_from_group_metadata("g", decode_group_value(encode_group_value(value)))
    (member,) = snapshot.members
    assert member.subscription == Subscription(("t",)) and member.assignment == (("t", 0),)
