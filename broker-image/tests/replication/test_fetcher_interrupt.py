"""A partition added during a long-poll interrupts it: the fetcher asks again at once, without
counting a failure or backing off (it used to read the result of the call it had just asked to
cancel, fail with InvalidStateError and back off)."""

from __future__ import annotations

import asyncio
import time
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


async def test_adding_a_partition_interrupts_the_long_poll_without_a_failure() -> None:
    requests: list[tuple[float, list[str]]] = []

    async def long_poll(request: replica_pb2.ReplicaFetchRequest,
                        context: grpc.aio.ServicerContext[Any, Any]
                        ) -> replica_fetch.Response:
        requests.append((time.monotonic(), [p.topic for p in request.partitions]))
        await asyncio.sleep(request.max_wait_ms / 1000)
        return replica_pb2.ReplicaFetchResponse(), [(replica_pb2.ReplicaFetchPartitionResponse(
            topic=p.topic, partition=p.partition, high_watermark=0, log_start_offset=0,
            log_end_offset=0, diverging_epoch=-1, diverging_end_offset=-1), b"")
            for p in request.partitions]

    server = grpc.aio.server()
    replica_rpc.add_to_server(server, SimpleNamespace(ReplicaFetch=long_poll))
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    settings = ReplicationSettings(broker_id=1, fetch_wait_max_ms=5_000, fetch_backoff_ms=2_000,
                                   fetch_backoff_max_ms=2_000)
    fetcher = ReplicaFetcher(0, settings, _Target(), lambda _: f"127.0.0.1:{port}")
    try:
        fetcher.add(("a", 0), 0)
        fetcher.start()
        deadline = time.monotonic() + 10
        while not requests and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        added = time.monotonic()
        fetcher.add(("b", 0), 0)
        while len(requests) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert len(requests) >= 2, requests
        second_at, topics = requests[1]
        assert sorted(topics) == ["a", "b"]
        assert second_at - added < 1.0  # not the 5 s long-poll, not the 2 s backoff
        assert fetcher.failures == 0
    finally:
        await fetcher.stop()
        await server.stop(0)
