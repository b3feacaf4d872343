"""Sending Raft messages to peers over gRPC: fire-and-forget calls on per-peer channels.

Why it exists: the Raft state machine emits ``Send(to, message)`` and expects nothing back
synchronously - a reply is just another message that arrives later. This module turns a request
message into one unary ``Quorum`` call on the peer's channel and hands the reply (if any) to a
callback, which feeds it to the driver's inbox. Failures (peer down, deadline, paused process) are
dropped silently: Raft already tolerates lost messages, and the next heartbeat retries.

Calls to one peer run concurrently, so they may complete out of order (Raft tolerates reordering
too); at most ``max_in_flight`` are outstanding per peer, and further sends are dropped, so a
paused peer cannot pile up calls. At most ``max_heartbeats_in_flight`` heartbeats (an
``AppendEntries`` without entries) are outstanding per peer; one sent beyond that waits in a slot
of one (the newest replaces the older: it only proves the leader alive and carries its commit
index) and goes when one in flight ends. Why a window: a ``grpc.aio`` server takes its next call
from gRPC's core only after its loop ran the previous one's acceptance, and a call costs several
loop turns at each end; while a loop turns every 100-300 ms (a broker publishing 10,000 new
partitions) a follower accepted fewer calls a second than the leader's ten heartbeats, the
backlog grew by ~0.65 s a second and 3 s into the creation every Raft call passed its deadline
(the leader lost its quorum, broker heartbeats in the same backlog fenced a broker; issue 21
item 3). A window sends at most ``max_heartbeats_in_flight`` per round trip, so a slow follower
is sent what it can accept, and still hears its leader several times per round trip (one in
flight alone would leave it silent for a whole round trip, longer than an election timeout
under that load). Reply messages themselves (``VoteResponse`` and the other
responses) travel as the return value of the peer's call, never as calls of their own; the
transport drops any it is asked to send.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeGuard

import grpc

from strom.controller.codec import from_pb, to_pb
from strom.controller.messages import (
    AppendEntries,
    InstallSnapshot,
    Message,
    VoteRequest,
)
from strom.protocol.v1 import quorum_pb2
from strom.transport.v1 import quorum_pb2_grpc

__all__ = ["CHANNEL_OPTIONS", "GrpcTransport", "Transport", "request_timeout_s"]

log = logging.getLogger("strom.controller.transport")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024

CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # Reconnect quickly to a restarted peer (the defaults back off up to two minutes).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

OnReply = Callable[[Message], None]

MAX_HEARTBEATS_IN_FLIGHT = 4
"""Heartbeats outstanding per peer: with the 2 s deadline, a follower whose round trips take
that long still hears its leader about every half second (an election timeout is 1-2 s)."""


def _is_heartbeat(message: Message) -> TypeGuard[AppendEntries]:
    """An AppendEntries without entries: what the heartbeat window bounds."""
    return isinstance(message, AppendEntries) and not message.entries


def request_timeout_s(election_timeout_ms: int) -> float:
    """The deadline of one Raft call: twice the election timeout (2 s at the defaults, as
    Kafka's ``quorum.request.timeout.ms``).

    Why not shorter: a reply that comes late is still a good Raft message (Raft tolerates
    delay), and a deadline cancels the call on both sides, so the reply is lost. With 1 s,
    when a busy event loop (a broker publishing 10,000 new partitions) made a round trip
    longer than that, every vote and every acknowledgement was lost: the leader stepped down
    on check-quorum and no election completed for 35-60 s, until publishing ended."""
    return 2 * election_timeout_ms / 1000


class Transport(Protocol):
    def send(self, to: int, message: Message, on_reply: OnReply) -> None:
        """Start delivering ``message`` to ``to``; call ``on_reply`` with its reply, if any."""
        ...

    def update_addresses(self, addresses: Mapping[int, str]) -> None:
        """Add or change the addresses of some nodes (observers join as brokers register)."""
        ...

    async def close(self) -> None: ...


class GrpcTransport:
    """The ``Transport`` over ``grpc.aio``: one channel per peer, created on first use."""

    def __init__(
        self,
        addresses: Mapping[int, str],
        *,
        timeout_s: float = 1.0,
        snapshot_timeout_s: float = 10.0,
        max_in_flight: int = 32,
        max_heartbeats_in_flight: int = MAX_HEARTBEATS_IN_FLIGHT,
        cluster_id: Callable[[], str] = lambda: "",
    ) -> None:
        self._addresses = dict(addresses)
        self._cluster_id = cluster_id
        self._timeout_s = timeout_s
        self._snapshot_timeout_s = snapshot_timeout_s
        self._max_in_flight = max_in_flight
        self._channels: dict[int, grpc.aio.Channel] = {}
        self._stubs: dict[int, Any] = {}
        self._in_flight: dict[int, int] = {}
        self._max_beats = max_heartbeats_in_flight
        self._beats: dict[int, int] = {}
        """Peer -> heartbeats in flight to it."""
        self._held: dict[int, tuple[AppendEntries, OnReply]] = {}
        """Peer -> the newest heartbeat held back while its window is full."""
        self._tasks: set[asyncio.Task[None]] = set()

    def _stub(self, to: int) -> Any:
        stub = self._stubs.get(to)
        if stub is None:
            channel = grpc.aio.insecure_channel(self._addresses[to], options=CHANNEL_OPTIONS)
            self._channels[to] = channel
            stub = self._stubs[to] = quorum_pb2_grpc.QuorumStub(channel)  # type: ignore[no-untyped-call]
        return stub

    def update_addresses(self, addresses: Mapping[int, str]) -> None:
        for node, address in addresses.items():
            if self._addresses.get(node) == address:
                continue
            self._addresses[node] = address
            channel = self._channels.pop(node, None)
            self._stubs.pop(node, None)
            if channel is not None:
                task = asyncio.create_task(channel.close(None))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    def send(self, to: int, message: Message, on_reply: OnReply) -> None:
        if to not in self._addresses:
            log.debug("no address for node %d: dropping %s", to, type(message).__name__)
            return
        if not isinstance(message, VoteRequest | AppendEntries | InstallSnapshot):
            log.debug("dropping a %s not sent as a reply", type(message).__name__)
            return
        if self._in_flight.get(to, 0) >= self._max_in_flight:
            return
        if _is_heartbeat(message):
            if self._beats.get(to, 0) >= self._max_beats:
                self._held[to] = (message, on_reply)
                return
            self._beats[to] = self._beats.get(to, 0) + 1
        self._in_flight[to] = self._in_flight.get(to, 0) + 1
        task = asyncio.create_task(self._call(to, message, on_reply))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call(
        self, to: int, message: VoteRequest | AppendEntries | InstallSnapshot, on_reply: OnReply
    ) -> None:
        try:
            stub = self._stub(to)
            request = to_pb(message)
            if isinstance(request, quorum_pb2.VoteRequest | quorum_pb2.AppendEntriesRequest
                          | quorum_pb2.InstallSnapshotRequest):
                request.cluster_id = self._cluster_id()
            if isinstance(message, VoteRequest):
                reply = await stub.Vote(request, timeout=self._timeout_s)
            elif isinstance(message, AppendEntries):
                reply = await stub.AppendEntries(request, timeout=self._timeout_s)
            else:
                reply = await stub.InstallSnapshot(request, timeout=self._snapshot_timeout_s)
        except grpc.aio.AioRpcError as exc:
            log.debug("%s to node %d failed: %s", type(message).__name__, to, exc.code())
            return
        except Exception as exc:  # e.g. a channel closed under us while stopping
            log.debug("%s to node %d failed: %r", type(message).__name__, to, exc)
            return
        finally:
            self._in_flight[to] -= 1
            if _is_heartbeat(message):
                self._beats[to] -= 1
                held = self._held.pop(to, None)
                if held is not None:
                    self.send(to, *held)
        on_reply(from_pb(reply))

    async def close(self) -> None:
        self._held.clear()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for channel in self._channels.values():
            await channel.close(None)
        self._channels.clear()
        self._stubs.clear()
