"""Conversions between the Raft messages (``strom.controller.messages``) and their protobufs.

Why it exists: the Raft state machine speaks plain dataclasses and the ``Quorum`` gRPC service
speaks protobuf; keeping the mapping in one pure module (no I/O) lets it be tested by round trip
and keeps the servicer and the transport thin. Each message maps field for field.
"""

from __future__ import annotations

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
from strom.protocol.v1 import quorum_pb2

__all__ = ["PbMessage", "from_pb", "to_pb"]

PbMessage = (
    quorum_pb2.VoteRequest
    | quorum_pb2.VoteResponse
    | quorum_pb2.AppendEntriesRequest
    | quorum_pb2.AppendEntriesResponse
    | quorum_pb2.InstallSnapshotRequest
    | quorum_pb2.InstallSnapshotResponse
)


def to_pb(m: Message) -> PbMessage:
    """The protobuf message for a Raft message."""
    if isinstance(m, VoteRequest):
        return quorum_pb2.VoteRequest(
            sender=m.sender,
            term=m.term,
            last_log_index=m.last_log_index,
            last_log_term=m.last_log_term,
            pre_vote=m.pre_vote,
        )
    if isinstance(m, VoteResponse):
        return quorum_pb2.VoteResponse(
            sender=m.sender, term=m.term, granted=m.granted, pre_vote=m.pre_vote
        )
    if isinstance(m, AppendEntries):
        return quorum_pb2.AppendEntriesRequest(
            sender=m.sender,
            term=m.term,
            prev_log_index=m.prev_log_index,
            prev_log_term=m.prev_log_term,
            entries=[
                quorum_pb2.RaftLogEntry(term=e.term, index=e.index, command=e.command)
                for e in m.entries
            ],
            leader_commit=m.leader_commit,
        )
    if isinstance(m, AppendEntriesResponse):
        return quorum_pb2.AppendEntriesResponse(
            sender=m.sender,
            term=m.term,
            success=m.success,
            match_index=m.match_index,
            prev_log_index=m.prev_log_index,
            conflict_index=m.conflict_index,
            conflict_term=m.conflict_term,
        )
    if isinstance(m, InstallSnapshot):
        return quorum_pb2.InstallSnapshotRequest(
            sender=m.sender,
            term=m.term,
            last_included_index=m.last_included_index,
            last_included_term=m.last_included_term,
            data=m.data,
        )
    return quorum_pb2.InstallSnapshotResponse(
        sender=m.sender, term=m.term, match_index=m.match_index
    )


def from_pb(p: PbMessage) -> Message:
    """The Raft message for a protobuf message."""
    if isinstance(p, quorum_pb2.VoteRequest):
        return VoteRequest(p.sender, p.term, p.last_log_index, p.last_log_term, p.pre_vote)
    if isinstance(p, quorum_pb2.VoteResponse):
        return VoteResponse(p.sender, p.term, p.granted, p.pre_vote)
    if isinstance(p, quorum_pb2.AppendEntriesRequest):
        return AppendEntries(
            p.sender,
            p.term,
            p.prev_log_index,
            p.prev_log_term,
            tuple(LogEntry(e.term, e.index, bytes(e.command)) for e in p.entries),
            p.leader_commit,
        )
    if isinstance(p, quorum_pb2.AppendEntriesResponse):
        return AppendEntriesResponse(
            p.sender,
            p.term,
            p.success,
            p.match_index,
            p.prev_log_index,
            p.conflict_index,
            p.conflict_term,
        )
    if isinstance(p, quorum_pb2.InstallSnapshotRequest):
        return InstallSnapshot(
            p.sender, p.term, p.last_included_index, p.last_included_term, bytes(p.data)
        )
    return InstallSnapshotResponse(p.sender, p.term, p.match_index)
