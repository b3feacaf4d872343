"""A leader alone in its ISR (RF 1, or followers all out) moves the high watermark to its log
end offset without building the maximal ISR set (issue 21: once per appended partition), and
every other case still waits for its followers: the shortcut answers as
``isr.high_watermark`` does."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.protocol.records import encode_batch
from strom.replication import isr
from strom.replication.partition import Partition
from strom.replication.state import PartitionView
from strom.storage import LogConfig, PartitionLog


@pytest.mark.parametrize(("in_sync", "pending", "follower_end", "moves_to"), [
    ((0,), None, None, 5),  # alone: the log end offset
    ((0,), (0, 1), 2, 2),  # a follower joining (pending): it holds the high watermark
    ((0, 1), None, 3, 3),  # a follower in the ISR: its end
    ((0, 1), None, None, 0),  # a follower in the ISR with no known end: no move
    ((1, 0), None, 5, 5),
    ((1,), None, 4, 4),  # the leader not listed: the follower decides (general rule)
])
def test_alone_or_not_the_high_watermark_is_the_general_rules(
        tmp_path: Path, in_sync: tuple[int, ...], pending: tuple[int, ...] | None,
        follower_end: int | None, moves_to: int) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), topic="t", partition=0)
    view = PartitionView("t", 0, leader=0, leader_epoch=1, partition_epoch=1,
                         replicas=(0, 1), isr=in_sync)
    part = Partition(view, log, broker_id=0)
    part.become_leader(0)
    if follower_end is not None:
        part.followers[1] = isr.FollowerState(log_end_offset=follower_end, last_caught_up_ms=0)
    else:
        part.followers.pop(1, None)
    part.pending_isr = pending
    log.append_as_leader(encode_batch([(None, b"v")] * 5), leader_epoch=1)
    expected = isr.high_watermark(0, 0, log.log_end_offset, part.maximal_isr(), part.followers)
    moved = part.advance_high_watermark()
    assert log.high_watermark == expected == moves_to
    assert moved == (moves_to > 0)
    log.close()
