"""gRPC channels to brokers, and the metadata refresh that tells the client which broker is which.

One ``grpc.aio`` channel per broker address (HTTP/2 multiplexes the in-flight requests on it), made
on first use and kept for the client's life. ``refresh_metadata`` is single-flight: concurrent
callers share one Metadata call, tried against known brokers first and then the bootstrap list,
and its answer goes into the pure ``ClusterMetadata`` cache.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterable

import grpc
import grpc.aio

from strom.client.bootstrap import BootstrapTracker
from strom.client.metadata import ClusterMetadata
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import broker_pb2
from strom.transport.status import from_rpc_error
from strom.transport.v1 import admin_pb2_grpc, broker_pb2_grpc

log = logging.getLogger(__name__)

CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.enable_retries", 0),
    # Kafka's reconnect.backoff.ms / reconnect.backoff.max.ms (50 ms doubling to 1 s). gRPC's
    # defaults (1 s growing to 120 s) would keep a channel to a restarted broker failing
    # calls for up to two minutes, and make a refused bootstrap address look refused for a
    # whole second at a time.
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


_DETAILS_KEY = "grpc-status-details-bin"
#: How long a metadata refresh waits for one broker before also asking the next.
HEDGE_S = 0.25


def rpc_error(exc: grpc.RpcError) -> StromError:
    """A failed call (sync or ``grpc.aio``) as a StromError with the broker's Kafka code."""
    return from_rpc_error(exc)


def now_ms() -> float:
    return time.monotonic() * 1000.0


class Connections:
    """Channels and stubs per broker address, plus the metadata cache they route by."""

    def __init__(self, bootstrap: list[tuple[str, int]], metadata: ClusterMetadata,
                 request_timeout_ms: int) -> None:
        self.bootstrap = [f"{h}:{p}" for h, p in bootstrap]
        self.metadata = metadata
        self.request_timeout_s = request_timeout_ms / 1000.0
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._broker_stubs: dict[str, broker_pb2_grpc.BrokerStub] = {}
        self._admin_stubs: dict[str, admin_pb2_grpc.AdminStub] = {}
        self._refresh: asyncio.Future[None] | None = None
        self._rr = itertools.count()
        self.topics: set[str] = set()  # topics this client routes for (the Metadata request)
        self.bootstrap_tracker = BootstrapTracker(self.bootstrap)
        self.closed = False

    def channel(self, address: str) -> grpc.aio.Channel:
        ch = self._channels.get(address)
        if ch is None:
            if self.closed:
                raise StromError(ErrorCode.NETWORK_EXCEPTION, "client is closed")
            ch = self._channels[address] = grpc.aio.insecure_channel(address,
                                                                      options=CHANNEL_OPTIONS)
        return ch

    def broker_stub_at(self, address: str) -> broker_pb2_grpc.BrokerStub:
        stub = self._broker_stubs.get(address)
        if stub is None:
            stub = self._broker_stubs[address] = broker_pb2_grpc.BrokerStub(  # type: ignore[no-untyped-call]
                self.channel(address))
        return stub

    def admin_stub_at(self, address: str) -> admin_pb2_grpc.AdminStub:
        stub = self._admin_stubs.get(address)
        if stub is None:
            stub = self._admin_stubs[address] = admin_pb2_grpc.AdminStub(  # type: ignore[no-untyped-call]
                self.channel(address))
        return stub

    def broker_stub(self, broker_id: int) -> broker_pb2_grpc.BrokerStub:
        address = self.metadata.broker_address(broker_id)
        if address is None:
            raise StromError(ErrorCode.LEADER_NOT_AVAILABLE,
                             f"broker {broker_id} is not in the cluster metadata")
        return self.broker_stub_at(address)

    def addresses(self) -> list[str]:
        """Known broker addresses then bootstrap ones, rotated so failures spread the load."""
        known = [b.address for b in self.metadata.brokers.values()]
        out = list(dict.fromkeys([*known, *self.bootstrap]))
        if out:
            k = next(self._rr) % len(out)
            out = out[k:] + out[:k]
        return out

    # --- metadata ------------------------------------------------------------------------
    def add_topics(self, topics: Iterable[str]) -> bool:
        """Route for these topics too; True if any was new."""
        before = len(self.topics)
        self.topics.update(topics)
        return len(self.topics) != before

    async def refresh_metadata(self) -> None:
        """Fetch metadata for ``topics`` (single-flight); raises if no broker answers."""
        if self._refresh is not None and not self._refresh.done():
            await asyncio.shield(self._refresh)
            return
        loop = asyncio.get_running_loop()
        self._refresh = fut = loop.create_future()
        try:
            await self._do_refresh()
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: the waiters re-raise it
            raise
        else:
            fut.set_result(None)

    async def _do_refresh(self) -> None:
        """Ask one broker; if it has not answered within ``HEDGE_S``, ask the next one too
        (and so on), and take the first answer. A hung or cut-off broker keeps a connection
        open and answers nothing, so asking brokers strictly one after the other would wait
        out the whole request timeout on it."""
        topics = sorted(self.topics)
        request = broker_pb2.MetadataRequest(topics=topics)
        last: StromError | None = None
        waiting: dict[asyncio.Task[broker_pb2.MetadataResponse], str] = {}
        addresses = self.addresses()
        try:
            while addresses or waiting:
                if addresses:
                    address = addresses.pop(0)
                    call = self.broker_stub_at(address).Metadata(
                        request, timeout=self.request_timeout_s)
                    waiting[asyncio.ensure_future(call)] = address
                done, _ = await asyncio.wait(waiting, timeout=HEDGE_S if addresses else None,
                                             return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    address = waiting.pop(task)
                    exc = task.exception()
                    if isinstance(exc, grpc.RpcError):
                        last = rpc_error(exc)
                        self.bootstrap_tracker.failed(address, exc, now_ms())
                        continue
                    if exc is not None:
                        raise exc
                    self.bootstrap_tracker.succeeded()
                    self.metadata.update(task.result(), now_ms(), requested=topics or None)
                    return
        finally:
            for task in waiting:
                task.cancel()
        raise (self.bootstrap_tracker.give_up(now_ms()) or last
               or StromError(ErrorCode.NETWORK_EXCEPTION, "no broker address to ask"))

    async def close(self) -> None:
        self.closed = True
        channels = list(self._channels.values())
        self._channels.clear()
        self._broker_stubs.clear()
        self._admin_stubs.clear()
        for ch in channels:
            await ch.close(None)


class MetadataRefresher:
    """At most one background metadata refresh at a time, and at most one per backoff period.

    The producer's sender and the consumer's fetcher both refresh when a partition has no known
    leader or a broker says NOT_LEADER_OR_FOLLOWER; without the throttle, a burst of such errors
    would send a Metadata call per error.
    """

    def __init__(self, conns: Connections, backoff_ms: int, on_done: Callable[[], None]) -> None:
        self._conns = conns
        self._backoff_ms = max(backoff_ms, 10)
        self._on_done = on_done
        self._next_ms = 0.0
        self.task: asyncio.Task[None] | None = None

    def request(self, loop: asyncio.AbstractEventLoop, now_ms: float) -> None:
        if self.task is not None and not self.task.done():
            return
        if now_ms < self._next_ms:
            return
        self._next_ms = now_ms + self._backoff_ms
        self.task = loop.create_task(self._refresh())

    async def _refresh(self) -> None:
        try:
            await self._conns.refresh_metadata()
        except StromError as exc:
            log.debug("metadata refresh failed: %s", exc)
        finally:
            self._on_done()

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()

