"""The ``Quorum`` gRPC service and a standalone controller process around one ``QuorumDriver``.

Why it exists: peers reach a node's Raft state machine, and brokers and tools reach the metadata
log, through this service. The handlers are thin: decode, hand the message or proposal to the
driver (which owns all state), encode what comes back.

- Vote / AppendEntries / InstallSnapshot: the reply the node produced, once it may be sent (after
  the fsync it depends on); FAILED_PRECONDITION when the node produced none. Refused before the
  node sees them (INVALID_ARGUMENT, one rate-limited log line): a request from a node that is not
  a voter or from this node's own id, or with inconsistent entries (INCONSISTENT_VOTER_SET,
  ``RaftNode.refusal``), and one carrying another cluster's id (INCONSISTENT_CLUSTER_ID).
- Propose: the committed index, or an ``ErrorInfo`` (NOT_CONTROLLER with the leader's id and
  address, REQUEST_TIMED_OUT, or the image's error such as TOPIC_ALREADY_EXISTS) in the body.
- DescribeQuorum / DescribeMetadata: answered locally from this node's view.
- BrokerHeartbeat: handed to the ``ActiveController`` running beside the driver; NOT_CONTROLLER
  with the leader's id and address (like Propose) when this node does not lead.

``serve`` runs a dedicated controller (the ``python -m strom.controller`` process): the driver,
its ``ActiveController`` and the gRPC server on one event loop, until SIGTERM/SIGINT (graceful:
stop accepting, finish calls, stop the driver) or until the driver fails (exit status 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from strom.controller.active import ActiveController, ControllerSettings
from strom.controller.codec import from_pb, to_pb
from strom.controller.driver import NotControllerError, QuorumDriver
from strom.controller.raft import RaftConfig
from strom.controller.raftlog import DiskRaftLog
from strom.controller.transport import MAX_MESSAGE_BYTES, GrpcTransport, request_timeout_s
from strom.controller.voters import parse_voters
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import quorum_pb2
from strom.ratelimit import RateLimitedLog
from strom.request_guard import RequestGuard
from strom.shutdown import stop_on_signals
from strom.supervision import Supervisor
from strom.transport.services import Method, add_service
from strom.transport.status import error_info, to_grpc_status

__all__ = ["ControllerConfig", "QuorumService", "parse_voters", "serve"]

log = logging.getLogger("strom.controller")
_refusals = RateLimitedLog(log)


class QuorumService:
    """The ``Quorum`` service's handlers over one driver; :meth:`methods` is its table (method
    name -> handler) for :func:`strom.transport.services.add_service`, as the broker's services
    are built (``strom.broker.service``)."""

    def __init__(
        self,
        driver: QuorumDriver,
        addresses: dict[int, str],
        propose_timeout_s: float = 10.0,
        active: ActiveController | None = None,
        cluster_id: Callable[[], str] = lambda: "",
    ) -> None:
        self._driver = driver
        self._cluster_id = cluster_id
        self._addresses = addresses
        self._propose_timeout_s = propose_timeout_s
        self._active = active

    def methods(self) -> dict[str, Method]:
        """Every method of ``strom.v1.Quorum``: the three Raft messages go to the driver as they
        are (:meth:`_peer`); the rest are answered here."""
        return {
            "Vote": self._peer,
            "AppendEntries": self._peer,
            "InstallSnapshot": self._peer,
            "Propose": self.Propose,
            "BrokerHeartbeat": self.BrokerHeartbeat,
            "DescribeQuorum": self.DescribeQuorum,
            "DescribeMetadata": self.DescribeMetadata,
        }

    async def _peer(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        message = from_pb(request)
        ours = self._cluster_id()
        if request.cluster_id and ours and request.cluster_id != ours:
            await self._refuse(context, StromError(
                ErrorCode.INCONSISTENT_CLUSTER_ID,
                f"node {message.sender} belongs to cluster {request.cluster_id!r}, this node to "
                f"{ours!r}: check controller.quorum.voters and the data directories"))
        reason = self._driver.refusal(message)
        if reason is not None:
            await self._refuse(context, StromError(ErrorCode.INCONSISTENT_VOTER_SET, reason))
        try:
            reply = await self._driver.receive(message)
        except StromError as err:  # this node's Raft member stopped: the peer tries another
            status = to_grpc_status(err)
            await context.abort(status.code, status.details, status.trailing_metadata)
        if reply is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no reply")
        return to_pb(reply)

    async def _refuse(self, context: grpc.aio.ServicerContext[Any, Any], err: StromError) -> None:
        _refusals.warning(f"{err.code.name} {context.peer()}", "refused a Raft request from %s: "
                          "%s: %s", context.peer(), err.code.name, err.message)
        status = to_grpc_status(err)
        await context.abort(status.code, status.details, status.trailing_metadata)

    async def Propose(
        self, request: quorum_pb2.ProposeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> quorum_pb2.ProposeResponse:
        try:
            index = await asyncio.wait_for(
                self._driver.propose(bytes(request.command)), self._propose_timeout_s
            )
        except TimeoutError:
            err = StromError(ErrorCode.REQUEST_TIMED_OUT, "the command did not commit in time")
            return self._error(err)
        except StromError as err:
            return self._error(err)
        return quorum_pb2.ProposeResponse(index=index, leader_hint=self._hint())

    def _hint(self) -> int:
        leader = self._driver.leader_id
        return -1 if leader is None else leader

    def _error_hint(self, err: StromError) -> int | None:
        hint = self._driver.leader_id
        if isinstance(err, NotControllerError) and err.leader_hint is not None:
            hint = err.leader_hint
        return hint

    def _error(self, err: StromError) -> quorum_pb2.ProposeResponse:
        hint = self._error_hint(err)
        return quorum_pb2.ProposeResponse(
            error=error_info(err),
            leader_hint=-1 if hint is None else hint,
            leader_address="" if hint is None else self._addresses.get(hint, ""),
        )

    async def BrokerHeartbeat(
        self,
        request: quorum_pb2.BrokerHeartbeatRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> quorum_pb2.BrokerHeartbeatResponse:
        try:
            if self._active is None:
                raise NotControllerError(
                    self._driver.leader_id, "this quorum node runs no active controller"
                )
            result = await asyncio.wait_for(
                self._active.heartbeat(
                    request.broker_id,
                    request.incarnation_id,
                    request.broker_epoch,
                    request.metadata_offset,
                    request.want_shutdown,
                ),
                self._propose_timeout_s,
            )
        except TimeoutError:
            err = StromError(ErrorCode.REQUEST_TIMED_OUT, "the heartbeat was not handled in time")
            return quorum_pb2.BrokerHeartbeatResponse(
                error=error_info(err), fenced=True, leader_hint=self._hint()
            )
        except StromError as err:
            hint = self._error_hint(err)
            return quorum_pb2.BrokerHeartbeatResponse(
                error=error_info(err), fenced=True, leader_hint=-1 if hint is None else hint
            )
        return quorum_pb2.BrokerHeartbeatResponse(
            leader_hint=self._hint(),
            fenced=result.fenced,
            shutdown_ready=result.shutdown_ready,
        )

    async def DescribeQuorum(
        self, request: quorum_pb2.DescribeQuorumRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> quorum_pb2.DescribeQuorumResponse:
        s = self._driver.status()

        def node(n: int, voter: bool) -> quorum_pb2.QuorumNode:
            return quorum_pb2.QuorumNode(
                node_id=n,
                address=self._addresses.get(n, ""),
                voter=voter,
                match_index=s.match_index.get(n, 0),
            )

        return quorum_pb2.DescribeQuorumResponse(
            node_id=s.node_id,
            leader_id=-1 if s.leader_id is None else s.leader_id,
            term=s.term,
            commit_index=s.commit_index,
            last_applied=s.last_applied,
            last_index=s.last_index,
            role=s.role.value,
            voters=[node(n, True) for n in s.voters],
            observers=[node(n, False) for n in s.observers],
            snapshot_index=s.snapshot_index,
        )

    async def DescribeMetadata(
        self,
        request: quorum_pb2.DescribeMetadataRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> quorum_pb2.DescribeMetadataResponse:
        image = self._driver.image
        return quorum_pb2.DescribeMetadataResponse(
            offset=image.offset, topics=sorted(image.topics), image=image.to_snapshot()
        )


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    node_id: int
    voters: dict[int, str]
    data_dir: Path
    host: str = "127.0.0.1"
    port: int | None = None
    """Defaults to the port of this node's entry in ``voters``."""
    election_timeout_ms: int = 1000
    heartbeat_interval_ms: int = 250
    compact_every: int = 1000
    controller: ControllerSettings = field(default_factory=ControllerSettings)
    """The active controller's settings (used while this node leads)."""

    def raft_config(self) -> RaftConfig:
        return RaftConfig(
            node_id=self.node_id,
            voters=frozenset(self.voters),
            election_timeout_ms=self.election_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
        )

    def listen_port(self) -> int:
        if self.port is not None:
            return self.port
        if self.node_id not in self.voters:
            raise ValueError(f"node {self.node_id} is not a voter: give --port")
        return int(self.voters[self.node_id].rpartition(":")[2])


async def serve(config: ControllerConfig, stop: asyncio.Event | None = None) -> int:
    """Run one controller until SIGTERM/SIGINT or ``stop``; the process exit status."""
    stop = stop or asyncio.Event()
    peers = {n: a for n, a in config.voters.items() if n != config.node_id}
    driver = QuorumDriver(
        config.raft_config(),
        DiskRaftLog(config.data_dir),
        GrpcTransport(peers, timeout_s=request_timeout_s(config.election_timeout_ms),
                      cluster_id=lambda: driver.image.cluster_id),
        compact_every=config.compact_every,
        manage_observers=True,  # brokers (process.roles=broker) follow the log as observers
    )
    active = ActiveController(driver, config.controller)
    server = grpc.aio.server(
        options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ],
        interceptors=[RequestGuard()],
    )
    address = f"{config.host}:{config.listen_port()}"
    try:
        server.add_insecure_port(address)
    except RuntimeError as exc:
        log.error("cannot listen on %s: %s", address, exc)
        return 2
    add_service(server, quorum_pb2.DESCRIPTOR.services_by_name["Quorum"],
                QuorumService(driver, config.voters, active=active,
                              cluster_id=lambda: driver.image.cluster_id).methods())
    failures: list[str] = []

    def fatal(task: str, exc: BaseException) -> None:
        failures.append(f"task {task} failed: {exc!r}")
        stop.set()

    Supervisor(fatal).install()
    with stop_on_signals(stop):
        status = 0
        try:
            await driver.start()
            await active.start()
            await server.start()
            log.info("strom controller %d serving on %s", config.node_id, address)
            assert driver.task is not None
            stopping = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait(
                {stopping, driver.task}, return_when=asyncio.FIRST_COMPLETED
            )
            if driver.task in done:
                log.error("the Raft driver failed: %r", driver.task.exception())
                status = 1
            if failures:
                log.error("stopping: %s", failures[0])
                status = 1
            stopping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stopping
            log.info("strom controller %d shutting down", config.node_id)
        finally:
            await server.stop(2.0)
            await active.stop()
            await driver.stop()
    return status
