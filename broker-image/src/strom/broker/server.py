"""Run one broker: gRPC server, metrics/health HTTP server, log loading, cluster membership.

Start-up order: the health server comes up first (``/healthz`` answers while logs recover, so a
liveness probe does not kill a broker that is busy recovering), then logs are loaded in a worker
thread (the event loop stays responsive), the gRPC server starts (Broker, Admin, Replica and
Quorum services: the Raft member must be reachable before it can register), the broker joins
the cluster (replays its metadata log, registers with its gRPC and Kafka-listener endpoints,
catches up, publishes the partitions it hosts, waits to be unfenced), the Kafka listener (bound
before the core is built, so port 0 registers the real port) starts serving, and ``/readyz``
turns 200. One line announces it: ``strom broker 0 ready on 127.0.0.1:9092 (kafka
PLAINTEXT://127.0.0.1:19092, metrics :9404, controller voter, cluster <id>)``.

Two periodic tasks run on the event loop (logs are owned by the loop's thread): every second
the time-based segment rolls and ``flush.ms`` of the logs whose time has come (an idle log is
not visited: :meth:`~strom.storage.manager.LogManager.run_due_checks`); every
``log.retention.check.interval.ms`` the full maintenance (retention, compaction).

Every long-lived task runs under this server's :class:`~strom.supervision.Supervisor`: a task
that fails for good (the Raft driver or the metadata publisher at once, a restartable task after
repeated failures) turns ``/readyz`` to 503 and stops the broker, which exits with status 1 so
that it is restarted - never a process that looks healthy and is not.

SIGTERM / SIGINT shut down gracefully: ``/readyz`` turns 503, a controlled shutdown asks the
active controller to move this broker's leaderships to in-sync followers (bounded by half of
``shutdown.timeout.ms``), the Kafka listener closes its connections, the gRPC server stops
accepting calls and lets in-flight ones finish, replication and the Raft member stop, every log
is flushed and closed with a clean-shutdown marker, and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable

import grpc

from strom.broker import loop_watch, service
from strom.broker.config import BrokerConfig, ConfigError
from strom.broker.core import BrokerCore
from strom.broker.file_limit import FileLimitError, raise_open_file_limit
from strom.broker.gc_policy import FreezeSurvivors
from strom.broker.health import HealthServer
from strom.broker.kafka.listener import KafkaListener
from strom.broker.listeners import GRPC_LISTENER
from strom.broker.malloc_tuning import tune as tune_malloc
from strom.controller.metadata import Endpoint
from strom.protocol import replica_fetch
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.produce_wire import decode_request as decode_produce_request
from strom.protocol.v1 import admin_pb2, broker_pb2, group_pb2, quorum_pb2, replica_pb2
from strom.request_guard import RequestGuard
from strom.shutdown import cancel_and_wait, stop_on_signals
from strom.storage import fileops
from strom.supervision import FatalError, Supervisor
from strom.transport.services import add_service

log = logging.getLogger("strom.broker")

FAST_MAINTENANCE_S = 1.0


def grpc_options(config: BrokerConfig) -> list[tuple[str, int]]:
    size = config.max_message_size
    return [
        ("grpc.max_send_message_length", size),
        ("grpc.max_receive_message_length", size),
        ("grpc.so_reuseport", 0),  # a second broker on the same port must fail, not share it
        ("grpc.keepalive_time_ms", 60_000),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_ping_strikes", 0),
    ]


class BrokerServer:
    """One broker's servers and tasks. ``await start()``, later ``await stop()``."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.core: BrokerCore | None = None
        self.port = 0
        self.kafka_port = 0
        self.metrics_port = 0
        self._kafka: KafkaListener | None = None
        self.ready = False
        self._grpc: grpc.aio.Server | None = None
        self._health: HealthServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.failure: str | None = None
        """Why the broker stopped itself (a supervised task failed for good), else None."""
        self.stop_event: asyncio.Event | None = None
        self.supervisor = Supervisor(self._fatal)

    def _fatal(self, task: str, exc: BaseException) -> None:
        """A critical task failed: not ready from now on, and stop (the exit is non-zero)."""
        self.ready = False
        what = exc if isinstance(exc, FatalError) else f"{type(exc).__name__}: {exc}"
        self.failure = f"task {task} failed: {what}"
        if self.core is not None:
            self.core.metrics.up.set(0)
        if self.stop_event is not None:
            self.stop_event.set()

    async def start(self) -> None:
        config = self.config
        self.supervisor.install()
        guard = RequestGuard(self._count_malformed)
        self._grpc = grpc.aio.server(options=grpc_options(config), interceptors=[guard])
        address = f"{config.host}:{config.port}"
        try:
            self.port = self._grpc.add_insecure_port(address)
        except RuntimeError as exc:
            raise _bind_error(address, exc) from None
        endpoints = await self._bind_kafka()
        core = self.core = BrokerCore.create(config, port=self.port, listeners=endpoints)
        if config.metrics_port:
            self._health = HealthServer(core.metrics.exposition, lambda: self.ready)
            try:
                await self._health.start(config.host, config.metrics_port)
            except OSError as exc:
                raise ConfigError(f"cannot serve metrics on {config.host}:"
                                  f"{config.metrics_port}: {exc.strerror or exc}") from None
            self.metrics_port = self._health.port
        await asyncio.to_thread(core.load)
        add_service(self._grpc, broker_pb2.DESCRIPTOR.services_by_name["Broker"],
                    service.broker_methods(core),
                    deserializers={"Produce": decode_produce_request})
        add_service(self._grpc, admin_pb2.DESCRIPTOR.services_by_name["Admin"],
                    service.admin_methods(core))
        add_service(self._grpc, replica_pb2.DESCRIPTOR.services_by_name["Replica"],
                    service.replica_methods(core),
                    serializers={"ReplicaFetch": replica_fetch.encode_response})
        add_service(self._grpc, group_pb2.DESCRIPTOR.services_by_name["Group"],
                    service.group_methods(core, core.groups))
        add_service(self._grpc, quorum_pb2.DESCRIPTOR.services_by_name["Quorum"],
                    core.link.service.methods())
        await self._grpc.start()
        await core.start()
        if self._kafka is not None:
            await self._kafka.start(core)
        self._tasks = [
            asyncio.create_task(self._every(FAST_MAINTENANCE_S, self._fast_maintenance)),
            asyncio.create_task(self._every(config.maintenance_interval_s,
                                            core.logs.run_maintenance)),
        ]
        if self.failure is not None:
            raise BrokerFailed(self.failure)
        core.metrics.up.set(1)
        self.ready = True
        metrics = f"metrics :{self.metrics_port}" if self.metrics_port else "metrics off"
        role = "controller voter" if core.link.is_voter else "observer"
        kafka = (f"kafka {self._kafka.name}://{self._kafka.host}:{self.kafka_port}"
                 if self._kafka is not None else "kafka off")
        log.info("strom broker %d ready on %s:%d (%s, %s, %s, cluster %s)", config.broker_id,
                 config.host, self.port, kafka, metrics, role, core.metadata.cluster_id)

    async def _bind_kafka(self) -> tuple[Endpoint, ...]:
        """Bind the Kafka listener's socket (not serving yet); its advertised endpoint."""
        listener = self.config.kafka_listener
        if listener is None:
            return ()
        bind, advertised = listener
        self._kafka = KafkaListener(self.config, bind)
        try:
            self.kafka_port = await self._kafka.bind()
        except OSError as exc:
            self._kafka = None
            raise ConfigError(f"cannot serve the Kafka listener on {bind.host}:{bind.port} "
                              f"(listeners={self.config.get('listeners')}): "
                              f"{exc.strerror or exc}") from None
        return (Endpoint(advertised.name, advertised.host,
                         advertised.port or self.kafka_port),)

    async def stop(self) -> None:
        """Graceful: controlled shutdown, stop accepting, finish in-flight calls, close logs."""
        self.ready = False
        started = time.monotonic()
        core = self.core
        if core is not None:
            core.metrics.up.set(0)
            with contextlib.suppress(Exception):
                await core.leave()
        await cancel_and_wait(self._tasks)
        self._tasks = []
        if core is not None:
            core.replicas.waiters.close()
        if self._kafka is not None:
            await self._kafka.stop()
            self._kafka = None
        if self._grpc is not None:
            await self._grpc.stop(self.config.shutdown_timeout_s)
            self._grpc = None
        if core is not None:
            await core.stop()
        if self._health is not None:
            await self._health.stop()
        log.info("strom broker %d stopped in %.2fs", self.config.broker_id,
                 time.monotonic() - started)

    def _count_malformed(self, method: str) -> None:
        if self.core is not None:
            self.core.metrics.requests.labels(method, ErrorCode.INVALID_REQUEST.name,
                                              GRPC_LISTENER).inc()

    def _fast_maintenance(self) -> None:
        if self.core is not None:
            self.core.logs.run_due_checks()

    async def _every(self, seconds: float, work: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                work()
            except Exception:
                log.exception("periodic maintenance failed")


def _bind_error(address: str, exc: Exception) -> ConfigError:
    return ConfigError(f"cannot listen on {address} (port={address.rsplit(':', 1)[1]}): "
                       f"the address is in use or not local ({exc})")


#: How long a cancelled start may take to end before the broker stops without it.
START_CANCEL_S = 5.0


async def _start_unless_stopped(server: BrokerServer, stop: asyncio.Event) -> None:
    """``server.start()``, abandoned when ``stop`` is set first (a signal, or a supervised task
    that failed for good while starting); raises BrokerFailed in the latter case."""
    starting = asyncio.ensure_future(server.start())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        # Cancelled again until it ends: Python 3.11's wait_for can swallow a cancellation
        # that arrives as the future it awaits completes (CPython gh-86296), and a start that
        # carried on then waited out its own timeouts (ci23: a broker whose metadata log
        # failed while starting hung until it was killed, 1 start in ~40 under load).
        give_up = time.monotonic() + START_CANCEL_S
        while not starting.done() and time.monotonic() < give_up:
            starting.cancel()
            await asyncio.wait({starting}, timeout=0.1)
        if not starting.done():
            log.warning("the start did not end within %.0fs of its cancellation; stopping "
                        "anyway", START_CANCEL_S)
        else:
            with contextlib.suppress(asyncio.CancelledError):
                await starting
    if server.failure is not None:
        raise BrokerFailed(server.failure)


class BrokerFailed(Exception):
    """A supervised task failed for good; the broker stopped itself (exit status 1)."""


async def serve(config: BrokerConfig, *, ready: asyncio.Event | None = None,
                stop: asyncio.Event | None = None) -> None:
    """Run a broker until SIGTERM/SIGINT (or ``stop`` is set); sets ``ready`` when serving.

    Raises :class:`BrokerFailed` after stopping when a supervised task failed for good."""
    stop = stop or asyncio.Event()
    watch = loop_watch.from_env()
    if watch is not None:
        watch.start()
    with stop_on_signals(stop), contextlib.ExitStack() as cleanup:
        if watch is not None:
            cleanup.callback(watch.stop)
        server = BrokerServer(config)
        server.stop_event = stop
        try:
            await _start_unless_stopped(server, stop)
            if ready is not None and server.ready:
                ready.set()
            await stop.wait()
            if server.failure is None:
                log.info("shutting down (grace %.1fs)", config.shutdown_timeout_s)
            else:
                log.critical("stopping: %s", server.failure)
        finally:
            await server.stop()
    if server.failure is not None:
        raise BrokerFailed(server.failure)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level, logging.INFO), stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def run(config: BrokerConfig) -> int:
    """Blocking entry point for ``strom broker start`` and ``python -m strom.broker``."""
    configure_logging(config.log_level)
    tune_malloc(os.environ)
    FreezeSurvivors().install()
    if fileops.install_from_env() is not None:
        log.warning("storage fault injection is on (%s)", fileops.ENV)
    try:
        raise_open_file_limit(config.log_open_segments_max)
    except FileLimitError as err:
        log.error("cannot start: %s", err)
        return 1
    try:
        asyncio.run(serve(config))
    except ConfigError as err:
        log.error("%s", err)
        return 2
    except StromError as err:
        log.error("cannot start: %s", err)
        return 1
    except BrokerFailed as err:
        log.critical("strom broker %d exits with status 1: %s", config.broker_id, err)
        return 1
    except KeyboardInterrupt:
        return 0
    return 0
