"""What confluent-kafka's keyed produce over 1,000 partitions can reach on this machine whatever
the broker does per request: librdkafka against *floor* responders beside Strom (issue 21 item 1).

Why it exists: librdkafka sends one partition per Produce request (its issue 1700), so keyed
produce of 200,000 records over 1,000 partitions is ~2,000 requests against ~50-150 over 10, and
on two cores shared by client and broker every microsecond either side spends per request shows
in the ratio. Whether the gap to issue 21's 0.7x is the broker's (Strom: Python validation,
append, answer) or the client's own per-request work cannot be told from Strom's runs alone, so
this benchmark measures the same produce against two responders that do only what any broker
must do per request and nothing a broker chooses to do: read the frame, write the batch with one
``write`` to its partition's file (opened when the topic is first named, as a broker creates
a partition's files with the topic), answer with the next base offset; the answers to every
request of one read in one write (as Strom's listener does). No validation, no index, no
producer state, no metrics, nothing Kafka-semantic beyond the answer.

- ``floor-python``: :class:`Floor` on an asyncio protocol, in its own process (its CPU measured
  apart, no GIL shared with the client). It answers ApiVersions exactly as Strom's listener
  does (same advertised APIs, so librdkafka picks the same versions and record format) and
  Metadata with the broker's own builders (one broker, itself, leading every partition; a
  topic named ``floor-<N>-...`` has N partitions), answers kept by request.
- ``floor-go``: ``produce_floor_go/main.go`` (standard library only, built here with the local
  Go toolchain), so the floor's own per-request CPU is a compiled broker's: it reads Produce
  v9-v12 and writes the answers itself (the same bytes as the Python floor's, a test checks),
  and relays ApiVersions and Metadata to a Python floor that names the Go one as the broker.

They are not brokers and nothing else uses them: they are the peers that bound what any broker
could give this client here. ``python -m benchmarks.produce_floor`` runs the partition-scale
benchmark's own keyed produce (:func:`benchmarks.partition_scale.produce_keyed_kafka`:
librdkafka's defaults, acks=1, 200,000 keyed 100 B records) over 10 and 1,000 partitions
against Strom's Kafka listener and both floors, alternated (N, then peer, within each repeat),
medians of ``--repeats``, each peer's CPU and Produce requests; a table (each peer's ratio to
its own 10-partition rate, and its rate against the floors' at the same N) and ``--json``.
Figures: docs/decisions.md, "Keyed produce against floor responders".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from strom.broker.kafka import api_versions
from strom.broker.kafka.apis import ADVERTISED as STROM_ADVERTISED
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.broker.kafka.frames import (
    Request,
    ResponseTemplate,
    encode_response,
    parse_request,
)
from strom.broker.kafka.metadata import KEY as METADATA
from strom.broker.kafka.metadata import VERSIONS as METADATA_VERSIONS
from strom.broker.kafka.produce import KEY as PRODUCE
from strom.broker.kafka.produce import VERSIONS as PRODUCE_VERSIONS
from strom.testing.process import ManagedProcess
from strom.testing.tools import find_go

_SIZE = struct.Struct(">i")
_KEY = struct.Struct(">h")
#: What the floor serves (key -> versions).
SERVED = {api_versions.KEY: api_versions.VERSIONS, METADATA: METADATA_VERSIONS,
          PRODUCE: PRODUCE_VERSIONS}
#: What it says it serves: what Strom's Kafka listener says, so librdkafka picks the same
#: versions and features (its record format v2 needs Fetch v4 advertised beside Produce v3:
#: with only the three served APIs advertised it wrote the old message format, ~20% more
#: client CPU at 10 partitions).
ADVERTISED = STROM_ADVERTISED
GO_SOURCE = Path(__file__).parent / "produce_floor_go"
NAMESPACE = uuid.UUID("2f6d6c2e-3a63-4c53-9e51-0c2f1b7d1a21")


def partitions_of(topic: str) -> int:
    """A floor topic's partition count, from its name ``floor-<N>-...``; 0: unknown topic."""
    parts = topic.split("-")
    if len(parts) >= 2 and parts[0] == "floor" and parts[1].isdigit():
        return int(parts[1])
    return 0


def topic_id(topic: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, topic)


class Floor:
    """The responder's state: each partition's open file and next offset, the topics' ids, the
    answer templates. Pure of sockets: :meth:`answer` maps one request frame to its answer."""

    def __init__(self, root: Path, host: str, port: int, advertise: Path | None = None) -> None:
        self.root = root
        self.host = host
        self.port = port
        self.advertise = advertise
        """A file holding the port Metadata names instead of ``port`` (the Go floor's)."""
        self.files: dict[tuple[str, int], int] = {}
        self.next_offset: dict[tuple[str, int], int] = {}
        self.names: dict[uuid.UUID, str] = {}
        self.templates: dict[tuple[int, str], ResponseTemplate] = {}
        self.answers: dict[bytes, bytes] = {}
        self.produce_requests = 0

    def close(self) -> None:
        for fd in self.files.values():
            os.close(fd)
        self.files.clear()

    def answer(self, frame: bytes) -> bytes | None:
        """The answer to one request frame (without its size); None: none (acks=0).
        ApiVersions and Metadata answers are kept by the request's bytes after its
        correlation id (a 1,000-partition Metadata answer costs kio ~8 ms to build: a real
        broker keeps it too) and only their correlation id rewritten."""
        if _KEY.unpack_from(frame)[0] != PRODUCE:
            kept = self.answers.get(frame[8:])
            if kept is not None:
                answer = bytearray(kept)
                _SIZE.pack_into(answer, 4, _SIZE.unpack_from(frame, 4)[0])
                return bytes(answer)
        parsed = parse_request(frame, SERVED)
        if not isinstance(parsed, Request):
            raise ValueError(f"the floor serves ApiVersions, Metadata and Produce: {parsed!r}")
        if parsed.api_key == PRODUCE:
            return self._produce(parsed)
        ctx = Context(None, parsed, "floor", ADVERTISED)  # type: ignore[arg-type]
        answer = encode_response(parsed.correlation_id, self._metadata(ctx)
                                 if parsed.api_key == METADATA else _api_versions(ctx))
        self.answers[frame[8:]] = answer
        return answer

    def _produce(self, request: Request) -> bytes | None:
        body = request.body
        if len(body.topics) != 1 or len(body.topics[0].partitions) != 1:
            raise ValueError("the floor answers one-partition Produce requests (librdkafka's)")
        data = body.topics[0]
        name = data.name or self.names[data.topic_id]
        part = data.partitions[0]
        key = (name, part.partition)
        fd = self.files.get(key)
        if fd is None:
            fd = self._open(key)
        records = part.records or b""
        if len(records) < 61 or records[16] != 2:
            raise ValueError("the floor reads record batches of format v2 only")
        os.write(fd, records)
        self.produce_requests += 1
        base = self.next_offset[key]
        # the record count of a v2 batch (Kafka's RecordBatch header: count at byte 57)
        self.next_offset[key] = base + _SIZE.unpack_from(records, 57)[0]
        if body.acks == 0:
            return None
        template = self.templates.get((request.api_version, name))
        if template is None:
            template = self.templates[(request.api_version, name)] = _produce_template(
                request, name, topic_id(name))
        return template.encode(request.correlation_id, part.partition, base, -1, 0)

    def _open(self, key: tuple[str, int]) -> int:
        path = self.root / f"{key[0]}-{key[1]}"
        fd = self.files[key] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.next_offset[key] = 0
        return fd

    def _metadata(self, ctx: Context) -> Any:
        wanted = ctx.body.topics or ()
        topics = []
        for t in wanted:
            name = t.name if getattr(t, "name", None) else self.names.get(t.topic_id, "")
            count = partitions_of(name)
            self.names[topic_id(name)] = name
            for p in range(count):  # "created" when first named, as Strom's exist once created
                if (name, p) not in self.files:
                    self._open((name, p))
            parts = tuple(ctx.build("MetadataResponsePartition", error_code=code(0),
                                    partition_index=p, leader_id=0, leader_epoch=0,
                                    replica_nodes=(0,), isr_nodes=(0,), offline_replicas=())
                          for p in range(count))
            topics.append(ctx.build("MetadataResponseTopic",
                                    error_code=code(0 if count else 3), name=name,
                                    topic_id=topic_id(name), is_internal=False,
                                    partitions=parts))
        port = int(self.advertise.read_text()) if self.advertise else self.port
        broker = ctx.build("MetadataResponseBroker", node_id=0, host=self.host, port=port,
                           rack=None)
        return ctx.build("MetadataResponse", throttle_time=NO_THROTTLE, brokers=(broker,),
                         error_code=code(0),
                         cluster_id="floor", controller_id=0, topics=tuple(topics))


def _api_versions(ctx: Context) -> Any:
    """The broker's own ApiVersions answer, for the floor's three APIs."""
    coroutine = api_versions.handle(ctx)
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("ApiVersions' handler waited")


def _produce_template(request: Request, name: str, tid: uuid.UUID) -> ResponseTemplate:
    """Successful one-partition answers of ``request``'s version (the broker's template)."""
    ctx = Context(None, request, "floor", ADVERTISED)  # type: ignore[arg-type]

    def make(values: list[int]) -> Any:
        partition, base, _append_time, log_start = values
        part = ctx.build("PartitionProduceResponse", index=partition, error_code=code(0),
                         base_offset=base, log_append_time=None, log_start_offset=log_start,
                         record_errors=(), error_message=None)
        topic = ctx.build("TopicProduceResponse", name=name, topic_id=tid,
                          partition_responses=(part,))
        return ctx.build("ProduceResponse", responses=(topic,), throttle_time=NO_THROTTLE)

    return ResponseTemplate(make, (4, 8, 8, 8))


class _Connection(asyncio.Protocol):
    """Frames in, answers out: every whole frame of a read answered, the answers in one write."""

    def __init__(self, floor: Floor) -> None:
        self.floor = floor
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        out: list[bytes] = []
        at = 0
        while len(buf) - at >= 4:
            size = _SIZE.unpack_from(buf, at)[0]
            if len(buf) - at - 4 < size:
                break
            try:
                answer = self.floor.answer(bytes(buf[at + 4:at + 4 + size]))
            except (ValueError, KeyError) as err:  # not what the floor serves: say so, close
                print(f"produce floor: closing a connection: {err}", file=sys.stderr)
                if self.transport is not None:
                    self.transport.close()
                return
            if answer is not None:
                out.append(answer)
            at += 4 + size
        del buf[:at]
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


async def serve(root: Path, port_file: Path, stop: asyncio.Event | None = None,
                advertise: Path | None = None) -> None:
    """Serve on a free port of 127.0.0.1 (written to ``port_file``) until ``stop`` is set
    (None: until SIGTERM); ``advertise``: see :attr:`Floor.advertise`."""
    loop = asyncio.get_running_loop()
    floor = Floor(root, "127.0.0.1", 0, advertise)
    server = await loop.create_server(lambda: _Connection(floor), "127.0.0.1", 0)
    floor.port = int(server.sockets[0].getsockname()[1])
    if stop is None:
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    count = root / "requests"
    port_file.write_text(str(floor.port))
    try:
        while not stop.is_set():  # the Produce count, for the benchmark's requests column
            count.write_text(str(floor.produce_requests))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.2)
    finally:
        server.close()
        floor.close()


@contextlib.contextmanager
def running_floor(root: Path, go_binary: Path | None = None, timeout_s: float = 30.0
                  ) -> Iterator[tuple[str, list[int]]]:
    """(bootstrap, PIDs) of the floor: the Python responder, and with ``go_binary`` the Go one
    in front of it (the bootstrap is then the Go floor's); their output in ``root/logs``,
    stopped by their PIDs on exit."""
    root.mkdir(parents=True, exist_ok=True)
    port_file, go_port = root / "port", root / "port-go"
    argv = [sys.executable, "-m", "benchmarks.produce_floor", "serve", "--root", str(root),
            "--port-file", str(port_file)]
    if go_binary is not None:
        argv += ["--advertise-port-file", str(go_port)]
    procs = [ManagedProcess(argv, root / "logs" / "floor-python.log", name="Python floor",
                            env={"PYTHONPATH": os.pathsep.join(sys.path)})]
    try:
        procs[0].start().wait_ready(lambda: _port(port_file) > 0, timeout_s)
        if go_binary is not None:
            procs.append(ManagedProcess(
                [str(go_binary), "-root", str(root), "-port-file", str(go_port), "-upstream",
                 f"127.0.0.1:{_port(port_file)}"], root / "logs" / "floor-go.log",
                name="Go floor"))
            procs[1].start().wait_ready(lambda: _port(go_port) > 0, timeout_s)
        yield f"127.0.0.1:{_port(go_port if go_binary else port_file)}", [p.pid for p in procs]
    finally:
        for proc in reversed(procs):
            proc.stop()


def _port(port_file: Path) -> int:
    """The port a floor wrote; 0 before it did."""
    text = port_file.read_text() if port_file.exists() else ""
    return int(text) if text else 0


def build_go_floor(out_dir: Path) -> Path:
    """The Go floor (``benchmarks/produce_floor_go``, standard library only), built with the
    local Go toolchain into ``out_dir``."""
    go = find_go()
    if go is None:
        raise RuntimeError("building the Go floor needs Go (1.24+ on PATH or /usr/local/go)")
    out = out_dir / "producefloor"
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}
    built = subprocess.run([go, "build", "-o", str(out), "."], cwd=GO_SOURCE, env=env,
                           capture_output=True, text=True, timeout=600, check=False)
    if built.returncode != 0:
        raise RuntimeError(f"building the Go floor failed: {built.stderr[-2000:]}")
    return out


@dataclass
class Row:
    """One peer's keyed produce over N partitions: medians of the repeats."""

    peer: str
    partitions: int
    produce_rps: float
    broker_cpu_s: float
    """The peer's processes' CPU seconds during the produce (both floors' for floor-go)."""
    client_cpu_s: float
    """The benchmark process's (the producer's calling thread and librdkafka's threads)."""
    requests: float
    """Produce requests the peer served during the produce."""


#: The peers: Strom's Kafka listener, the Python floor, the Go floor.
PEERS = ("strom", "floor-python", "floor-go")


def measure(counts: list[int], records: int, repeats: int, say: Any = print,
            peers: tuple[str, ...] = PEERS) -> list[Row]:
    """Keyed produce over each N against Strom's Kafka listener and the floors, alternated
    (N, then peer) within each repeat so each sees the same load; medians. A peer's CPU is
    its processes' (both floors' for the Go one: the Python floor answers its Metadata)."""
    from benchmarks.partition_scale import (
        cpu_seconds,
        create_topic,
        produce_keyed_kafka,
        produce_requests,
        settle,
        wait_segment_files,
    )
    from strom.testing import running_broker

    runs: dict[tuple[str, int], list[tuple[float, float, float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="strom-bench-floor-") as tmp, \
            contextlib.ExitStack() as stack:
        broker = stack.enter_context(running_broker(Path(tmp) / "strom", startup_timeout=600))
        floors: dict[str, tuple[str, list[int], Path]] = {}
        if "floor-python" in peers:
            root = Path(tmp) / "floor-python"
            floors["floor-python"] = (*stack.enter_context(running_floor(root)),
                                      root / "requests")
        if "floor-go" in peers:
            root = Path(tmp) / "floor-go"
            go = build_go_floor(Path(tmp))
            floors["floor-go"] = (*stack.enter_context(running_floor(root, go)),
                                  root / "requests-go")
        for rep in range(repeats):
            for n in counts:
                for peer in peers:
                    if peer == "strom":
                        topic = f"keyed-floor-cmp-{n}-{rep}"
                        create_topic(broker.bootstrap, topic, n)
                        wait_segment_files(broker.log_dir, topic, n)
                        pids, bootstrap = [broker.pid], broker.kafka_bootstrap
                        before_req = produce_requests(broker.metrics_url)
                    else:
                        topic = f"floor-{n}-{rep}"
                        bootstrap, pids, count_file = floors[peer]
                        before_req = _count(count_file)
                        _create_floor_topic(bootstrap, topic)
                    for pid in pids:
                        settle(pid)
                    b0, c0 = sum(map(cpu_seconds, pids)), time.process_time()
                    got = produce_keyed_kafka(bootstrap, topic, records)
                    b1, c1 = sum(map(cpu_seconds, pids)), time.process_time()
                    if peer == "strom":
                        req = produce_requests(broker.metrics_url) - before_req
                    else:
                        time.sleep(0.5)  # the floors write their count every 0.2 s
                        req = _count(count_file) - before_req
                    runs.setdefault((peer, n), []).append(
                        (got.records_per_s, b1 - b0, c1 - c0, req))
                    say(f"floor: rep {rep + 1}/{repeats} N={n} {peer}: "
                        f"{got.records_per_s:,.0f} rec/s, broker CPU {b1 - b0:.3f}s, "
                        f"client CPU {c1 - c0:.3f}s, {req:,.0f} requests")
    return [Row(peer, n, *(statistics.median(r[i] for r in rs) for i in range(4)))
            for (peer, n), rs in runs.items()]


def _create_floor_topic(bootstrap: str, topic: str) -> None:
    """Name ``topic`` to the floor (a Metadata request), which opens its partitions' files then,
    as a real broker creates them before the produce."""
    from confluent_kafka.admin import AdminClient

    AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)


def _count(path: Path) -> float:
    return float(path.read_text() or 0) if path.exists() else 0.0


def format_rows(rows: list[Row]) -> str:
    """A Markdown table: each peer's rate, its ratio to its own lowest N, and the ratio of
    Strom's rate to each floor's at the same N (how much of what a broker could get it gets)."""
    lowest = min(r.partitions for r in rows)
    base = {r.peer: r.produce_rps for r in rows if r.partitions == lowest}
    strom = {r.partitions: r.produce_rps for r in rows if r.peer == "strom"}
    lines = [f"| peer | partitions | records/s | vs its own N={lowest} | Strom's rate / this | "
             "broker CPU s | client CPU s | Produce requests |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (PEERS.index(r.peer), r.partitions)):
        versus = (f"{strom[r.partitions] / r.produce_rps:.2f}"
                  if r.partitions in strom and r.peer != "strom" else "-")
        lines.append(f"| {r.peer} | {r.partitions:,} | {r.produce_rps:,.0f} | "
                     f"{r.produce_rps / base[r.peer]:.2f}x | {versus} | {r.broker_cpu_s:.3f} | "
                     f"{r.client_cpu_s:.3f} | {r.requests:,.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.produce_floor", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    srv = sub.add_parser("serve", help="run the Python floor responder (the benchmark starts "
                                       "it; not for other use)")
    srv.add_argument("--root", type=Path, required=True,
                     help="directory of the partition files and the request count")
    srv.add_argument("--port-file", type=Path, required=True,
                     help="the bound port of 127.0.0.1 is written here")
    srv.add_argument("--advertise-port-file", type=Path, default=None,
                     help="Metadata names the port in this file (the Go floor's)")
    parser.add_argument("--counts", default="10,1000", help="partition counts (default 10,1000)")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7,
                        help="runs per N and peer, alternated (median); default 7")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help=f"comma-separated, of {', '.join(PEERS)}")
    parser.add_argument("--json", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    if args.command == "serve":
        asyncio.run(serve(args.root, args.port_file, advertise=args.advertise_port_file))
        return 0
    peers = tuple(p for p in args.peers.split(",") if p)
    unknown = [p for p in peers if p not in PEERS]
    if unknown or not peers:
        parser.error(f"--peers: {', '.join(unknown) or 'none given'}; choose from "
                     f"{', '.join(PEERS)}")
    try:
        counts = [int(c) for c in args.counts.split(",")]
    except ValueError:
        parser.error(f"--counts: {args.counts!r} is not a comma-separated list of integers")
    rows = measure(counts, args.records, args.repeats,
                   say=lambda m: print(m, file=sys.stderr, flush=True), peers=peers)
    print(format_rows(rows))
    if args.json is not None:
        from benchmarks.partition_scale import _write_json

        _write_json(args.json, {"records": args.records, "repeats": args.repeats,
                                "rows": [asdict(r) for r in rows]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
