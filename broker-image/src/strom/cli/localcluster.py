"""A local cluster of broker processes on 127.0.0.1, for ``strom dev up|down|status|demo``.

Each broker is a detached ``python -m strom.broker`` process (its own session, so closing the
terminal or Ctrl-C in the shell does not stop it) with its files under ``DIR/broker-<id>/``:
``broker.log`` (stdout and stderr), ``broker.pid`` and ``data/`` (its ``log.dirs``). The cluster is
recorded in ``DIR/cluster.json``; that record is what ``down`` and ``status`` read, so they work
from any shell. Ports: 9092+i (gRPC) and 9404+i (metrics) when free, else random free ports.

Only loopback is bound. A broker counts as ready when its metrics server answers ``/readyz`` with
200. Stopping sends SIGTERM (graceful: the broker flushes and closes its segments), then SIGKILL
after a timeout; a PID is only signalled if ``/proc`` shows it still runs ``strom.broker``, so a
recycled PID is never hit.

With N > 1 brokers the cluster runs in combined mode: the first ``min(N, 3)`` brokers are also
controller voters (``controller.quorum.voters`` names their broker ports, so all ports are chosen
before any broker starts), ``default.replication.factor=min(N, 3)`` and ``min.insync.replicas``
one less (at least 1), so a topic survives one broker down and keeps accepting ``acks=all``
writes. Start-up then also waits until every broker is registered with the controller and
unfenced. One broker stays what it always was: its own controller, no voters configured.

A data dir remembers what its brokers were started as in ``DIR/layout.json`` (broker count and
controller voters; ``down`` keeps it, unlike ``cluster.json``). The voter set of a Raft quorum
cannot change by restarting with another configuration (two quorums would elect two leaders over
the same metadata log), so ``up`` on an existing data dir keeps the recorded voters: a one-broker
dir started again with ``--brokers 5`` keeps broker 0 as its only voter and adds four brokers.
Fewer brokers than recorded is refused (their partitions would be offline). After such a
scale-out ``up`` raises ``__consumer_offsets`` to ``min(offsets.topic.replication.factor,
brokers)`` replicas with a reassignment (:func:`raise_internal_replication`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from strom.cli.errors import CliError, UsageError
from strom.cli.invocation import strom_invocation
from strom.testing.broker import probe_ready as probe_ready_url
from strom.testing.process import (
    ManagedProcess,
    ProcessStartError,
    StopOutcome,
    free_port,
    log_tail,
    pid_alive,
    pid_runs,
    stop_pids,
    wait_all_ready,
)

STATE_FILE = "cluster.json"
LAYOUT_FILE = "layout.json"
#: A broker's metadata log directory (``strom.broker.cluster.RAFT_DIR``): its presence shows the
#: broker ran before, for data dirs older than ``layout.json``.
RAFT_DIR = "__raft"
LOCK_FILE = ".lock"
DEFAULT_DATA_DIR = ".strom-dev"
HOST = "127.0.0.1"
FIRST_PORT = 9092
FIRST_METRICS_PORT = 9404
#: Kafka-protocol listener of broker 0 (the broker's own default), then +1 per broker.
FIRST_KAFKA_PORT = 19092
#: A laptop's worth: each broker is a Python process with its own gRPC server.
MAX_BROKERS = 9
#: Voters of the controller quorum in a local cluster (3 tolerate one failure).
MAX_VOTERS = 3
#: The broker's default ``offsets.topic.replication.factor``.
DEFAULT_OFFSETS_RF = 3
STATE_VERSION = 1

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass
class BrokerSpec:
    broker_id: int
    host: str
    port: int
    metrics_port: int
    dir: str
    pid: int | None = None
    #: The Kafka-protocol listener's port (0 in records written before it existed).
    kafka_port: int = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def kafka_address(self) -> str:
        return f"{self.host}:{self.kafka_port}"

    @property
    def log_file(self) -> Path:
        return Path(self.dir) / "broker.log"

    @property
    def pid_file(self) -> Path:
        return Path(self.dir) / "broker.pid"

    @property
    def data_dir(self) -> Path:
        return Path(self.dir) / "data"

    @property
    def ready_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/readyz"

    def config(self) -> dict[str, str]:
        """The broker config keys this cluster sets (everything else: embedded defaults)."""
        return {
            "broker.id": str(self.broker_id),
            "host": self.host,
            "port": str(self.port),
            "metrics.port": str(self.metrics_port),
            "log.dirs": str(self.data_dir),
            **({"listeners": f"PLAINTEXT://{self.host}:{self.kafka_port}"}
               if self.kafka_port else {}),
        }


@dataclass
class ClusterState:
    data_dir: str
    brokers: list[BrokerSpec]
    created_ms: int = 0
    overrides: dict[str, str] = field(default_factory=dict)
    version: int = STATE_VERSION
    #: Cluster-wide broker keys chosen at planning time (quorum voters, replication defaults).
    cluster_config: dict[str, str] = field(default_factory=dict)
    voters: list[int] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    @property
    def kafka_bootstrap(self) -> str:
        """The brokers' Kafka-protocol addresses, for Kafka clients ("" in old records)."""
        return ",".join(b.kafka_address for b in self.brokers if b.kafka_port)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ClusterState:
        raw = json.loads(text)
        if not isinstance(raw, dict) or raw.get("version") != STATE_VERSION:
            raise ValueError(f"not a version {STATE_VERSION} cluster record")
        brokers = [BrokerSpec(**b) for b in raw["brokers"]]
        return cls(
            data_dir=raw["data_dir"], brokers=brokers, created_ms=raw.get("created_ms", 0),
            overrides=dict(raw.get("overrides", {})),
            cluster_config=dict(raw.get("cluster_config", {})),
            voters=[int(v) for v in raw.get("voters", [])],
        )


# --- planning (pure apart from port probes) ---------------------------------------------------


def check_broker_count(n: int) -> None:
    if n < 1:
        raise UsageError(f"--brokers {n} must be at least 1")
    if n > MAX_BROKERS:
        raise UsageError(f"--brokers {n}: a local cluster has at most {MAX_BROKERS} brokers")


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pick_ports(
    n: int, first: int, host: str = HOST, taken: set[int] | None = None,
    is_free: Callable[[str, int], bool] = port_is_free,
) -> list[int]:
    """``first, first+1, ...`` where free, a random free port otherwise; never one in ``taken``.

    ``first=0`` asks for random free ports only (tests, several clusters side by side).
    """
    used = set(taken or ())
    ports = []
    for i in range(n):
        port = first + i if first else 0
        if not port or port in used or not is_free(host, port):
            port = free_port(host)
            while port in used:
                port = free_port(host)
        used.add(port)
        ports.append(port)
    return ports


@dataclass(frozen=True)
class Layout:
    """What a data dir's brokers were started as (kept across ``down``/``up``)."""

    brokers: int
    voters: list[int]


def default_voters(n: int) -> list[int]:
    return list(range(min(n, MAX_VOTERS)))


def load_layout(data_dir: Path) -> Layout | None:
    """The recorded layout; for an older data dir, the one its broker dirs imply; None if new."""
    path = data_dir / LAYOUT_FILE
    try:
        raw = json.loads(path.read_text())
        return Layout(int(raw["brokers"]), [int(v) for v in raw["voters"]])
    except FileNotFoundError:
        pass
    except (ValueError, KeyError, TypeError) as err:
        raise CliError(f"{path} is not a valid layout record ({err}); it says how many brokers "
                       "and which controller voters this data dir was started with; delete "
                       "the data dir to start afresh") from None
    n = 0
    while (data_dir / f"broker-{n}" / "data" / RAFT_DIR).is_dir():
        n += 1
    return Layout(n, default_voters(n)) if n else None


def save_layout(state: ClusterState) -> None:
    path = Path(state.data_dir) / LAYOUT_FILE
    path.write_text(json.dumps({"brokers": len(state.brokers), "voters": state.voters}) + "\n")


def check_restart(layout: Layout, n: int, data_dir: Path) -> None:
    """Refuse to start fewer brokers than ``data_dir`` holds (their partitions would be lost
    from view, and voters among them would leave the quorum without a majority)."""
    if n < layout.brokers:
        raise UsageError(
            f"--brokers {n}: {data_dir} holds a {layout.brokers}-broker cluster (controller "
            f"voters {', '.join(map(str, layout.voters))}); start it with --brokers "
            f"{layout.brokers} or more, or delete it with {strom_invocation()} dev down "
            f"--delete-data --data-dir {data_dir}")


def plan_cluster(
    data_dir: Path, n: int, host: str = HOST,
    is_free: Callable[[str, int], bool] = port_is_free, base_port: int = FIRST_PORT,
    voters: list[int] | None = None,
) -> ClusterState:
    """Ports ``base_port+i`` (gRPC), ``9404+i`` (metrics) and ``19092+i`` (Kafka protocol)
    where free; all random if 0.

    ``voters`` are the controller voters a data dir was started with (default: the first
    ``min(n, 3)`` brokers)."""
    check_broker_count(n)
    if not 0 <= base_port < 65536:
        raise UsageError(f"--base-port {base_port} must be 0 (random) or a port number")
    root = data_dir.resolve()
    ports = pick_ports(n, base_port, host, is_free=is_free)
    first_metrics = FIRST_METRICS_PORT if base_port else 0
    metrics = pick_ports(n, first_metrics, host, taken=set(ports), is_free=is_free)
    first_kafka = FIRST_KAFKA_PORT if base_port else 0
    kafka = pick_ports(n, first_kafka, host, taken={*ports, *metrics}, is_free=is_free)
    brokers = [
        BrokerSpec(broker_id=i, host=host, port=ports[i], metrics_port=metrics[i],
                   dir=str(root / f"broker-{i}"), kafka_port=kafka[i])
        for i in range(n)
    ]
    voters = default_voters(n) if voters is None else list(voters)
    if not voters or any(not 0 <= v < n for v in voters):
        raise UsageError(f"controller voters {voters} are not among brokers 0..{n - 1}")
    return ClusterState(data_dir=str(root), brokers=brokers, created_ms=int(time.time() * 1000),
                        cluster_config=cluster_config(brokers, voters), voters=voters)


def cluster_config(brokers: list[BrokerSpec], voters: list[int]) -> dict[str, str]:
    """The cluster-wide keys of a combined-mode cluster ({} for one broker: its own controller).

    ``min.insync.replicas`` is one less than the replication factor so that one broker can be
    down (or restarting) without failing ``acks=all`` producers, as in a typical production
    setup of RF 3 / min ISR 2.
    """
    if len(brokers) < 2:
        return {}  # its own controller: the one voter, on its own port
    rf = min(len(brokers), MAX_VOTERS)
    by_id = {b.broker_id: b for b in brokers}
    return {
        "controller.quorum.voters": ",".join(
            f"{v}@{by_id[v].host}:{by_id[v].port}" for v in voters),
        "default.replication.factor": str(rf),
        "min.insync.replicas": str(max(1, rf - 1)),
    }


#: Keys the user may not override with --set: the cluster would not form.
FIXED_CLUSTER_KEYS = ("controller.quorum.voters",)


def broker_command(spec: BrokerSpec, overrides: Mapping[str, str] | None = None,
                   cluster: Mapping[str, str] | None = None) -> list[str]:
    """The argv that starts one broker.

    Precedence, lowest first: the cluster's defaults (replication factor, min ISR), the user's
    overrides, then the keys the cluster cannot work without (quorum voters, id, ports, dirs).
    """
    cluster = dict(cluster or {})
    fixed = {k: cluster.pop(k) for k in FIXED_CLUSTER_KEYS if k in cluster}
    argv = [sys.executable, "-m", "strom.broker"]
    for key, value in {**cluster, **(overrides or {}), **fixed, **spec.config()}.items():
        argv += ["--set", f"{key}={value}"]
    return argv


# --- state file -------------------------------------------------------------------------------


def state_path(data_dir: Path) -> Path:
    return data_dir / STATE_FILE


def load_state(data_dir: Path) -> ClusterState | None:
    path = state_path(data_dir)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return ClusterState.from_json(text)
    except (ValueError, KeyError, TypeError) as err:
        raise CliError(
            f"{path} is not a valid cluster record ({err}); stop any brokers it named and "
            "delete it"
        ) from None


def save_state(state: ClusterState) -> None:
    path = state_path(Path(state.data_dir))
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(state.to_json())
    tmp.replace(path)


@contextlib.contextmanager
def locked(data_dir: Path) -> Iterator[None]:
    """One ``up``/``down``/``demo`` at a time per data dir."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / LOCK_FILE, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CliError(
                f"another strom dev command is using {data_dir}; wait for it to finish"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --- processes --------------------------------------------------------------------------------


#: Marker every ``strom dev`` broker's command line carries: a PID read back from
#: ``cluster.json`` is only signalled while it still runs a broker.
BROKER_MARKER = "strom.broker"

def is_our_broker(pid: int | None) -> bool:
    """True if ``pid`` is alive and (where /proc exists) runs ``strom.broker``."""
    return pid_runs(pid, BROKER_MARKER)


def probe_ready(spec: BrokerSpec, timeout: float = 1.0) -> bool:
    return probe_ready_url(spec.ready_url, timeout)


def broker_process(spec: BrokerSpec, overrides: Mapping[str, str] | None = None,
                   cluster: Mapping[str, str] | None = None) -> ManagedProcess:
    """The detached process of one broker (it outlives this command; ``down`` stops it)."""
    return ManagedProcess(broker_command(spec, overrides, cluster), spec.log_file,
                          name=f"broker {spec.broker_id}", env={"PYTHONUNBUFFERED": "1"},
                          cwd=spec.dir, detach=True)


def spawn_broker(spec: BrokerSpec, overrides: Mapping[str, str] | None = None,
                 cluster: Mapping[str, str] | None = None) -> ManagedProcess:
    """Start one detached broker process; its PID is in ``spec.pid`` and its pid file."""
    spec.data_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    proc = broker_process(spec, overrides, cluster).start(
        banner=f"--- strom dev: starting broker {spec.broker_id} at {stamp} ---")
    spec.pid = proc.pid
    spec.pid_file.write_text(f"{proc.pid}\n")
    return proc


def _exited(spec: BrokerSpec, during: str) -> CliError:
    lines = [ln.strip() for ln in log_tail(spec.log_file).splitlines() if ln.strip()]
    line = lines[-1] if lines else ""
    if len(line) > 200:
        line = line[:197] + "..."
    return CliError(f"broker {spec.broker_id} exited {during}" + (f": {line}" if line else "")
                    + f" (full log: {spec.log_file})")


def wait_ready(
    state: ClusterState, processes: list[ManagedProcess], timeout: float,
    progress: Progress = _quiet, poll: float = 0.1,
) -> float:
    """Block until every broker answers /readyz; return the seconds it took.

    ``processes`` are the brokers' processes, as :func:`spawn_broker` returned them. Fails fast,
    with the broker's last log line, if a broker process exits meanwhile.
    """
    by_name = {f"broker {s.broker_id}": s for s in state.brokers}

    def note(proc: ManagedProcess | None, elapsed: float, pending: int) -> None:
        if proc is None:
            progress(f"waiting for {pending} broker(s)... {elapsed:.0f} s")
        else:
            spec = by_name[proc.name]
            progress(f"broker {spec.broker_id} ready on {spec.address} ({elapsed:.1f} s)")

    try:
        return wait_all_ready(processes, lambda p: probe_ready(by_name[p.name], timeout=0.5),
                              timeout, interval=poll, progress=note)
    except ProcessStartError as err:
        spec = by_name[err.name]
        if err.returncode is not None:
            raise _exited(spec, "during start-up") from None
        ids = ", ".join(str(s.broker_id) for s in state.brokers if not probe_ready(s, 0.2))
        raise CliError(
            f"broker(s) {ids or spec.broker_id} not ready after {timeout:.0f} s; see "
            f"{spec.log_file} (raise the limit with --timeout)") from None


def start_cluster(
    state: ClusterState, timeout: float, progress: Progress = _quiet
) -> float:
    """Spawn every broker of ``state``, record it, wait for readiness (stop all on failure)."""
    Path(state.data_dir).mkdir(parents=True, exist_ok=True)
    try:
        processes = []
        for spec in state.brokers:
            Path(spec.dir).mkdir(parents=True, exist_ok=True)
            proc = spawn_broker(spec, state.overrides, state.cluster_config)
            processes.append(proc)
            kafka = f"kafka {spec.kafka_address}, " if spec.kafka_port else ""
            progress(f"started broker {spec.broker_id} (pid {proc.pid}) on {spec.address}, "
                     f"{kafka}metrics on :{spec.metrics_port}, log {spec.log_file}")
        save_state(state)
        start = time.monotonic()
        wait_ready(state, processes, timeout, progress)
        if len(state.brokers) > 1:
            wait_registered(state, max(1.0, timeout - (time.monotonic() - start)), progress)
        save_layout(state)
        return time.monotonic() - start
    except BaseException:
        stop_cluster(state, timeout=5.0)
        with contextlib.suppress(FileNotFoundError):
            state_path(Path(state.data_dir)).unlink()
        raise


def describe_cluster(state: ClusterState, timeout_ms: int = 2000) -> Any:
    """DescribeCluster from any broker of ``state`` (one short call; raises when none answers)."""
    from strom.client import Admin

    with Admin(state.bootstrap, request_timeout_ms=timeout_ms, retry_backoff_ms=50) as admin:
        return admin.describe_cluster()


def registered_unfenced(desc: Any) -> set[int]:
    fenced = set(getattr(desc, "fenced_broker_ids", ()))
    return {b.broker_id for b in desc.brokers} - fenced


def wait_registered(state: ClusterState, timeout: float, progress: Progress = _quiet,
                    poll: float = 0.2) -> float:
    """Block until DescribeCluster lists every broker of ``state`` registered and unfenced.

    A broker is ready (serving) before the controller quorum has elected a leader and accepted
    its registration; clients routed to it before then would see a partial cluster.
    """
    start = time.monotonic()
    wanted = {b.broker_id for b in state.brokers}
    seen: set[int] = set()
    last_error = ""
    last_note = start
    while True:
        try:
            seen = registered_unfenced(describe_cluster(state))
            last_error = ""
        except Exception as err:  # not answering yet counts as none registered
            last_error = f" (last error: {' '.join(str(err).split())[:160]})"
        for spec in state.brokers:
            if not pid_alive(spec.pid):
                raise _exited(spec, "while joining the cluster")
        if wanted <= seen:
            progress(f"all {len(wanted)} brokers registered with the controller "
                     f"({time.monotonic() - start:.1f} s)")
            return time.monotonic() - start
        now = time.monotonic()
        if now - start > timeout:
            missing = ",".join(str(b) for b in sorted(wanted - seen))
            raise CliError(f"broker(s) {missing} not registered with the controller after "
                           f"{timeout:.0f} s{last_error}; see the broker logs under "
                           f"{state.data_dir} (raise the limit with --timeout)")
        if now - last_note >= 1:
            progress(f"{len(seen & wanted)} of {len(wanted)} brokers registered... "
                     f"{now - start:.0f} s")
            last_note = now
        time.sleep(poll)


@dataclass
class StopResult:
    broker_id: int
    pid: int | None
    outcome: StopOutcome


def stop_cluster(
    state: ClusterState, timeout: float = 15.0, progress: Progress = _quiet
) -> list[StopResult]:
    """SIGTERM every live broker, SIGKILL those still alive after ``timeout`` seconds."""
    by_pid = {s.pid: s for s in state.brokers if s.pid is not None}
    for spec in state.brokers:
        if is_our_broker(spec.pid):
            progress(f"stopping broker {spec.broker_id} (pid {spec.pid})")

    def killing(pid: int) -> None:
        progress(f"broker {by_pid[pid].broker_id} (pid {pid}) ignored SIGTERM for "
                 f"{timeout:.0f} s; killing it")

    outcomes = stop_pids([s.pid for s in state.brokers], timeout, marker=BROKER_MARKER,
                         on_kill=killing)
    for spec in state.brokers:
        with contextlib.suppress(FileNotFoundError):
            spec.pid_file.unlink()
    return [StopResult(s.broker_id, s.pid, outcome)
            for s, outcome in zip(state.brokers, outcomes, strict=True)]


@dataclass
class BrokerStatus:
    broker_id: int
    pid: int | None
    address: str
    metrics_port: int
    alive: bool
    ready: bool
    log_file: str
    voter: bool = False
    kafka: str = ""
    """The Kafka-protocol listener's address ("" in records written before it existed)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def cluster_status(state: ClusterState) -> list[BrokerStatus]:
    out = []
    for spec in state.brokers:
        alive = is_our_broker(spec.pid)
        out.append(BrokerStatus(
            broker_id=spec.broker_id, pid=spec.pid, address=spec.address,
            metrics_port=spec.metrics_port, alive=alive,
            ready=alive and probe_ready(spec), log_file=str(spec.log_file),
            # records older than the voters of one-broker clusters say []: its own voter
            voter=spec.broker_id in (state.voters or [0]),
            kafka=spec.kafka_address if spec.kafka_port else "",
        ))
    return out


def running_state(data_dir: Path) -> ClusterState | None:
    """The recorded cluster if all its brokers run; None if none is recorded or none runs.

    A cluster with only some brokers alive is an error the user must resolve (``dev down``).
    """
    state = load_state(data_dir)
    if state is None:
        return None
    alive = [is_our_broker(b.pid) for b in state.brokers]
    if all(alive):
        return state
    if any(alive):
        raise CliError(
            f"the dev cluster in {data_dir} is only partly running; stop it with "
            f"{strom_invocation()} dev down --data-dir {data_dir}, then start it again"
        )
    return None


def raise_internal_replication(state: ClusterState, timeout: float,
                               progress: Progress = _quiet) -> int:
    """Raise ``__consumer_offsets`` to ``min(offsets.topic.replication.factor, brokers)``
    replicas after brokers were added; wait (bounded) until the reassignment is done.

    Returns how many partitions it moved (0: nothing to do, e.g. no group ever ran). Kafka
    leaves this to the administrator (``kafka-reassign-partitions``); the same reassignment by
    hand is ``strom reassign execute`` with a plan naming more replicas.
    """
    from strom.client import Admin
    from strom.client.reassign_plan import OFFSETS_TOPIC, raise_replication

    wanted = int(state.overrides.get("offsets.topic.replication.factor", DEFAULT_OFFSETS_RF))
    deadline = time.monotonic() + timeout
    with Admin(state.bootstrap, request_timeout_ms=max(1000, int(timeout * 1000))) as admin:
        if OFFSETS_TOPIC not in admin.list_topics(include_internal=True):
            return 0
        (desc,) = admin.describe_topics([OFFSETS_TOPIC], include_internal=True)
        current = {(OFFSETS_TOPIC, p.partition): list(p.replicas) for p in desc.partitions}
        plan = raise_replication(current, [b.broker_id for b in state.brokers], wanted)
        if not plan:
            return 0
        before = min(len(current[k]) for k in plan)
        after = min(len(v) for v in plan.values())
        progress(f"raising {OFFSETS_TOPIC} from replication factor {before} to {after} "
                 f"(a reassignment of {len(plan)} partitions, for the added brokers)")
        admin.alter_partition_reassignments(plan)
        while admin.list_partition_reassignments([OFFSETS_TOPIC]):
            if time.monotonic() > deadline:
                raise CliError(f"the reassignment raising {OFFSETS_TOPIC}'s replication factor "
                               f"is still running after {timeout:.0f} s; follow it with strom "
                               f"reassign list --bootstrap-server {state.bootstrap}")
            time.sleep(0.2)
        progress(f"{OFFSETS_TOPIC} now has replication factor {after}")
        return len(plan)
