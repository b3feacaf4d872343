"""The Raft messages survive a trip through protobuf bytes unchanged."""

from __future__ import annotations

import pytest

from strom.controller.codec import from_pb, to_pb
from strom.controller.messages import (
    AppendEntries,
    AppendEntriesResponse,
    InstallSnapshot,
    InstallSnapshotResponse,
    LogEntry,
    Message,
    VoteRequest,
    VoteResponse,
)

BIG = 2**63 - 1

MESSAGES: list[Message] = [
    VoteRequest(0, 1, 0, 0),
    VoteRequest(2, BIG, 17, 3, pre_vote=True),
    VoteResponse(1, 5, True),
    VoteResponse(1, 6, False, pre_vote=True),
    AppendEntries(0, 3, 0, 0, (), 0),
    AppendEntries(
        1,
        4,
        10,
        3,
        (LogEntry(4, 11, b""), LogEntry(4, 12, b'{"type":"X"}'), LogEntry(4, 13, b"\0")),
        9,
    ),
    AppendEntriesResponse(2, 4, True, 13, 10),
    AppendEntriesResponse(2, 4, False, 0, 10, conflict_index=7, conflict_term=2),
    InstallSnapshot(0, 9, 1000, 8, b"\x00\xffsnapshot"),
    InstallSnapshot(0, 9, 0, 0, b""),
    InstallSnapshotResponse(1, 9, 1000),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(message: Message) -> None:
    pb = to_pb(message)
    wire = pb.SerializeToString()
    back = from_pb(type(pb).FromString(wire))
    assert back == message
    assert type(back) is type(message)


def test_commands_come_back_as_bytes() -> None:
    m = AppendEntries(0, 1, 0, 0, (LogEntry(1, 1, b"abc"),), 0)
    back = from_pb(to_pb(m))
    assert isinstance(back, AppendEntries)
    assert type(back.entries[0].command) is bytes
    assert isinstance(back.entries, tuple)
