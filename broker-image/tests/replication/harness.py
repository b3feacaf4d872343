"""Several ReplicaManagers in one event loop over real gRPC servers on 127.0.0.1.

A fake controller (:class:`Cluster`) holds each partition's view; ``alter_isr`` checks the
partition epoch, bumps it and applies the new view on every running broker hosting it, as the
metadata publisher would. "Stopping" a broker stops its manager and gRPC server but keeps its
logs open (a crash without data loss); "starting" it again builds a new manager on those logs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from strom.protocol import replica_fetch
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import replica_pb2
from strom.replication.manager import ReplicaManager
from strom.replication.settings import ReplicationSettings
from strom.replication.state import PartitionView
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.storage.manager import LogManager
from strom.testing import free_port
from strom.transport import replica_rpc
from strom.transport.status import to_grpc_status

FAST = {"replica_lag_time_max_ms": 600, "fetch_wait_max_ms": 100, "isr_check_interval_ms": 100,
        "fetch_backoff_ms": 20, "fetch_backoff_max_ms": 200}


class _Servicer:
    def __init__(self, manager: ReplicaManager) -> None:
        self.manager = manager

    async def ReplicaFetch(self, request: replica_pb2.ReplicaFetchRequest,
                           context: grpc.aio.ServicerContext[Any, Any]
                           ) -> replica_fetch.Response:
        try:
            return await self.manager.replica_fetch(request)
        except StromError as err:
            status = to_grpc_status(err)
            await context.abort(status.code, status.details, status.trailing_metadata)
            raise


@dataclasses.dataclass
class Node:
    broker_id: int
    logs: LogManager
    port: int
    settings: ReplicationSettings
    manager: ReplicaManager | None = None
    server: grpc.aio.Server | None = None

    @property
    def running(self) -> bool:
        return self.manager is not None

    @property
    def m(self) -> ReplicaManager:
        assert self.manager is not None, f"broker {self.broker_id} is stopped"
        return self.manager

    def log(self, topic: str = "t", partition: int = 0) -> PartitionLog:
        plog = self.logs.get(topic, partition)
        assert plog is not None
        return plog


class Cluster:
    def __init__(self, root: Path, ids: tuple[int, ...], **settings: Any) -> None:
        self.views: dict[tuple[str, int], PartitionView] = {}
        self.configs: dict[tuple[str, int], LogConfig] = {}
        self.alter_calls = 0
        self.nodes: dict[int, Node] = {}
        merged = {**FAST, **settings}
        for i in ids:
            self.nodes[i] = Node(i, LogManager([root / f"b{i}"], LogConfig()), free_port(),
                                 ReplicationSettings(broker_id=i, **merged))

    def address(self, broker_id: int) -> str | None:
        node = self.nodes.get(broker_id)
        return f"127.0.0.1:{node.port}" if node is not None and node.running else None

    def alter_isr_for(self, broker_id: int) -> Callable[..., Any]:
        async def alter_isr(topic: str, partition: int, isr: tuple[int, ...],
                            expected_epoch: int) -> None:
            self.alter_calls += 1
            await asyncio.sleep(0.005)  # a round trip to the controller
            view = self.views[(topic, partition)]
            if view.partition_epoch != expected_epoch:
                raise StromError(ErrorCode.INVALID_UPDATE_VERSION, "partition epoch changed")
            if view.leader != broker_id:
                raise StromError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "not the leader")
            self.set_view(dataclasses.replace(view, isr=isr,
                                              partition_epoch=view.partition_epoch + 1))
        return alter_isr

    def set_view(self, view: PartitionView, config: LogConfig | None = None) -> None:
        tp = (view.topic, view.partition)
        self.views[tp] = view
        if config is not None:
            self.configs[tp] = config
        for node in self.nodes.values():
            if node.running and node.broker_id in (*view.replicas, *view.adding):
                node.m.apply_partition(view, self.configs.get(tp, LogConfig()))

    def view(self, topic: str = "t", partition: int = 0) -> PartitionView:
        return self.views[(topic, partition)]

    async def start(self, broker_id: int) -> Node:
        node = self.nodes[broker_id]
        node.manager = ReplicaManager(node.settings, node.logs, self.alter_isr_for(broker_id),
                                      self.address)
        node.server = grpc.aio.server()
        replica_rpc.add_to_server(node.server, _Servicer(node.manager))
        node.server.add_insecure_port(f"127.0.0.1:{node.port}")
        await node.server.start()
        await node.manager.start()
        for tp, view in self.views.items():
            if broker_id in (*view.replicas, *view.adding):
                node.manager.apply_partition(view, self.configs.get(tp, LogConfig()))
        return node

    async def stop(self, broker_id: int) -> None:
        node = self.nodes[broker_id]
        manager, server = node.manager, node.server
        node.manager = node.server = None
        if manager is not None:
            await manager.stop()
        if server is not None:
            await server.stop(0)

    async def close(self) -> None:
        for i in list(self.nodes):
            await self.stop(i)
        for node in self.nodes.values():
            node.logs.close()


async def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0,
                     what: str = "condition") -> float:
    """Poll ``condition`` every 10 ms; returns the seconds it took, fails after ``timeout_s``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.01)
    return time.monotonic() - started


def all_batches(plog: PartitionLog) -> bytes:
    """Every byte of every batch from the log start to the end (one segment per read)."""
    out = bytearray()
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20).records
        assert data, f"no data at {offset}"
        out += data
        from strom.protocol.batch import iter_headers

        offset = [h.next_offset for h in iter_headers(data)][-1]
    return bytes(out)
