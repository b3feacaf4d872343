"""Talking to a controller quorum from outside it: propose commands, heartbeat, read the image.

Why it exists: brokers (registration, heartbeat consequences), the admin path and tools must reach
whichever voter currently leads without knowing which one it is. ``QuorumClient`` remembers the
leader it last learned of, follows NOT_CONTROLLER hints, and retries retriable failures (no leader
yet, a voter down, a proposal that timed out) with a short backoff until its deadline.

A retried proposal may have committed the first time (a timeout does not say it did not): callers
propose commands that the image rejects when repeated (CreateTopic of an existing name) or that
are harmless to repeat (RegisterBroker with the same incarnation).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from strom.controller.metadata import MetadataImage
from strom.controller.transport import CHANNEL_OPTIONS
from strom.protocol.errors import ErrorCode, Handling, StromError, codes_with, error_code_from_int
from strom.protocol.v1 import quorum_pb2
from strom.transport.v1 import quorum_pb2_grpc

__all__ = ["QuorumClient"]

#: Answers that send the call to the hinted leader or the next voter (the error table's class).
_RETRY = codes_with(Handling.FIND_CONTROLLER)


class QuorumClient:
    """An asyncio client of the ``Quorum`` service of the given voters (``id -> host:port``)."""

    def __init__(self, voters: dict[int, str], *, backoff_s: float = 0.1) -> None:
        if not voters:
            raise ValueError("no controller voters given")
        self._voters = dict(voters)
        self._backoff_s = backoff_s
        self._channels: dict[int, grpc.aio.Channel] = {}
        self._stubs: dict[int, Any] = {}
        self.leader: int | None = None
        """The leader this client last learned of."""
        self._cursor = min(self._voters)
        """Where to start when no leader is known: the voter after the last one that failed,
        so an unreachable voter is not asked first again and again."""

    def prefer(self, leader: int | None) -> None:
        """Use ``leader`` (e.g. the Raft leader this broker's own quorum member follows) for the
        next call: fresher than what the client last learned from a reply."""
        if leader is not None and leader in self._voters:
            self.leader = leader

    def _stub(self, node: int) -> Any:
        stub = self._stubs.get(node)
        if stub is None:
            channel = grpc.aio.insecure_channel(self._voters[node], options=CHANNEL_OPTIONS)
            self._channels[node] = channel
            stub = self._stubs[node] = quorum_pb2_grpc.QuorumStub(channel)  # type: ignore[no-untyped-call]
        return stub

    def _next(self, after: int) -> int:
        ids = sorted(self._voters)
        return ids[(ids.index(after) + 1) % len(ids)]

    async def propose(self, command: bytes, timeout_s: float = 15.0) -> int:
        """The index ``command`` committed at; raises the image's error (e.g.
        TOPIC_ALREADY_EXISTS) or, past the deadline, the last retriable error."""
        r = await self._leader_call(
            lambda stub, left: stub.Propose(
                quorum_pb2.ProposeRequest(command=command), timeout=left
            ),
            timeout_s,
        )
        return int(r.index)

    async def heartbeat(
        self,
        broker_id: int,
        incarnation_id: str,
        broker_epoch: int,
        metadata_offset: int,
        want_shutdown: bool = False,
        timeout_s: float = 5.0,
        attempt_s: float | None = None,
    ) -> quorum_pb2.BrokerHeartbeatResponse:
        """Send a broker heartbeat to the active controller (following leader hints); the
        answer says whether the broker is fenced and, when it wants to shut down, whether it
        may. Raises STALE_BROKER_EPOCH (register again) or, past the deadline, the last
        retriable error; a returned response never carries an error. ``attempt_s`` bounds
        one try (half the deadline when not given)."""
        request = quorum_pb2.BrokerHeartbeatRequest(
            broker_id=broker_id,
            incarnation_id=incarnation_id,
            broker_epoch=broker_epoch,
            # -1 until the broker's publisher has published anything (a restart publishing
            # 10,000 partitions outlasts its first heartbeats); the field is unsigned and the
            # metadata log's first offset is 1, so 0 says "nothing applied" and unfences no one
            metadata_offset=max(metadata_offset, 0),
            want_shutdown=want_shutdown,
        )
        reply: quorum_pb2.BrokerHeartbeatResponse = await self._leader_call(
            lambda stub, left: stub.BrokerHeartbeat(request, timeout=left), timeout_s,
            attempt_s=max(timeout_s / 2, 0.1) if attempt_s is None else attempt_s,
        )
        return reply

    async def _leader_call(
        self, call: Callable[[Any, float], Awaitable[Any]], timeout_s: float,
        attempt_s: float | None = None,
    ) -> Any:
        """``call(stub, seconds_left)`` on the leader: follows NOT_CONTROLLER hints, tries the
        next voter when one is unreachable or the answer's code is in ``Handling.FIND_CONTROLLER``
        (any other code is the caller's), until the deadline.
        ``attempt_s`` bounds one attempt, so a voter that accepts connections but does not answer
        (a stopped process) does not use up the whole deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        target = self.leader if self.leader is not None else self._cursor
        last = StromError(ErrorCode.NOT_CONTROLLER, "no controller answered")
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise last
            try:
                r = await call(self._stub(target), left if attempt_s is None
                               else min(left, attempt_s))
            except grpc.aio.AioRpcError as exc:
                last = StromError(
                    ErrorCode.NETWORK_EXCEPTION, f"controller {target} unreachable: {exc.code()}"
                )
                self.leader = None
                target = self._cursor = self._next(target)
                await asyncio.sleep(self._backoff_s)
                continue
            if not r.HasField("error"):
                self.leader = target
                return r
            last = StromError(error_code_from_int(r.error.code), r.error.message)
            if last.code not in _RETRY:
                raise last
            if r.leader_hint in self._voters and r.leader_hint != target:
                target = self.leader = r.leader_hint
            else:
                self.leader = None
                target = self._cursor = self._next(target)
                await asyncio.sleep(self._backoff_s)

    async def describe_quorum(
        self, node: int, timeout_s: float = 5.0
    ) -> quorum_pb2.DescribeQuorumResponse:
        """``node``'s view of the quorum."""
        reply: quorum_pb2.DescribeQuorumResponse = await self._stub(node).DescribeQuorum(
            quorum_pb2.DescribeQuorumRequest(), timeout=timeout_s
        )
        return reply

    async def describe_metadata(self, node: int, timeout_s: float = 5.0) -> MetadataImage:
        """The metadata image ``node`` has applied."""
        reply = await self._stub(node).DescribeMetadata(
            quorum_pb2.DescribeMetadataRequest(), timeout=timeout_s
        )
        return MetadataImage.from_snapshot(bytes(reply.image))

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close(None)
        self._channels.clear()
        self._stubs.clear()

    async def __aenter__(self) -> QuorumClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
