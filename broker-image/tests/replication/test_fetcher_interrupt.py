"""A partition added during a long-poll interrupts it: the fetcher asks again at once, without
counting a failure or backing off (it used to read the result of the call it had just asked to
cancel, fail with InvalidStateError and back off). A full fetch is not interrupted (the leader
answers it without waiting; rebuilt after each interruption, it named every partition again
for as long as partitions kept coming)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import grpc

from strom.protocol import replica_fetch
from strom.protocol.v1 import replica_pb2
from strom.replication.fetcher import FetchPosition, ReplicaFetcher
from strom.replication.settings import ReplicationSettings
from strom.testing import free_port
from strom.transport import replica_rpc


class _Target:
    def __init__(self) -> None:
        self.answers: list[tuple[str, int]] = []

    def fetch_position(self, tp: tuple[str, int]) -> FetchPosition | None:
        return FetchPosition(0, -1, 0)

    def on_fetched(self, tp: tuple[str, int], leader: int, leader_epoch: int, fetch_offset: int,
                   answer: replica_pb2.ReplicaFetchPartitionResponse, records: memoryview
                   ) -> float:
        self.answers.append(tp)
        return 0.0


_Requests = list[tuple[float, int, list[str]]]
"""(when, session epoch, topics named) of each request the fake leader got."""


async def _fake_leader(requests: _Requests, full_wait_s: float | None = None
                       ) -> tuple[grpc.aio.Server, int]:
    """A leader that keeps session 7: a full fetch is answered at once (or after
    ``full_wait_s``), an incremental one at the end of its long-poll."""

    async def long_poll(request: replica_pb2.ReplicaFetchRequest,
                        context: grpc.aio.ServicerContext[Any, Any]
                        ) -> replica_fetch.Response:
        requests.append((time.monotonic(), request.session_epoch,
                         [p.topic for p in request.partitions]))
        full = request.session_epoch == 0
        await asyncio.sleep((full_wait_s or 0.0) if full else request.max_wait_ms / 1000)
        return replica_pb2.ReplicaFetchResponse(session_id=7), [(
            replica_pb2.ReplicaFetchPartitionResponse(
                topic=p.topic, partition=p.partition, high_watermark=0, log_start_offset=0,
                log_end_offset=0, diverging_epoch=-1, diverging_end_offset=-1), b"")
            for p in request.partitions]

    server = grpc.aio.server()
    replica_rpc.add_to_server(server, SimpleNamespace(ReplicaFetch=long_poll))
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, port


async def _wait(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def _fetching(requests: _Requests, settings: ReplicationSettings,
                    full_wait_s: float | None = None) -> AsyncIterator[ReplicaFetcher]:
    """A fetcher of partition a from a fake leader (``_fake_leader``), started; both stopped
    after."""
    server, port = await _fake_leader(requests, full_wait_s)
    fetcher = ReplicaFetcher(0, settings, _Target(), lambda _: f"127.0.0.1:{port}")
    try:
        fetcher.add(("a", 0), 0)
        fetcher.start()
        yield fetcher
    finally:
        await fetcher.stop()
        await server.stop(0)


async def test_adding_a_partition_interrupts_the_long_poll_without_a_failure() -> None:
    requests: _Requests = []
    settings = ReplicationSettings(broker_id=1, fetch_wait_max_ms=5_000, fetch_backoff_ms=2_000,
                                   fetch_backoff_max_ms=2_000)
    async with _fetching(requests, settings) as fetcher:
        await _wait(lambda: len(requests) >= 2, "the full fetch and a long-poll")
        assert requests[0][1:] == (0, ["a"]) and requests[1][1] == 1, requests
        added = time.monotonic()
        fetcher.add(("b", 0), 0)
        await _wait(lambda: len(requests) >= 3, "the request after the interruption")
        third_at, epoch, topics = requests[2]
        assert (epoch, topics) == (1, ["b"])  # the interrupted request retried, with b
        assert third_at - added < 1.0  # not the 5 s long-poll, not the 2 s backoff
        assert fetcher.failures == 0


async def test_a_full_fetch_is_not_interrupted() -> None:
    """Partitions added while a full fetch is in flight go into the next request, an
    incremental one; the full fetch is not sent again (on main it was, naming a and b)."""
    requests: _Requests = []
    settings = ReplicationSettings(broker_id=1, fetch_wait_max_ms=5_000)
    async with _fetching(requests, settings, full_wait_s=0.5) as fetcher:
        await _wait(lambda: len(requests) >= 1, "the full fetch")
        fetcher.add(("b", 0), 0)
        await _wait(lambda: len(requests) >= 2, "the request after the full fetch")
        assert [r[1:] for r in requests[:2]] == [(0, ["a"]), (1, ["b"])], requests
        assert fetcher.failures == 0


async def test_the_retry_of_an_interrupted_request_is_not_interrupted() -> None:
    """One interruption per answered request: a partition added while the retry is in flight
    waits for its answer and goes in the request after it. Each interruption is a new call the
    leader's server must accept; at 10,000 new partitions every publishing slice interrupted
    each follower's fetch and the leaders' servers fell behind on every call (Raft included).
    On the code before, c interrupted the retry at once."""
    requests: _Requests = []
    settings = ReplicationSettings(broker_id=1, fetch_wait_max_ms=1_500)
    async with _fetching(requests, settings) as fetcher:
        await _wait(lambda: len(requests) >= 2, "the full fetch and a long-poll")
        fetcher.add(("b", 0), 0)
        await _wait(lambda: len(requests) >= 3, "the retry after the interruption")
        retry_at, _, topics = requests[2]
        assert topics == ["b"]
        fetcher.add(("c", 0), 0)
        await _wait(lambda: len(requests) >= 4, "the request after the retry")
        fourth_at, _, topics = requests[3]
        assert topics == ["c"]
        assert fourth_at - retry_at >= 1.2  # the retry's long-poll ran out (1.5 s)
        assert fetcher.failures == 0
