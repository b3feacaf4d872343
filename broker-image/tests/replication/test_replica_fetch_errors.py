"""The leader side of ReplicaFetch, called directly (no sockets): validation and answers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import encode_batch
from strom.protocol.v1 import replica_pb2
from strom.replication.manager import ReplicaManager
from strom.replication.settings import ReplicationSettings
from strom.replication.state import PartitionView
from strom.storage.config import LogConfig
from strom.storage.manager import LogManager


async def _no_alter(topic: str, partition: int, isr: tuple[int, ...], epoch: int) -> None:
    raise StromError(ErrorCode.INVALID_UPDATE_VERSION, "not in this test")


@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[ReplicaManager]:
    logs = LogManager([tmp_path], LogConfig())
    manager = ReplicaManager(ReplicationSettings(broker_id=0), logs, _no_alter, lambda _: None)
    manager.apply_partition(PartitionView("t", 0, 0, 3, 0, (0, 1), (0,)), LogConfig())
    for i in range(3):
        await manager.append("t", 0, encode_batch([(None, b"%d" % i)]), 1, LogConfig(), 1000)
    try:
        yield manager
    finally:
        await manager.stop()
        logs.close()


def _fetch(offset: int, last_epoch: int, *, epoch: int = 3, replica: int = 1,
           topic: str = "t") -> replica_pb2.ReplicaFetchRequest:
    return replica_pb2.ReplicaFetchRequest(replica_id=replica, max_wait_ms=0, partitions=[
        replica_pb2.ReplicaFetchPartition(topic=topic, partition=0, fetch_offset=offset,
                                          last_fetched_epoch=last_epoch,
                                          current_leader_epoch=epoch)])


async def _one(manager: ReplicaManager, request: replica_pb2.ReplicaFetchRequest
               ) -> tuple[replica_pb2.ReplicaFetchPartitionResponse, bytes]:
    _, [(answer, records)] = await manager.replica_fetch(request)
    assert not answer.records  # the records travel beside the answer (strom.protocol.wire)
    return answer, bytes(records)


@pytest.mark.parametrize(("request_", "code"), [
    (_fetch(0, -1, epoch=2), ErrorCode.FENCED_LEADER_EPOCH),
    (_fetch(0, -1, epoch=4), ErrorCode.UNKNOWN_LEADER_EPOCH),
    (_fetch(0, -1, replica=7), ErrorCode.NOT_LEADER_OR_FOLLOWER),
    (_fetch(0, -1, topic="nope"), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (_fetch(9, 3), ErrorCode.NONE),  # beyond the end in its epoch: diverges, no error
    (_fetch(9, -1), ErrorCode.OFFSET_OUT_OF_RANGE),
    (_fetch(3, 9), ErrorCode.FENCED_LEADER_EPOCH),  # follower newer than leader: stale leader
])
async def test_partition_errors(leader: ReplicaManager, request_: replica_pb2.ReplicaFetchRequest,
                                code: ErrorCode) -> None:
    out, _ = await _one(leader, request_)
    assert out.error_code == code, out.error_message


async def test_records_up_to_log_end_and_divergence_markers(leader: ReplicaManager) -> None:
    out, records = await _one(leader, _fetch(0, -1))
    assert out.error_code == 0 and records
    assert (out.diverging_epoch, out.diverging_end_offset) == (-1, -1)
    assert out.log_end_offset == 3
    assert out.high_watermark == 3  # ISR is the leader alone
    diverged, diverged_records = await _one(leader, _fetch(9, 3))
    assert (diverged.diverging_epoch, diverged.diverging_end_offset) == (3, 3)
    assert not diverged_records
    assert leader.replica_progress("t", 0) == {0: 3, 1: 0}


async def test_bad_request_fails_the_call(leader: ReplicaManager) -> None:
    with pytest.raises(StromError) as err:
        await leader.replica_fetch(_fetch(0, -1, replica=0))
    assert err.value.code == ErrorCode.INVALID_REQUEST
    bad = _fetch(0, -1)
    bad.max_wait_ms = -1
    with pytest.raises(StromError):
        await leader.replica_fetch(bad)
