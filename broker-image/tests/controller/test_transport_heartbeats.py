"""A window of Raft heartbeats in flight per peer (``GrpcTransport``): a slow follower is not
sent more heartbeats than it answers.

A ``grpc.aio`` server accepts its calls one after another, each needing a turn of its event
loop; at 10,000 partitions a follower's loop turned too slowly for the leader's ten heartbeats
a second, the backlog grew until every Raft call passed its deadline, and the leader lost its
quorum. Heartbeats sent while the window is full are held (the newest replaces the older) and
go when a call in flight ends; AppendEntries that carry entries are never held."""

from __future__ import annotations

import asyncio
from typing import Any

from strom.controller.codec import to_pb
from strom.controller.messages import AppendEntries, AppendEntriesResponse, LogEntry, Message
from strom.controller.transport import GrpcTransport

from .quorum_fakes import serve_appends

SLOW_S = 1.0
WINDOW = 2


async def _with_slow_follower(
    sends: list[AppendEntries], wait_for: int,
) -> tuple[list[tuple[int, int]], list[Message]]:
    """Send ``sends`` 20 ms apart to a follower that answers each call after ``SLOW_S``; wait
    (bounded) until ``wait_for`` replies came, then return what the follower received
    ((leader_commit, entry count) per call, in order of arrival) and the replies."""
    received: list[tuple[int, int]] = []

    async def slow_append(request: Any, context: Any) -> Any:
        received.append((request.leader_commit, len(request.entries)))
        await asyncio.sleep(SLOW_S)  # a follower whose loop is busy
        return to_pb(AppendEntriesResponse(1, request.term, True, 0, request.prev_log_index))

    server, address = await serve_appends(slow_append)
    replies: list[Message] = []
    transport = GrpcTransport({1: address}, timeout_s=10.0, max_heartbeats_in_flight=WINDOW)
    try:
        for message in sends:
            transport.send(1, message, replies.append)
            await asyncio.sleep(0.02)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while len(replies) < wait_for and loop.time() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # anything sent after the last awaited reply arrives too
    finally:
        await transport.close()
        await server.stop(None)
    return received, replies


def _heartbeat(commit: int) -> AppendEntries:
    return AppendEntries(0, 1, 0, 0, (), commit)


async def test_heartbeats_wait_for_the_window_and_the_newest_goes() -> None:
    received, replies = await _with_slow_follower([_heartbeat(c) for c in range(1, 11)], 3)
    # The first two go at once; the eight sent while they are in flight are held, the newest
    # replacing the older, and the newest goes when one is answered (a loop slowed by the
    # machine could let one more through in between; never all ten).
    assert received[:2] == [(1, 0), (2, 0)] and received[-1] == (10, 0)
    assert len(received) <= 4
    assert len(replies) == len(received)


async def test_entries_are_never_held() -> None:
    sends = [_heartbeat(0), _heartbeat(1), AppendEntries(0, 1, 0, 0, (LogEntry(1, 1, b"x"),), 1),
             _heartbeat(2), AppendEntries(0, 1, 1, 1, (LogEntry(1, 2, b"y"),), 2), _heartbeat(3)]
    received, _ = await _with_slow_follower(sends, 5)
    assert sorted(received) == [(0, 0), (1, 0), (1, 1), (2, 1), (3, 0)]
