"""The metadata image: commands round-trip as JSON, apply deterministically, snapshot faithfully."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest

from strom.controller.metadata import (
    NO_LEADER,
    AlterConfigs,
    Batch,
    ChangePartition,
    Command,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    Endpoint,
    FenceBroker,
    LogDirsOffline,
    MetadataError,
    MetadataImage,
    RegisterBroker,
    UnfenceBroker,
    changes_for_fenced_broker,
    decode_command,
    encode_command,
)
from strom.controller.placement import assign_replicas
from strom.protocol.errors import ErrorCode, StromError


def _cluster(n: int = 3) -> tuple[MetadataImage, list[Command]]:
    image = MetadataImage()
    log: list[Command] = []
    for b in range(n):
        log.append(RegisterBroker(b, f"inc-{b}", (Endpoint("PLAINTEXT", f"b{b}", 9092),), "r"))
        log.append(UnfenceBroker(b, f"inc-{b}"))
    for offset, c in enumerate(log, start=1):
        image.apply(offset, c)
    return image, log


def test_commands_round_trip_through_json() -> None:
    commands: list[Command] = [
        RegisterBroker(1, "u", (Endpoint("PLAINTEXT", "h", 1),), rack="a"),
        FenceBroker(1),
        UnfenceBroker(1, "u"),
        CreateTopic("t", "id", ((1, 2), (2, 1)), (("retention.ms", "1"),)),
        DeleteTopic("t"),
        CreatePartitions("t", ((1,),)),
        AlterConfigs("broker", "1", set=(("a", "b"),), delete=("c",)),
        ChangePartition("t", 0, leader=2, isr=(2,), adding_replicas=(3,)),
    ]
    for c in commands:
        assert decode_command(encode_command(c)) == c


def test_change_partition_encodes_to_the_same_bytes_as_before_its_fast_path() -> None:
    """The bulk command's hand-written encoding is byte for byte what ``asdict`` gave: a log
    written by either version decodes the same."""
    changes = [
        ChangePartition("t", 7, leader=2, isr=(2, 0), replicas=(0, 2), adding_replicas=(),
                        removing_replicas=(1,), expected_partition_epoch=4),
        ChangePartition("t", 0),
        ChangePartition("t", 1, leader=-1, expected_partition_epoch=0),
    ]
    for c in changes:
        body = {**dataclasses.asdict(c), "type": c.TYPE}
        before = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        assert encode_command(c) == before
        assert decode_command(before) == c
        assert type(decode_command(before).isr) in (tuple, type(None))
    batch = Batch((FenceBroker(0), *changes))
    assert decode_command(encode_command(batch)) == batch


def test_topic_lifecycle_and_epochs() -> None:
    image, _ = _cluster()
    image.apply(10, CreateTopic("t", "tid", ((0, 1, 2), (1, 2, 0))))
    p0 = image.partition("t", 0)
    assert (p0.leader, p0.isr, p0.leader_epoch, p0.partition_epoch) == (0, [0, 1, 2], 0, 0)
    image.apply(11, ChangePartition("t", 0, isr=(0, 1)))
    assert (p0.leader_epoch, p0.partition_epoch) == (0, 1)  # ISR shrink: same leader epoch
    image.apply(12, ChangePartition("t", 0, leader=1))
    assert (p0.leader, p0.leader_epoch, p0.partition_epoch) == (1, 1, 2)
    image.apply(13, CreatePartitions("t", ((2, 0, 1),)))
    assert sorted(image.topics["t"].partitions) == [0, 1, 2]
    image.apply(14, AlterConfigs("topic", "t", set=(("cleanup.policy", "compact"),)))
    assert image.topics["t"].configs == {"cleanup.policy": "compact"}
    image.apply(15, DeleteTopic("t"))
    assert "t" not in image.topics and image.offset == 15


def test_invalid_commands_are_rejected_without_changing_the_image() -> None:
    image, _ = _cluster()
    image.apply(10, CreateTopic("t", "tid", ((0, 1),)))
    before = image.to_snapshot()
    bad: list[tuple[Command, ErrorCode]] = [
        (CreateTopic("t", "x", ((0,),)), ErrorCode.TOPIC_ALREADY_EXISTS),
        (CreateTopic("u", "x", ((0, 9),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (CreateTopic("u", "x", ((0, 0),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (ChangePartition("t", 0, leader=2), ErrorCode.INVALID_REQUEST),  # not in the ISR
        (ChangePartition("t", 0, isr=(0, 2)), ErrorCode.INVALID_REQUEST),  # not a replica
        (ChangePartition("t", 5, leader=0), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (UnfenceBroker(1, "stale-incarnation"), ErrorCode.BROKER_NOT_AVAILABLE),
        (DeleteTopic("nope"), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    for offset, (command, code) in enumerate(bad, start=11):
        with pytest.raises(MetadataError) as err:
            image.apply(offset, command)
        assert err.value.code == code, command
    after = MetadataImage.from_snapshot(image.to_snapshot())
    assert after.topics == MetadataImage.from_snapshot(before).topics


def test_reassignment_in_flight_is_part_of_the_partition_state() -> None:
    image, _ = _cluster(5)
    image.apply(20, CreateTopic("t", "tid", ((0, 1, 2),)))
    image.apply(
        21,
        ChangePartition(
            "t", 0, replicas=(0, 1, 2, 3, 4), adding_replicas=(3, 4), removing_replicas=(0, 1)
        ),
    )
    p = image.partition("t", 0)
    assert (p.adding_replicas, p.removing_replicas) == ([3, 4], [0, 1])
    restored = MetadataImage.from_snapshot(image.to_snapshot())
    assert restored.partition("t", 0) == p
    image.apply(22, ChangePartition("t", 0, isr=(0, 1, 2, 3, 4)))
    image.apply(
        23,
        ChangePartition(
            "t",
            0,
            leader=2,
            isr=(2, 3, 4),
            replicas=(2, 3, 4),
            adding_replicas=(),
            removing_replicas=(),
        ),
    )
    assert (p.replicas, p.leader, p.leader_epoch, p.adding_replicas) == ([2, 3, 4], 2, 1, [])


def test_snapshot_restores_an_equal_image() -> None:
    image, _ = _cluster()
    image.apply(10, CreateTopic("t", "tid", ((0, 1), (1, 2)), (("a", "1"),)))
    image.apply(11, AlterConfigs("broker", "", set=(("log.retention.ms", "5"),)))
    image.apply(12, FenceBroker(2))
    restored = MetadataImage.from_snapshot(image.to_snapshot())
    assert restored == image and restored.offset == 12
    assert restored.live_brokers() == {0: "r", 1: "r"}
    assert MetadataImage.from_snapshot(b"") == MetadataImage()


def test_a_snapshot_is_the_json_of_the_whole_image_as_before_its_fast_path() -> None:
    """Topics are encoded by hand (``asdict`` of 10,000 partitions took 320 ms, on the event
    loop of every broker at each compaction): the bytes are what ``asdict`` gave."""
    image, _ = _cluster(4)
    image.apply(10, CreateTopic("t", "tid", ((0, 1), (1, 2)), (("a", "1"),)))
    image.apply(11, ChangePartition("t", 0, replicas=(0, 1, 3), isr=(0, 1),
                                    adding_replicas=(3,)))
    image.apply(12, LogDirsOffline(1, "inc-1", (("/d", "EIO"),), (("t", 1),)))
    image.apply(13, FenceBroker(2))
    body = {
        "offset": image.offset,
        "brokers": [dataclasses.asdict(b) for b in image.brokers.values()],
        "topics": [dataclasses.asdict(t) for t in image.topics.values()],
        "broker_configs": image.broker_configs,
        "cluster_id": image.cluster_id,
        "next_producer_id": image.next_producer_id,
        "producer_id_blocks": {},
    }
    assert image.to_snapshot() == json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    assert image.partition("t", 1).offline_replicas == [1]


def test_fencing_moves_leadership_to_the_next_live_isr_member() -> None:
    image, _ = _cluster()
    image.apply(10, CreateTopic("t", "tid", ((0, 1, 2), (1, 0, 2), (0,))))
    image.apply(11, FenceBroker(0))
    changes = changes_for_fenced_broker(image, 0)
    for offset, c in enumerate(changes, start=12):
        image.apply(offset, c)
    p0, p1, p2 = (image.partition("t", i) for i in range(3))
    assert (p0.leader, p0.isr, p0.leader_epoch) == (1, [1, 2], 1)
    assert (p1.leader, p1.isr, p1.leader_epoch) == (1, [1, 2], 0)
    assert (p2.leader, p2.isr) == (NO_LEADER, [0])  # the last ISR member stays, no clean leader
    assert changes_for_fenced_broker(image, 0) == []  # done: computing again changes nothing


def test_a_new_registration_is_fenced_until_unfenced_with_its_incarnation() -> None:
    image, _ = _cluster(1)
    image.apply(5, RegisterBroker(0, "inc-new", (Endpoint("PLAINTEXT", "b0", 9092),), "r"))
    assert image.brokers[0].fenced and image.brokers[0].epoch == 5
    image.apply(6, UnfenceBroker(0, "inc-new"))
    assert not image.brokers[0].fenced


# ---- placement -------------------------------------------------------------------------------


def test_placement_spreads_replicas_and_leaders_evenly() -> None:
    brokers: dict[int, str | None] = dict.fromkeys(range(6))
    layout = assign_replicas(12, 3, brokers)
    assert all(len(set(r)) == 3 for r in layout)
    assert Counter(r[0] for r in layout) == dict.fromkeys(range(6), 2)  # leaders
    assert Counter(b for r in layout for b in r) == dict.fromkeys(range(6), 6)  # replicas
    assert len({tuple(r) for r in layout}) == 12  # the shift varies the follower sets


def test_placement_is_rack_aware() -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    layout = assign_replicas(30, 3, racks, start_index=4)
    for replicas in layout:
        assert len({racks[b] for b in replicas}) == 3, replicas  # one replica per rack
    assert Counter(r[0] for r in layout) == dict.fromkeys(range(6), 5)
    assert Counter(b for r in layout for b in r) == dict.fromkeys(range(6), 15)
    # two racks, RF 3: both racks are used, and no broker twice
    two = {0: "a", 1: "a", 2: "b", 3: "b"}
    for replicas in assign_replicas(8, 3, two):
        assert {two[b] for b in replicas} == {"a", "b"} and len(set(replicas)) == 3


def test_placement_continues_an_existing_layout() -> None:
    brokers: dict[int, str | None] = dict.fromkeys(range(3))
    whole = assign_replicas(6, 2, brokers, start_index=1)
    assert whole[4:] == assign_replicas(2, 2, brokers, start_index=1, first_partition=4)


def test_replication_factor_larger_than_live_brokers_names_the_numbers() -> None:
    image, _ = _cluster(3)
    image.apply(10, FenceBroker(2))
    with pytest.raises(StromError) as err:
        assign_replicas(1, 3, image.live_brokers())
    assert err.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "replication factor 3" in str(err.value) and "brokers, 2: [0, 1]" in str(err.value)
    with pytest.raises(StromError, match="partitions must be > 0"):
        assign_replicas(0, 1, image.live_brokers())


def test_the_delta_names_what_each_command_changed() -> None:
    image, _ = _cluster()
    assert image.take_delta().full  # a new image: anything may have changed
    assert not image.take_delta()
    image.apply(10, CreateTopic("t", "tid", ((0, 1), (1, 0))))
    image.apply(11, CreateTopic("u", "uid", ((2,),)))
    delta = image.take_delta()
    assert delta.topics == {"t", "u"} and not delta.full and not delta.brokers
    image.apply(12, ChangePartition("t", 1, leader=0))
    image.apply(13, CreatePartitions("u", ((0,),)))
    delta = image.take_delta()
    assert delta.partitions == {("t", 1), ("u", 1)} and not delta.topics
    image.apply(14, AlterConfigs("topic", "u", set=(("retention.ms", "5"),)))
    image.apply(15, AlterConfigs("broker", "", set=(("replication.throttled.rate", "5"),)))
    delta = image.take_delta()
    assert delta.topics == {"u"} and delta.broker_configs and not delta.partitions
    image.apply(16, FenceBroker(2))
    image.apply(17, DeleteTopic("t"))
    delta = image.take_delta()
    assert delta.brokers and delta.topics == {"t"}
    with pytest.raises(MetadataError):
        image.apply(18, ChangePartition("u", 0, leader=1))  # 1 is not a replica: no change
    assert not image.take_delta()
    assert MetadataImage.from_snapshot(image.to_snapshot()).take_delta().full


def test_leaderless_and_reassigning_indexes_follow_the_image() -> None:
    image, _ = _cluster()
    image.apply(10, FenceBroker(2))
    image.apply(11, CreateTopic("t", "tid", ((2,), (0, 1), (2, 0))))
    assert image.leaderless == {("t", 0)}  # its only replica is fenced
    image.apply(12, ChangePartition("t", 1, replicas=(0, 1, 2), adding_replicas=(2,)))
    assert image.reassigning == {("t", 1)}
    image.apply(13, UnfenceBroker(2, "inc-2"))
    image.apply(14, ChangePartition("t", 0, leader=2, isr=(2,)))
    assert image.leaderless == set()
    image.apply(15, ChangePartition("t", 2, leader=NO_LEADER, isr=(2,)))
    assert image.leaderless == {("t", 2)}
    again = MetadataImage.from_snapshot(image.to_snapshot())
    assert again.leaderless == {("t", 2)} and again.reassigning == {("t", 1)}
    image.apply(16, ChangePartition("t", 1, replicas=(0, 1, 2), adding_replicas=()))
    image.apply(17, DeleteTopic("t"))
    assert image.leaderless == set() and image.reassigning == set()


def test_the_not_preferred_index_follows_the_image() -> None:
    """Issue 21 item 2: the preferred-leader check visits this index, not every partition."""
    image, _ = _cluster()
    image.apply(10, CreateTopic("t", "tid", ((0, 1), (1, 0), (2, 0))))
    assert image.not_preferred == set()  # every partition led by its first replica
    image.apply(11, ChangePartition("t", 0, leader=1))
    image.apply(12, ChangePartition("t", 2, leader=NO_LEADER, isr=(2,)))
    assert image.not_preferred == {("t", 0), ("t", 2)}
    again = MetadataImage.from_snapshot(image.to_snapshot())
    assert again.not_preferred == {("t", 0), ("t", 2)}
    image.apply(13, ChangePartition("t", 0, replicas=(1, 0)))  # 1 is the preferred one now
    image.apply(14, ChangePartition("t", 2, leader=2))
    assert image.not_preferred == set()
    image.apply(15, ChangePartition("t", 1, leader=0))
    assert image.not_preferred == {("t", 1)}
    image.apply(16, DeleteTopic("t"))
    assert image.not_preferred == set()
