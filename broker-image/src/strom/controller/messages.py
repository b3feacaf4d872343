"""The messages Raft peers exchange, as plain frozen dataclasses.

They carry only ints, bools, bytes and tuples of ``LogEntry`` so the gRPC layer can map each one
field for field onto a protobuf message of the ``Quorum`` service. Every message names its sender
(``sender``) and the sender's term; the recipient is the ``to`` of the ``Send`` action carrying it.

``VoteRequest`` doubles as the pre-vote request (``pre_vote=True``): a pre-vote asks "would you vote
for me at ``term``?" without anyone changing term, so a node cut off from the quorum cannot force an
election when it comes back (Raft thesis §9.6).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One entry of the replicated log. An empty ``command`` is the leader's no-op entry."""

    term: int
    index: int
    command: bytes


@dataclass(frozen=True, slots=True)
class VoteRequest:
    sender: int
    term: int
    """The candidate's term; for a pre-vote, the term it would campaign in (its term + 1)."""
    last_log_index: int
    last_log_term: int
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    sender: int
    term: int
    """For a granted pre-vote, the term asked about; otherwise the voter's own term."""
    granted: bool
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class AppendEntries:
    sender: int
    term: int
    prev_log_index: int
    prev_log_term: int
    entries: tuple[LogEntry, ...]
    leader_commit: int


@dataclass(frozen=True, slots=True)
class AppendEntriesResponse:
    sender: int
    term: int
    success: bool
    match_index: int
    """On success, the index of the last entry known to match the leader's log."""
    prev_log_index: int
    """Echo of the request's ``prev_log_index``, so the leader can ignore stale rejections."""
    conflict_index: int = 0
    """On failure: where the leader should retry (fast backtracking, Raft §5.3)."""
    conflict_term: int = 0
    """On failure: the term of the follower's conflicting entry, 0 if its log is just too short."""


@dataclass(frozen=True, slots=True)
class InstallSnapshot:
    """The whole state machine snapshot in one message (metadata snapshots are small)."""

    sender: int
    term: int
    last_included_index: int
    last_included_term: int
    data: bytes


@dataclass(frozen=True, slots=True)
class InstallSnapshotResponse:
    sender: int
    term: int
    match_index: int


Message = (
    VoteRequest
    | VoteResponse
    | AppendEntries
    | AppendEntriesResponse
    | InstallSnapshot
    | InstallSnapshotResponse
)
