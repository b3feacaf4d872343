"""A Raft reply that comes later than 1 s still reaches the node (``request_timeout_s``).

A gRPC deadline cancels the call on both sides, so a reply slower than it is lost for good;
at 10,000 partitions a busy broker's event loop made Raft round trips longer than the 1 s the
transport allowed, and every vote and acknowledgement was lost while it stayed busy."""

from __future__ import annotations

import asyncio
from typing import Any

from strom.controller.codec import to_pb
from strom.controller.messages import AppendEntries, AppendEntriesResponse, Message
from strom.controller.transport import GrpcTransport, request_timeout_s

from .quorum_fakes import serve_appends

SLOW_S = 1.3


async def _slow_append(request: Any, context: Any) -> Any:
    await asyncio.sleep(SLOW_S)  # a peer whose loop is busy for 1.3 s
    return to_pb(AppendEntriesResponse(1, request.term, True, 0, request.prev_log_index))


async def _replies_within(timeout_s: float, address: str) -> list[Message]:
    got: list[Message] = []
    transport = GrpcTransport({1: address}, timeout_s=timeout_s)
    try:
        transport.send(1, AppendEntries(0, 1, 0, 0, (), 0), got.append)
        await asyncio.sleep(SLOW_S + 0.7)
    finally:
        await transport.close()
    return got


async def test_a_reply_slower_than_a_second_arrives() -> None:
    server, address = await serve_appends(_slow_append)
    try:
        assert request_timeout_s(1000) == 2.0
        late = await _replies_within(request_timeout_s(1000), address)
        assert [type(m) for m in late] == [AppendEntriesResponse]
        lost = await _replies_within(1.0, address)  # the deadline every call had before
        assert lost == []
    finally:
        await server.stop(None)
