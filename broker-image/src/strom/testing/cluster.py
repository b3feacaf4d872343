"""A cluster of real broker processes in combined mode, for process tests of clustering.

:func:`running_cluster` starts N brokers on 127.0.0.1; the first ``min(N, 3)`` (or the ``voters``
given) also run a controller voter, whose address is its broker port. All ports are chosen before
any broker starts, since every voter must name the others. Timeouts default to test speed
(:data:`CLUSTER_TEST_DEFAULTS`: a dead broker is fenced in 2 s, a controller elected in about
1 s); a test overrides any of them as keywords (``broker_session_timeout_ms=5000``) or
``config={...}``. Every process is stopped when the ``with`` block ends, also on failure.

Typical use::

    from strom.testing import running_cluster

    def test_failover(tmp_path):
        with running_cluster(tmp_path, brokers=3) as cluster, cluster.admin() as admin:
            admin.create_topic("t", partitions=1, replication_factor=3)
            cluster.wait_for_isr("t", 0, 3, timeout=20)
            old = cluster.wait_for_leader("t", 0, timeout=20)
            cluster.kill(old)
            new = cluster.wait_for_leader("t", 0, timeout=20, not_in=[old])
            cluster.restart(old)
            cluster.wait_until(lambda: old not in cluster.describe().fenced_broker_ids,
                               timeout=20, what=f"broker {old} unfenced again")

Waiting is always bounded: :meth:`Cluster.wait_until` polls a predicate and raises
:class:`ClusterTimeout` (an AssertionError, so pytest reports it as a failure) naming what it
waited for, the last value or error seen, and which brokers are down.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from strom.testing.broker import (
    STARTUP_TIMEOUT_S,
    BrokerProcess,
    BrokerStartError,
    config_from_kwargs,
    config_value,
)
from strom.testing.process import STOP_TIMEOUT_S, free_ports

if TYPE_CHECKING:
    import grpc

    from strom.client import Admin
    from strom.client.models import ClusterDescription
    from strom.protocol.v1 import broker_pb2

T = TypeVar("T")

HOST = "127.0.0.1"

#: Fast failure detection for tests; any key can be overridden by the caller.
CLUSTER_TEST_DEFAULTS: dict[str, str] = {
    "broker.session.timeout.ms": "2000",
    "broker.heartbeat.interval.ms": "200",
    "controller.election.timeout.ms": "500",
    "controller.heartbeat.interval.ms": "50",
    "replica.lag.time.max.ms": "3000",
    "shutdown.timeout.ms": "5000",
}

#: How long start-up waits for every broker to register with the controller.
REGISTER_TIMEOUT_S = 60.0


class ClusterTimeout(AssertionError):
    """A bounded wait of the harness ran out; the message says what and what was seen."""


def voters_string(ports: Mapping[int, int], host: str = HOST) -> str:
    """``controller.quorum.voters`` for voters at these broker ports: ``0@h:p0,1@h:p1``."""
    return ",".join(f"{vid}@{host}:{port}" for vid, port in sorted(ports.items()))


def _voter_ids(broker_ids: Sequence[int], voters: int | Sequence[int] | None) -> list[int]:
    if voters is None:
        return list(broker_ids[: min(len(broker_ids), 3)])
    if isinstance(voters, int):
        if not 1 <= voters <= len(broker_ids):
            raise ValueError(f"voters={voters}: give 1..{len(broker_ids)} (the number of "
                             "brokers that also run a controller) or a list of broker ids")
        return list(broker_ids[:voters])
    ids = sorted(set(voters))
    unknown = set(ids) - set(broker_ids)
    if not ids or unknown:
        raise ValueError(f"voters={list(voters)}: every voter must be one of the brokers "
                         f"{list(broker_ids)}")
    return ids


class Cluster:
    """N broker processes sharing one controller quorum. Not started until :meth:`start`."""

    def __init__(self, root: Path | str, brokers: int | Sequence[int] = 3, *,
                 voters: int | Sequence[int] | None = None,
                 config: Mapping[str, object] | None = None,
                 startup_timeout: float = STARTUP_TIMEOUT_S,
                 register_timeout: float = REGISTER_TIMEOUT_S,
                 hosts: Mapping[int, str] | None = None,
                 netns: Mapping[int, str] | None = None,
                 env: Mapping[int, Mapping[str, str]] | None = None) -> None:
        """``hosts`` / ``netns``: per broker id, the address it binds and the network namespace
        it runs in (default 127.0.0.1, none); ``strom.testing.netns`` sets both. ``env``: per
        broker id, extra environment variables (e.g. the fault hooks ``STROM_FAULT_TASK``,
        ``STROM_FAULT_FS``)."""
        ids = list(range(brokers)) if isinstance(brokers, int) else list(brokers)
        if not ids or len(set(ids)) != len(ids) or min(ids) < 0:
            raise ValueError(f"brokers={brokers!r}: give a count >= 1 or distinct ids >= 0")
        self.root = Path(root)
        self.voter_ids = _voter_ids(ids, voters)
        self.register_timeout = register_timeout
        n = len(ids)
        ports = free_ports(3 * n)
        grpc_ports = dict(zip(ids, ports[:n], strict=True))
        metrics_ports = dict(zip(ids, ports[n:2 * n], strict=True))
        kafka_ports = dict(zip(ids, ports[2 * n:], strict=True))
        host_of = {bid: (hosts or {}).get(bid, HOST) for bid in ids}
        settings: dict[str, str] = {
            **CLUSTER_TEST_DEFAULTS,
            "controller.quorum.voters": ",".join(
                f"{v}@{host_of[v]}:{grpc_ports[v]}" for v in sorted(self.voter_ids)),
            "default.replication.factor": str(min(len(ids), 3)),
        }
        settings.update({k: config_value(v) for k, v in (config or {}).items()})
        self.config = settings
        self.brokers: dict[int, BrokerProcess] = {
            bid: BrokerProcess(self.root, broker_id=bid,
                               config={**settings, "host": host_of[bid]}
                               if host_of[bid] != HOST else settings,
                               port=grpc_ports[bid], metrics_port=metrics_ports[bid],
                               kafka_port=kafka_ports[bid], startup_timeout=startup_timeout,
                               netns=(netns or {}).get(bid), env=(env or {}).get(bid))
            for bid in ids}
        self._admins: list[Admin] = []
        self._channels: dict[str, grpc.Channel] = {}

    # -- addresses ----------------------------------------------------------------------------

    @property
    def kafka_bootstrap(self) -> str:
        """Every broker's Kafka-listener address, comma-joined (``bootstrap.servers``)."""
        return ",".join(b.kafka_bootstrap for b in self.brokers.values())

    @property
    def bootstrap(self) -> str:
        """Every broker's address, comma-joined (clients skip the dead ones)."""
        return ",".join(b.bootstrap for b in self.brokers.values())

    def live_ids(self) -> list[int]:
        return [bid for bid, b in self.brokers.items() if b.is_alive() and not b.paused]

    def admin(self, **options: Any) -> Admin:
        """An ``Admin`` on all brokers; closed by the caller (``with``) or at cluster exit."""
        from strom.client import Admin

        options.setdefault("request_timeout_ms", 15_000)
        admin = Admin(self.bootstrap, **options)
        self._admins.append(admin)
        return admin

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Cluster:
        """Start every broker, wait until each is ready and all are registered (unfenced)."""
        try:
            for broker in self.brokers.values():
                broker.start(wait=False)
            for broker in self.brokers.values():
                broker.wait_ready()
            self.wait_all_registered(self.register_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGTERM all brokers at once, SIGKILL the ones still alive after the grace period."""
        for admin in self._admins:
            with contextlib.suppress(Exception):
                admin.close()
        self._admins.clear()
        for channel in self._channels.values():
            with contextlib.suppress(Exception):
                channel.close()
        self._channels.clear()
        for broker in self.brokers.values():
            with contextlib.suppress(OSError, RuntimeError):
                broker.signal_stop()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for broker in self.brokers.values():
            if not broker.wait_stopped(max(0.1, deadline - time.monotonic())):
                broker.kill()

    def kill(self, broker_id: int) -> None:
        """SIGKILL (kill -9): no flush, no goodbye to the controller."""
        self.brokers[broker_id].kill()

    def stop_broker(self, broker_id: int) -> int:
        """SIGTERM and wait (a controlled shutdown); returns the exit code."""
        return self.brokers[broker_id].terminate()

    def start_broker(self, broker_id: int, *, wait: bool = True) -> BrokerProcess:
        """Start a stopped broker again (same ports, same data)."""
        return self.brokers[broker_id].start(wait=wait)

    def restart(self, broker_id: int, *, kill: bool = False, wait: bool = True) -> BrokerProcess:
        """Stop (SIGTERM, or SIGKILL with ``kill=True``) and start on the same ports and data."""
        broker = self.brokers[broker_id]
        if kill:
            broker.kill()
        else:
            broker.stop()
        return broker.start(wait=wait)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the broker keeps its sockets but answers nothing (looks partitioned)."""
        self.brokers[broker_id].pause()

    def resume(self, broker_id: int) -> None:
        self.brokers[broker_id].resume()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<Cluster {sorted(self.brokers)} voters={self.voter_ids} live={self.live_ids()}>"

    # -- inspection ---------------------------------------------------------------------------

    def metadata(self, topics: Sequence[str] = (), *, via: int | None = None,
                 timeout: float = 2.0) -> broker_pb2.MetadataResponse:
        """A Metadata answer from broker ``via``, else from the first live broker that answers."""
        import grpc

        from strom.protocol.v1 import broker_pb2
        from strom.transport.v1 import broker_pb2_grpc

        request = broker_pb2.MetadataRequest(topics=list(topics))
        candidates = [via] if via is not None else self.live_ids()
        last: Exception | None = None
        for bid in candidates:
            address = self.brokers[bid].bootstrap
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = grpc.insecure_channel(address)
            stub: Any = broker_pb2_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
            try:
                response: broker_pb2.MetadataResponse = stub.Metadata(request, timeout=timeout)
                return response
            except grpc.RpcError as err:
                last = err
        raise ConnectionError(f"no broker of {candidates} answered Metadata: {last}")

    def partition(self, topic: str, partition: int, *, via: int | None = None) -> Any:
        """The ``PartitionMetadata`` (leader, replicas, isr) of one partition."""
        for t in self.metadata([topic], via=via).topics:
            if t.name == topic:
                for p in t.partitions:
                    if p.partition == partition:
                        return p
        raise LookupError(f"{topic}-{partition} is not in the metadata")

    def leader_of(self, topic: str, partition: int, *, via: int | None = None) -> int:
        """The partition's leader by the metadata (-1 while it has none)."""
        return int(self.partition(topic, partition, via=via).leader)

    def isr_of(self, topic: str, partition: int, *, via: int | None = None) -> list[int]:
        return sorted(self.partition(topic, partition, via=via).isr)

    def describe(self) -> ClusterDescription:
        """DescribeCluster from any live broker (one quick call, no retries)."""
        from strom.client import Admin

        with Admin(",".join(self.brokers[b].bootstrap for b in self.live_ids()) or self.bootstrap,
                   request_timeout_ms=2000, retry_backoff_ms=50) as admin:
            return admin.describe_cluster()

    def controller_id(self) -> int:
        """The active controller's broker id as DescribeCluster reports it (-1 if none)."""
        return int(self.describe().controller_id)

    # -- bounded waits ------------------------------------------------------------------------

    def wait_reassignments_done(self, topics: Sequence[str] | None = None,
                                timeout: float = 60.0) -> None:
        """Wait until no partition (of ``topics``) has a reassignment in flight."""
        def check() -> bool:
            from strom.client import Admin

            live = ",".join(self.brokers[b].bootstrap for b in self.live_ids())
            with Admin(live or self.bootstrap, request_timeout_ms=3000) as admin:
                return not admin.list_partition_reassignments(topics)

        self.wait_until(check, timeout, interval=0.2,
                        what="reassignments" + (f" of {list(topics)}" if topics else "")
                        + " to finish")

    def wait_until(self, predicate: Callable[[], T | None], timeout: float = 30.0, *,
                   what: str = "the condition", interval: float = 0.1) -> T:
        """Poll ``predicate`` until it returns a result; return that result.

        ``None``, ``False`` and empty containers or strings mean "not yet"; anything else is the
        result, numbers included (broker 0 is a valid answer to "which broker leads?").
        Exceptions from the predicate also count as "not yet" (a broker may be restarting); the
        last one is in the failure message, with the brokers that are down.
        """
        deadline = time.monotonic() + timeout
        last: object = None
        attempts = 0
        while True:
            attempts += 1
            try:
                value = predicate()
                if value is not None and not _not_yet(value):
                    return value
                last = value
            except Exception as err:  # any failure means "not yet"
                last = f"{type(err).__name__}: {err}"
            if time.monotonic() >= deadline:
                break
            time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
        down = [bid for bid, b in self.brokers.items() if not b.is_alive()]
        paused = [bid for bid, b in self.brokers.items() if b.paused]
        raise ClusterTimeout(
            f"timed out after {timeout:.1f}s ({attempts} checks) waiting for {what}; "
            f"last seen: {last!r}; brokers down: {down or 'none'}, paused: {paused or 'none'}")

    def wait_for_isr(self, topic: str, partition: int, size: int,
                     timeout: float = 30.0) -> list[int]:
        """Wait until the partition's ISR has exactly ``size`` replicas; return the ISR."""
        def check() -> list[int] | None:
            isr = self.isr_of(topic, partition)
            return isr if len(isr) == size else None

        return self.wait_until(check, timeout, what=f"ISR of {topic}-{partition} to have "
                               f"{size} replica(s)")

    def wait_for_leader(self, topic: str, partition: int, timeout: float = 30.0, *,
                        not_in: Sequence[int] = ()) -> int:
        """Wait until the partition has a live leader not in ``not_in``; return its id."""
        def check() -> int | None:
            leader = self.leader_of(topic, partition)
            alive = leader in self.live_ids()
            return leader if leader >= 0 and alive and leader not in not_in else None

        return self.wait_until(check, timeout, what=f"a leader of {topic}-{partition}"
                               + (f" other than {list(not_in)}" if not_in else ""))

    def wait_all_registered(self, timeout: float = REGISTER_TIMEOUT_S,
                            ids: Sequence[int] | None = None) -> ClusterDescription:
        """Wait until DescribeCluster lists the brokers (default: the live ones) unfenced."""
        def check() -> ClusterDescription | None:
            wanted = set(self.live_ids() if ids is None else ids)
            desc = self.describe()
            unfenced = {b.broker_id for b in desc.brokers} - set(desc.fenced_broker_ids)
            return desc if wanted <= unfenced else None

        return self.wait_until(check, timeout, interval=0.2,
                               what="every broker to register with the controller, unfenced")


def _not_yet(value: object) -> bool:
    if value is None or value is False:
        return True
    return isinstance(value, Sized) and len(value) == 0


@contextlib.contextmanager
def running_cluster(tmp_path: Path | str, brokers: int | Sequence[int] = 3, *,
                    voters: int | Sequence[int] | None = None,
                    config: Mapping[str, object] | None = None,
                    startup_timeout: float = STARTUP_TIMEOUT_S,
                    register_timeout: float = REGISTER_TIMEOUT_S,
                    **settings: object) -> Iterator[Cluster]:
    """Start a cluster in ``tmp_path``, yield it with every broker registered, always stop it.

    ``settings`` use underscores for dots (``min_insync_replicas=2``); ``config`` takes exact
    keys and wins over them. Both override :data:`CLUSTER_TEST_DEFAULTS`.
    """
    merged: dict[str, object] = dict(config_from_kwargs(settings))
    merged.update(config or {})
    cluster = Cluster(tmp_path, brokers, voters=voters, config=merged,
                      startup_timeout=startup_timeout, register_timeout=register_timeout)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


__all__ = [
    "CLUSTER_TEST_DEFAULTS",
    "BrokerStartError",
    "Cluster",
    "ClusterTimeout",
    "running_cluster",
    "voters_string",
]
