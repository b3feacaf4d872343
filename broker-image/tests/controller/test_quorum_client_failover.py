"""QuorumClient against a voter that accepts calls but never answers (a SIGSTOPped process).

Seen in e2e: a broker's heartbeats kept going to the stopped old controller (the lowest voter id,
tried first whenever no leader was known), each one using the whole 2 s deadline, so the new
controller fenced a healthy broker for as long as the old one stayed stopped.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest

from strom.controller.quorum_client import QuorumClient
from strom.protocol.v1 import quorum_pb2
from strom.testing import free_port
from strom.transport.v1 import quorum_pb2_grpc


class _Voter(quorum_pb2_grpc.QuorumServicer):
    def __init__(self, answers: bool) -> None:
        self.answers = answers
        self.calls = 0
        self.offsets: list[int] = []

    async def BrokerHeartbeat(self, request: quorum_pb2.BrokerHeartbeatRequest,
                              context: grpc.aio.ServicerContext[Any, Any]
                              ) -> quorum_pb2.BrokerHeartbeatResponse:
        self.calls += 1
        self.offsets.append(request.metadata_offset)
        if not self.answers:
            await asyncio.sleep(60)  # stopped: the connection is there, the answer never comes
        return quorum_pb2.BrokerHeartbeatResponse(fenced=False)


@pytest.fixture
async def voters() -> Any:
    servers, addresses, servicers = [], {}, {}
    for node, answers in ((0, False), (1, True)):
        server = grpc.aio.server()
        servicers[node] = _Voter(answers)
        quorum_pb2_grpc.add_QuorumServicer_to_server(  # type: ignore[no-untyped-call]
            servicers[node], server)
        port = free_port()
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        servers.append(server)
        addresses[node] = f"127.0.0.1:{port}"
    yield addresses, servicers
    for server in servers:
        await server.stop(0)


async def test_a_silent_voter_does_not_use_up_the_deadline(voters: Any) -> None:
    addresses, servicers = voters
    client = QuorumClient(addresses, backoff_s=0.01)
    try:
        started = time.monotonic()
        reply = await client.heartbeat(7, "inc", 3, 10, timeout_s=2.0)
        assert not reply.fenced
        assert time.monotonic() - started < 1.8
        assert client.leader == 1
        # and the next call, with no leader known again, does not start at the silent voter
        client.leader = None
        started = time.monotonic()
        await client.heartbeat(7, "inc", 3, 11, timeout_s=2.0)
        assert time.monotonic() - started < 0.5
        assert servicers[0].calls == 1
    finally:
        await client.close()


async def test_prefer_goes_straight_to_the_known_leader(voters: Any) -> None:
    addresses, servicers = voters
    client = QuorumClient(addresses, backoff_s=0.01)
    try:
        client.prefer(1)
        started = time.monotonic()
        await client.heartbeat(7, "inc", 3, 10, timeout_s=2.0)
        assert time.monotonic() - started < 0.5
        assert servicers[0].calls == 0
        client.prefer(None)  # unknown: keeps what it had
        client.prefer(9)  # not a voter: ignored
        assert client.leader == 1
    finally:
        await client.close()


async def test_a_broker_that_published_nothing_yet_heart_beats(voters: Any) -> None:
    """A restarted broker's publisher reports offset -1 until its first publish; the heartbeat
    raised ValueError ('Value out of range: -1', the field is unsigned) and the supervised task
    restarted, so no heartbeat went out while a 10,000-partition publish ran."""
    addresses, servicers = voters
    client = QuorumClient(addresses, backoff_s=0.01)
    try:
        client.prefer(1)
        reply = await client.heartbeat(7, "inc", 3, -1, timeout_s=2.0)
        assert not reply.fenced
        assert servicers[1].offsets == [0]
    finally:
        await client.close()
