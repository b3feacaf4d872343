"""Apache Kafka itself, as a 1- or 3-node KRaft cluster on 127.0.0.1: the reference beside Strom.

Compatibility tests run the same client code against this and against Strom and compare what
they see; benchmarks put Kafka's figures beside Strom's in the same run (issue 20). It runs from
the jars :mod:`strom.testing.kafka_jars` fetched, through the project's one launcher
(:mod:`strom.testing.process`), like Kafka's own scripts do it:

1. ports: a PLAINTEXT (client) and a CONTROLLER port per node, all free, chosen up front;
2. one ``server.properties`` per node in combined mode (``process.roles=broker,controller``),
   the same cluster id and a static ``controller.quorum.voters`` naming every node, internal
   topics at replication factor ``min(nodes, 3)``;
3. ``kafka.tools.StorageTool format -t ID -c FILE`` for every node (in parallel), then
   ``kafka.Kafka FILE`` with G1 and a heap sized for a 2-core test machine
   (:data:`DEFAULT_HEAP`, Kafka's scripts use 1 GiB);
4. ready when every node answers ApiVersions on its client port and the Metadata of each node
   lists all of them; a node that exits or a deadline that passes raises
   :class:`~strom.testing.process.ProcessStartError` with the node's log tail;
5. stopped (SIGTERM to all, SIGKILL after the grace period) and its directory removed.

Typical use::

    from strom.testing.kafka import running_kafka

    with running_kafka(nodes=3) as kafka:
        producer = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap})

``kafka_fixture(nodes=1)`` makes a pytest fixture of it. Config keys are Kafka's own
(``config={"num.partitions": 3}``); keyword settings use underscores for dots.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from strom.testing.kafka_jars import KafkaToolMissing, ensure_jars, java_binary, kafka_version
from strom.testing.process import (
    ManagedProcess,
    ProcessStartError,
    free_ports,
    starts_processes,
    stop_pids,
    temp_dir,
    wait_all_ready,
)
from strom.testing.tools import missing

__all__ = [
    "DEFAULT_HEAP",
    "KafkaCluster",
    "KafkaNode",
    "KafkaToolMissing",
    "api_versions_ok",
    "kafka_fixture",
    "random_cluster_id",
    "reference_settings",
    "running_kafka",
]

HOST = "127.0.0.1"
#: Heap of one node: three nodes and the test process fit in a 2-core, few-GiB machine.
DEFAULT_HEAP = ("-Xms256m", "-Xmx512m")
#: Kafka's own JVM flags (kafka-run-class.sh).
JVM_FLAGS = ("-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
             "-Djava.awt.headless=true")
#: Start took 30-35 s for one node on this VM under a load average of 18 (8 agents on 2 cores).
STARTUP_TIMEOUT_S = 180.0
#: A node that has not stopped 20 s after SIGTERM is killed.
STOP_TIMEOUT_S = 20.0
FORMAT_TIMEOUT_S = 60.0

def reference_settings(replication: int) -> dict[str, str]:
    """What the reference cluster changes from Kafka's defaults (``config`` overrides these):
    internal topics at ``replication`` (``min(nodes, 3)``) and no initial rebalance delay (a
    group's first member is assigned at once, not after Kafka's default 3 s). Anything measured
    beside Kafka gets the same values where it has the same key (the benchmarks' Strom brokers:
    ``benchmarks.kafka_workloads.strom_beside_kafka``), else a fresh group's join costs one
    side 3 s the other does not."""
    return {
        "offsets.topic.replication.factor": str(replication),
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": str(min(replication, 2)),
        "share.coordinator.state.topic.replication.factor": str(replication),
        "share.coordinator.state.topic.min.isr": str(min(replication, 2)),
        "group.initial.rebalance.delay.ms": "0",
    }


LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def random_cluster_id() -> str:
    """A Kafka cluster id as ``kafka-storage.sh random-uuid`` makes it (base64url of 16 random
    bytes, no padding, never starting with '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def api_versions_ok(host: str, port: int, timeout: float = 1.0) -> bool:
    """True if a Kafka broker at host:port answers ApiVersions (v0) with no error."""
    client_id = b"strom-ready"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            head = _read_exact(sock, 4)
            (size,) = struct.unpack(">i", head)
            payload = _read_exact(sock, size)
    except OSError:
        return False
    correlation_id, error_code = struct.unpack(">ih", payload[:6])
    return bool(correlation_id == 1 and error_code == 0)


def _read_exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks += chunk
    return bytes(chunks)


def _metadata_brokers(bootstrap: str) -> int:
    """How many brokers the Metadata of ``bootstrap`` lists (confluent-kafka, a test client)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000})
    return len(admin.list_topics(timeout=2).brokers)


class KafkaNode:
    """One combined broker+controller node of a :class:`KafkaCluster`."""

    def __init__(self, node_id: int, root: Path, port: int, controller_port: int) -> None:
        self.node_id = node_id
        self.dir = root / f"node-{node_id}"
        self.port = port
        self.controller_port = controller_port
        self.properties_path = self.dir / "server.properties"
        self.log_path = self.dir / "kafka.log"
        self.process: ManagedProcess | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    def is_alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def properties(self, voters: str, replication: int,
                   overrides: Mapping[str, str]) -> dict[str, str]:
        """This node's server.properties: Kafka's defaults, test-sized internal topics, then
        ``overrides``, then what the cluster cannot work without (ids, listeners, dirs)."""
        base = reference_settings(replication)
        fixed = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:"
                         f"{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
        }
        return {**base, **overrides, **fixed}


class KafkaCluster:
    """A KRaft cluster of ``nodes`` combined-mode Kafka nodes in ``root``; not started until
    :meth:`start` (or ``with``)."""

    def __init__(self, root: Path | str, nodes: int = 1, *,
                 config: Mapping[str, object] | None = None,
                 heap: Sequence[str] = DEFAULT_HEAP,
                 startup_timeout: float = STARTUP_TIMEOUT_S,
                 libs: Path | None = None) -> None:
        if not 1 <= nodes <= 9:
            raise ValueError(f"nodes={nodes}: a local Kafka cluster has 1..9 nodes")
        self.root = Path(root)
        self.heap = list(heap)
        self.startup_timeout = startup_timeout
        self.libs = libs
        self.cluster_id = random_cluster_id()
        ports = free_ports(2 * nodes)
        self.nodes: dict[int, KafkaNode] = {
            i: KafkaNode(i, self.root, ports[i], ports[nodes + i]) for i in range(nodes)}
        self.config = {k: _str(v) for k, v in (config or {}).items()}
        self.voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}"
                               for n in self.nodes.values())
        self.replication = min(nodes, 3)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values())

    @property
    def version(self) -> str:
        return kafka_version()

    def _classpath(self) -> str:
        if self.libs is None:
            self.libs = ensure_jars()
        return f"{self.libs}/*"

    def java_argv(self, main_class: str, *args: str, heap: Sequence[str] | None = None,
                  ) -> list[str]:
        """``java ... -cp libs/* MAIN_CLASS ARGS``: a Kafka server or tool command."""
        log4j = self.root / "log4j2.properties"
        return [java_binary(), *(self.heap if heap is None else heap), *JVM_FLAGS,
                f"-Dlog4j2.configurationFile={log4j}", "-cp", self._classpath(), main_class,
                *args]

    def run_tool(self, main_class: str, *args: str, timeout: float = 300.0,
                 ) -> subprocess.CompletedProcess[str]:
        """Run one of Kafka's tools (``org.apache.kafka.tools.ProducerPerformance``...) to
        completion; output captured."""
        return subprocess.run(self.java_argv(main_class, *args, heap=("-Xmx512m",)),
                              capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> KafkaCluster:
        """Format every node, start them all, wait until each answers and sees all."""
        try:
            self._prepare()
            self._format()
            for node in self.nodes.values():
                self._start_node(node)
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "log4j2.properties").write_text(LOG4J2)
        for node in self.nodes.values():
            node.dir.mkdir(parents=True, exist_ok=True)
            props = node.properties(self.voters, self.replication, self.config)
            node.properties_path.write_text(
                "".join(f"{k}={v}\n" for k, v in props.items()))

    def _format(self) -> None:
        procs = [ManagedProcess(
            self.java_argv("kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                           "-c", str(n.properties_path),
                           heap=("-Xmx256m", "-XX:TieredStopAtLevel=1")),
            n.dir / "format.log", name=f"kafka node {n.node_id} format").start()
            for n in self.nodes.values()]
        deadline = time.monotonic() + FORMAT_TIMEOUT_S
        for proc in procs:
            if not proc.wait_stopped(max(0.1, deadline - time.monotonic())):
                proc.kill()
                raise ProcessStartError(proc.name, f"did not finish in {FORMAT_TIMEOUT_S:.0f} s",
                                        proc.log_path, None)
            if proc.returncode != 0:
                raise ProcessStartError(proc.name, f"failed with exit code {proc.returncode}",
                                        proc.log_path, proc.returncode)

    def _start_node(self, node: KafkaNode) -> None:
        node.process = ManagedProcess(
            self.java_argv("kafka.Kafka", str(node.properties_path)), node.log_path,
            name=f"kafka node {node.node_id}").start()

    def wait_ready(self, timeout: float | None = None) -> float:
        """Wait until every live node answers ApiVersions and its Metadata lists every live
        node; return the seconds waited."""
        live = [n for n in self.nodes.values() if n.is_alive()]
        by_name = {f"kafka node {n.node_id}": n for n in live}
        want = len(live)

        def ready(proc: ManagedProcess) -> bool:
            node = by_name[proc.name]
            if not api_versions_ok(HOST, node.port):
                return False
            return want == 1 or _metadata_brokers(node.bootstrap) >= want

        procs = [n.process for n in live if n.process is not None]
        return wait_all_ready(procs, ready, self.startup_timeout if timeout is None else timeout,
                              interval=0.2)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM every node at once, SIGKILL those still alive after ``timeout``."""
        procs = [n.process for n in self.nodes.values()
                 if n.process is not None and n.process.is_alive()]
        stop_pids([p.pid for p in procs], timeout)
        for proc in procs:
            proc.wait_stopped(5.0)

    def kill(self, node_id: int) -> None:
        """SIGKILL one node: no controlled shutdown."""
        process = self.nodes[node_id].process
        if process is not None:
            process.kill()

    def stop_node(self, node_id: int, timeout: float = STOP_TIMEOUT_S) -> str:
        """SIGTERM one node (controlled shutdown), SIGKILL after ``timeout``."""
        process = self.nodes[node_id].process
        return "not running" if process is None else process.stop(timeout)

    def start_node(self, node_id: int, *, wait: bool = True) -> None:
        """Start a stopped node again (same ports, same data)."""
        node = self.nodes[node_id]
        if node.is_alive():
            raise RuntimeError(f"kafka node {node_id} is already running")
        self._start_node(node)
        if wait:
            self.wait_ready()

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        live = [n.node_id for n in self.nodes.values() if n.is_alive()]
        return f"<KafkaCluster {len(self.nodes)} node(s) {self.bootstrap} live={live}>"


def _str(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@contextlib.contextmanager
def running_kafka(nodes: int = 1, *, root: Path | str | None = None,
                  config: Mapping[str, object] | None = None,
                  heap: Sequence[str] = DEFAULT_HEAP,
                  startup_timeout: float = STARTUP_TIMEOUT_S,
                  **settings: object) -> Iterator[KafkaCluster]:
    """Start a Kafka cluster in a fresh directory (under ``root`` if given), yield it ready,
    then stop it and remove the directory. ``settings`` use underscores for dots."""
    merged: dict[str, object] = {k.replace("_", "."): v for k, v in settings.items()}
    merged.update(config or {})
    with temp_dir("strom-kafka-", parent=root) as path:
        cluster = KafkaCluster(path, nodes, config=merged, heap=heap,
                               startup_timeout=startup_timeout)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()


def require_jars() -> Path:
    """The jars for a test: fetched if needed. Without Java or Maven the test is skipped on a
    developer machine and fails under ``CI=true`` (CI installs both)."""
    try:
        java_binary()
        return ensure_jars()
    except KafkaToolMissing as err:
        missing(f"the Apache Kafka reference is not available: {err}")


def kafka_fixture(nodes: int = 1,
                  scope: Literal["session", "package", "module", "class", "function"] = "module",
                  *, config: Mapping[str, object] | None = None,
                  **settings: object) -> Callable[..., Any]:
    """A pytest fixture yielding a ready :class:`KafkaCluster`, stopped and removed after::

        kafka = kafka_fixture(nodes=1)   # in a conftest or test module

        def test_x(kafka): ...
    """
    import pytest

    merged: dict[str, object] = {k.replace("_", "."): v for k, v in settings.items()}
    merged.update(config or {})

    @pytest.fixture(scope=scope)
    @starts_processes
    def _kafka(tmp_path_factory: Any) -> Iterator[KafkaCluster]:
        require_jars()
        with running_kafka(nodes, root=tmp_path_factory.mktemp("kafka"),
                           config=merged) as cluster:
            yield cluster

    return _kafka
