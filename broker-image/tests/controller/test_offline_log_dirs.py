"""A broker reports a log directory that failed I/O (``LogDirsOffline``): the metadata image
keeps it and marks the replicas there offline; the controller's decisions move leadership and
ISR membership off them (Kafka's ``handleDirectoriesOffline``), never elect them, never let them
back into an ISR; a new registration of the broker (a restart reopens its logs) clears it all;
the report survives a snapshot."""

from __future__ import annotations

import pytest

from strom.controller.decisions import (
    fence_changes,
    imbalanced_partitions,
    leaderless_elections,
    offline_replica_changes,
    preferred_election,
    shutdown_ready,
)
from strom.controller.metadata import (
    NO_LEADER,
    ChangePartition,
    CreateTopic,
    Endpoint,
    LogDirsOffline,
    MetadataError,
    MetadataImage,
    RegisterBroker,
    UnfenceBroker,
    decode_command,
    encode_command,
)
from strom.protocol.errors import ErrorCode

from .test_decisions import Log, _with_topic

REPORT = LogDirsOffline(0, "inc-0", (("/d1", "ENOSPC"),), (("t", 0), ("t", 1), ("gone", 0)))


def _offline_log() -> Log:
    log = _with_topic(((0, 1, 2), (0,), (1, 0)))
    log.apply(REPORT)
    return log


def test_the_report_marks_the_replicas_and_the_broker() -> None:
    log = _offline_log()
    assert log.image.brokers[0].offline_log_dirs == {"/d1": "ENOSPC"}
    assert log.image.partition("t", 0).offline_replicas == [0]
    assert log.image.partition("t", 1).offline_replicas == [0]
    assert log.image.partition("t", 2).offline_replicas == []  # not reported: another dir
    assert decode_command(encode_command(REPORT)) == REPORT
    again = MetadataImage.from_snapshot(log.image.to_snapshot())
    assert again == log.image and again.partition("t", 0).offline_replicas == [0]


def test_a_report_of_an_old_incarnation_is_refused() -> None:
    log = _with_topic(((0, 1, 2),))
    with pytest.raises(MetadataError) as exc:
        log.apply(LogDirsOffline(0, "inc-old", (("/d1", "EIO"),), (("t", 0),)))
    assert exc.value.code == ErrorCode.STALE_BROKER_EPOCH
    assert log.image.partition("t", 0).offline_replicas == []


def test_leadership_and_isr_move_off_offline_replicas() -> None:
    log = _offline_log()
    changes = offline_replica_changes(log.image)
    by_partition = {c.partition: c for c in changes}
    assert set(by_partition) == {0}  # t-1 has no other replica: it keeps its read-only leader
    assert by_partition[0].leader == 1 and by_partition[0].isr == (1, 2)
    log.apply(*changes)
    p = log.image.partition("t", 0)
    assert (p.leader, p.isr) == (1, [1, 2])
    assert offline_replica_changes(log.image) == []
    p1 = log.image.partition("t", 1)
    assert (p1.leader, p1.isr) == (0, [0])


def test_an_offline_follower_leaves_the_isr_and_the_leader_stays() -> None:
    log = _with_topic(((1, 0, 2),))
    log.apply(LogDirsOffline(0, "inc-0", (("/d1", "EIO"),), (("t", 0),)))
    [change] = offline_replica_changes(log.image)
    assert change.leader == 1 and change.isr == (1, 2)


def test_offline_replicas_are_never_elected_nor_readmitted() -> None:
    log = _offline_log()
    log.apply(*offline_replica_changes(log.image))
    epoch = log.image.partition("t", 0).partition_epoch
    with pytest.raises(MetadataError) as exc:
        log.apply(ChangePartition("t", 0, isr=(1, 2, 0), expected_partition_epoch=epoch))
    assert exc.value.code == ErrorCode.INELIGIBLE_REPLICA
    with pytest.raises(MetadataError):
        log.apply(ChangePartition("t", 0, leader=0, isr=(0, 1, 2)))
    with pytest.raises(MetadataError) as exc:
        preferred_election(log.image, "t", 0)
    assert exc.value.code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert ("t", 0) not in imbalanced_partitions(log.image)
    # broker 1 dies: 2 leads; then 2 dies too: nobody online is left, 0 is not elected
    log.apply(*fence_changes(log.image, 1))
    assert log.image.partition("t", 0).leader == 2
    log.apply(*fence_changes(log.image, 2))
    assert log.image.partition("t", 0).leader == NO_LEADER
    assert leaderless_elections(log.image, lambda _: True) == []


def test_a_broker_whose_only_leaderships_are_offline_may_shut_down() -> None:
    log = _with_topic(((1, 0),))
    log.apply(LogDirsOffline(0, "inc-0", (("/d1", "EIO"),), (("t", 0),)))
    # 0 is still in the ISR but cannot take over: 1 need not wait for it
    assert log.image.partition("t", 0).isr == [1, 0]
    assert shutdown_ready(log.image, 1)


def test_a_new_registration_clears_the_offline_state() -> None:
    log = _offline_log()
    log.apply(RegisterBroker(0, "inc-0b", (Endpoint("PLAINTEXT", "h", 9092),)),
              UnfenceBroker(0, "inc-0b"))
    assert log.image.brokers[0].offline_log_dirs == {}
    assert log.image.partition("t", 0).offline_replicas == []
    assert log.image.partition("t", 1).offline_replicas == []


def test_unknown_partitions_and_other_brokers_replicas_are_ignored() -> None:
    log = _with_topic(((1, 2),))
    log.apply(CreateTopic("u", "uid", ((2,),)))
    log.apply(LogDirsOffline(0, "inc-0", (("/d1", "EIO"),), (("t", 0), ("u", 0), ("x", 3))))
    assert log.image.partition("t", 0).offline_replicas == []
    assert log.image.partition("u", 0).offline_replicas == []
