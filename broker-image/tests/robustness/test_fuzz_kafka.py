"""The Kafka-protocol listener of a real broker, fuzzed (seeded, so CI is repeatable): for every
API and version it serves, well-typed requests with hostile field values, the same requests
mutated byte by byte, random bytes; plus targeted frames - negative, empty, huge and short size
prefixes, truncated headers, unknown API keys, unsupported versions, ApiVersions from the future;
and every declared length (string, bytes, records, array count, tagged field) of valid requests
of every API and version, inflated beyond the bytes left (parsed in a subprocess first, where a
frame kio's native reader would allocate for could only kill that process).

Every case is sent on a connection followed by a valid ApiVersions request (pipelined), and the
broker must, as Kafka's ``SocketServer`` does, either answer both in order (the case at most
once, then the probe) or close the connection - never answer out of order, never leave a
connection hanging (except the APIs that wait by design: Fetch, JoinGroup, SyncGroup), never
crash. After every chunk of cases a fresh connection's Metadata request must be answered; after
every API the broker is alive and ready, its log holds no traceback from the Kafka front, and
the logs read back what was acknowledged: ``kfuzz-verify`` (written only by the test) exactly,
``kfuzz-a`` (which fuzzed Produce requests name) every offset a fuzzed Produce was told it wrote
and nothing that does not decode - no poison batch is ever stored. Destructive APIs (delete,
alter, reassign, elect) never see the checked topics' names.

Cases per API: ``STROM_KAFKA_FUZZ_CASES`` (default 500; every API in the listener's table, 32
today: 16,000 cases plus the targeted ones); the count and the time are printed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import io
import os
import random
import struct
import subprocess
import sys
import time
import typing
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kio.serial import entity_reader, entity_writer

from strom.broker.kafka.apis import APIS, SUPPORTED
from strom.broker.kafka.declared_lengths import check_lengths, length_fields
from strom.broker.kafka.frames import (
    Reject,
    Request,
    parse_request,
    request_type,
    response_type,
)
from strom.protocol.batch import iter_headers
from strom.protocol.records import decode_batch_lists, encode_batch
from strom.protocol.v1 import admin_pb2, broker_pb2
from strom.testing import BrokerProcess
from strom.testing.grpc_reads import fetch_all
from strom.transport.v1 import admin_pb2_grpc, broker_pb2_grpc

pytestmark = pytest.mark.integration

CASES = int(os.environ.get("STROM_KAFKA_FUZZ_CASES", "500"))
SEED = 13
WORKERS = 12
CHUNK = 250
CASE_TIMEOUT_S = 5.0
PARTITIONS = 2
CHECKED = ("kfuzz-a", "kfuzz-verify")
WAITS = {1, 11, 14}  # Fetch, JoinGroup, SyncGroup: an answer may come only after a timeout
PRODUCE = 0
READERS = {0, 1, 2, 3, 8, 9, 23, 32, 46, 75}
"""APIs that may name kfuzz-a: they read it, commit offsets or (Produce) append, accounted."""
PROBE_CORRELATION = 0x5EED
MAX_REQUEST_BYTES = 2**31 - 1
LOG_LIMIT_BYTES = 200_000


def _frame(key: int, version: int, correlation: int, body: Any) -> bytes:
    """A size-prefixed request frame (the header version the body's schema names)."""
    header_type = type(body).__header_schema__
    fields = {f.name for f in dataclasses.fields(header_type)}
    values: dict[str, Any] = {"request_api_key": key, "request_api_version": version,
                              "correlation_id": correlation}
    if "client_id" in fields:
        values["client_id"] = "fuzz"
    buffer = io.BytesIO()
    entity_writer(header_type)(buffer, header_type(**values))
    entity_writer(type(body))(buffer, body)
    data = buffer.getvalue()
    return struct.pack(">i", len(data)) + data


def _probe() -> bytes:
    return _frame(18, 3, PROBE_CORRELATION, request_type(18, 3)(
        client_software_name="fuzz", client_software_version="1"))


# ---- well-typed requests with hostile values ---------------------------------------------------


class Values:
    """Random values of each Kafka wire type, biased to the edges."""

    def __init__(self, rng: random.Random, key: int) -> None:
        self.rng = rng
        self.names = ["kfuzz-other", "kfuzz-doomed", "kfuzz-g", "", "..", "__consumer_offsets",
                      "x" * 300, "t\x00", "retention.ms", "cleanup.policy", "-1", "0",
                      "min.insync.replicas", "consumer", "range"]
        if key in READERS:
            self.names += ["kfuzz-a"] * 4
        self.batch = encode_batch([(b"k", b"v" * 10) for _ in range(2)])

    def int_(self, bits: int) -> int:
        r = self.rng
        low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        return r.choice([0, 1, -1, 2, 3, low, high, r.randint(low, high), r.randint(-3, 100)])

    def string(self) -> str:
        r = self.rng
        if r.random() < 0.8:
            return r.choice(self.names)
        return "".join(chr(r.randrange(32, 0x2FF)) for _ in range(r.randrange(0, 20)))

    def records(self) -> bytes:
        r = self.rng
        choice = r.randrange(6)
        if choice == 0:
            return self.batch[: r.randrange(len(self.batch))]
        if choice == 1:
            return self.batch + r.randbytes(r.randrange(1, 8))
        if choice == 2:
            return r.randbytes(r.randrange(0, 80))
        if choice == 3:
            data = bytearray(self.batch)
            data[r.randrange(len(data))] ^= 1 << r.randrange(8)
            return bytes(data)
        return self.batch

    def value(self, kafka_type: str) -> Any:
        r = self.rng
        if kafka_type in ("int8", "int16", "int32", "int64"):
            return self.int_(int(kafka_type[3:]))
        if kafka_type in ("uint16", "uint32", "uint64"):
            return r.choice([0, 1, 2 ** int(kafka_type[4:]) - 1, r.randrange(2 ** 16)])
        if kafka_type == "float64":
            return r.choice([0.0, -1.0, 1e308, r.random()])
        if kafka_type == "bool":
            return r.random() < 0.5
        if kafka_type == "string":
            return self.string()
        if kafka_type == "bytes":
            return r.randbytes(r.randrange(0, 40))
        if kafka_type == "records":
            return self.records()
        if kafka_type == "uuid":
            return r.choice([uuid.UUID(int=0), uuid.UUID(int=r.getrandbits(128))])
        if kafka_type == "timedelta_i32":
            return datetime.timedelta(milliseconds=r.choice(
                [0, 1, 10, 100, r.randrange(0, 3000), 2**31 - 1]))
        if kafka_type == "timedelta_i64":
            return datetime.timedelta(milliseconds=r.choice([0, 1, 1000, -1, 2**40]))
        if kafka_type == "datetime_i64":
            return datetime.datetime.fromtimestamp(r.randrange(0, 2**31), datetime.UTC)
        raise LookupError(f"no value for Kafka type {kafka_type!r}")

    def entity(self, cls: type[Any], depth: int = 0) -> Any:
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            values[f.name] = self.field(f, hints[f.name], depth)
        return cls(**values)

    def field(self, f: dataclasses.Field[Any], hint: Any, depth: int) -> Any:
        r = self.rng
        args = typing.get_args(hint)
        optional = type(None) in args
        if optional and r.random() < 0.15:
            return None
        kafka_type = f.metadata.get("kafka_type")
        inner = [a for a in args if a is not type(None)]
        origin = typing.get_origin(inner[0] if optional and inner else hint)
        if origin is tuple:  # an array: of entities or of primitives
            element = typing.get_args(inner[0] if optional and inner else hint)[0]
            count = 0 if depth > 2 else r.choice([0, 1, 1, 2, 3])
            if dataclasses.is_dataclass(element):
                return tuple(self.entity(element, depth + 1) for _ in range(count))  # type: ignore[arg-type]
            assert kafka_type is not None, f.name
            return tuple(self.value(kafka_type) for _ in range(count))
        target = inner[0] if optional and inner else hint
        if dataclasses.is_dataclass(target):
            return self.entity(target, depth + 1)  # type: ignore[arg-type]
        if kafka_type == "error_code":
            from kio.schema.errors import ErrorCode
            return r.choice(list(ErrorCode))
        assert kafka_type is not None, f"{f.name}: {hint}"
        return self.value(kafka_type)


def _seed_bodies(key: int, version: int, values: Values) -> list[Any]:
    """A few valid requests of one API version (Produce to the accounted topic mainly)."""
    cls = request_type(key, version)
    out = [values.entity(cls) for _ in range(3)]
    if key == PRODUCE:
        hints = typing.get_type_hints(cls)
        topic_cls = typing.get_args(hints["topic_data"])[0]
        part_cls = typing.get_args(typing.get_type_hints(topic_cls)["partition_data"])[0]
        topic_field = "name" if "name" in {f.name for f in dataclasses.fields(topic_cls)} else None
        if topic_field is not None:
            for acks in (1, -1):
                out.append(cls(transactional_id=None, acks=acks,
                               timeout=datetime.timedelta(seconds=1),
                               topic_data=(topic_cls(name="kfuzz-a", partition_data=tuple(
                                   part_cls(index=p, records=values.batch)
                                   for p in range(PARTITIONS))),)))
    return out


# ---- mutation ---------------------------------------------------------------------------------


def _mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        kind = rng.randrange(5)
        at = rng.randrange(len(out) + 1)
        extra = rng.randbytes(rng.randrange(1, 6))
        if kind == 0 and out:
            out[at % len(out)] ^= 1 << rng.randrange(8)
        elif kind == 1:
            out[at:at] = extra
        elif kind == 2:
            del out[at:at + 1 + rng.randrange(8)]
        elif kind == 3:
            del out[max(at, 8):]
        else:
            out[at:at + len(extra)] = extra
    return bytes(out)


def _reframe(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def cases_for(key: int, rng: random.Random) -> list[bytes]:
    """``CASES`` size-prefixed frames for one API (valid framing, hostile content)."""
    low, high = SUPPORTED[key]
    values = Values(rng, key)
    seeds = [_frame(key, v, rng.randrange(2**31), body)
             for v in range(low, high + 1) for body in _seed_bodies(key, v, values)]
    out = list(seeds)
    while len(out) < CASES:
        roll = rng.random()
        if roll < 0.3:
            version = rng.randrange(low, high + 1)
            body = values.entity(request_type(key, version))
            out.append(_frame(key, version, rng.randrange(2**31), body))
        elif roll < 0.9:
            out.append(_reframe(_mutate(rng.choice(seeds)[4:], rng)))
        else:
            head = struct.pack(">hhi", key, rng.randrange(low, high + 1), 7)
            out.append(_reframe(head + rng.randbytes(rng.randrange(0, 120))))
    return out[:CASES]


def targeted_cases() -> list[bytes]:
    """Frames Kafka answers by closing (or with its ApiVersions fallback)."""
    good = _frame(18, 3, 5, request_type(18, 3)(client_software_name="fuzz",
                                                  client_software_version="1"))[4:]
    out = [
        struct.pack(">i", -1), struct.pack(">i", -(2**31)), struct.pack(">i", 0),
        struct.pack(">i", MAX_REQUEST_BYTES),  # far above socket.request.max.bytes
        struct.pack(">i", 3) + b"\x00\x12\x00",  # shorter than a request header
        struct.pack(">i", 9) + good[:9],  # a header cut in its client id
        _reframe(good[:8]),  # key, version, correlation id and nothing else
        _reframe(struct.pack(">hhi", 18, 99, 5) + good[8:]),  # ApiVersions from the future
        _reframe(struct.pack(">hhi", 18, -1, 5) + good[8:]),
    ]
    for key in (-1, 1000, 9999, 32767, -32768, 4, 5, 6, 7, 21, 22, 24, 25, 26):
        if key not in SUPPORTED:
            out.append(_reframe(struct.pack(">hhi", key, 0, 5) + good[8:]))
    for key, (low, high) in SUPPORTED.items():
        for version in {low - 1, high + 1, -1, 32767} - {v for v in range(low, high + 1)}:
            if key == 18 and version > high:
                continue  # the fallback, covered above
            out.append(_reframe(struct.pack(">hhi", key, version, 5) + good[8:]))
    return out


# ---- the broker and the bookkeeping ----------------------------------------------------------


class Outcome:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.failures: list[str] = []
        self.acked: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
        self.unaccounted: dict[int, int] = {p: 0 for p in range(PARTITIONS)}
        """Records per partition of kfuzz-a that Produce requests without a usable answer
        (acks=0, a partition named twice) may have written: the most the log may hold beyond
        what was acknowledged."""

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1


class Target:
    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.channel = grpc.insecure_channel(broker.bootstrap)
        self.stub: Any = broker_pb2_grpc.BrokerStub(self.channel)  # type: ignore[no-untyped-call]
        self.admin: Any = admin_pb2_grpc.AdminStub(self.channel)  # type: ignore[no-untyped-call]
        self.outcome = Outcome()
        self.verify: list[bytes] = []
        self.cases = 0

    def produce_verify(self, value: bytes) -> None:
        response = self.stub.Produce(broker_pb2.ProduceRequest(acks=-1, partitions=[
            broker_pb2.PartitionProduceData(topic="kfuzz-verify", partition=0,
                                            records=encode_batch([(None, value)]))]), timeout=10)
        assert response.partitions[0].error_code == 0, response.partitions[0].error_message
        self.verify.append(value)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    broker = BrokerProcess(tmp_path_factory.mktemp("kfuzz"),
                           config={"group.initial.rebalance.delay.ms": "0"})
    try:
        broker.start()
        t = Target(broker)
        created = t.admin.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[
            admin_pb2.NewTopic(name=n, num_partitions=PARTITIONS, replication_factor=1)
            for n in (*CHECKED, "kfuzz-other", "kfuzz-doomed")]), timeout=10)
        assert all(r.error_code == 0 for r in created.results), created
        t.produce_verify(b"before")
        yield t
        t.channel.close()
    finally:
        broker.stop()


def _records(data: bytes | memoryview | None) -> int:
    """Records in the whole batches of ``data`` (0 if they do not even frame)."""
    try:
        return sum(h.last_offset_delta + 1 for h in iter_headers(data or b""))
    except Exception:
        return 0


def _unanswered(outcome: Outcome, request: Request) -> None:
    for topic in request.body.topics:  # a produce_request.ProduceBody
        if topic.name == "kfuzz-a":
            for part in topic.partitions:
                if part.partition in outcome.unaccounted:
                    outcome.unaccounted[part.partition] += _records(part.records)


def _account(outcome: Outcome, request: Request, answer: bytes) -> None:
    """Offsets a fuzzed Produce was told it wrote to kfuzz-a."""
    body = request.body
    sent: dict[int, bytes] = {}
    for topic in body.topics:  # v13 names topics by id: fuzzed ids never name kfuzz-a
        if topic.name != "kfuzz-a":
            continue
        for part in topic.partitions:
            if part.partition in sent and part.partition in outcome.unaccounted:  # which one?
                outcome.unaccounted[part.partition] += _records(part.records) + _records(
                    sent[part.partition])
            sent[part.partition] = bytes(part.records or b"")
    if not sent:
        return
    if int(body.acks) == 0:
        _unanswered(outcome, request)
        return
    cls = response_type(PRODUCE, request.api_version)
    _, offset = entity_reader(cls.__header_schema__)(answer, 0)
    response, _ = entity_reader(cls)(answer, offset)
    for topic in response.responses:
        if getattr(topic, "name", None) != "kfuzz-a":
            continue
        for part in topic.partition_responses:
            if int(part.error_code) != 0 or part.index not in sent or part.base_offset < 0:
                continue
            count = _records(sent[part.index])
            outcome.acked.setdefault(part.index, set()).update(
                range(part.base_offset, part.base_offset + count))


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


class Connection:
    def __init__(self, port: int) -> None:
        self.port = port
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.streams is None:
            self.streams = await asyncio.open_connection("127.0.0.1", self.port)
        return self.streams

    def drop(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


async def run_case(conn: Connection, frame: bytes, outcome: Outcome) -> None:
    """Send one case and the probe; classify what the broker did."""
    parsed = parse_request(frame[4:], SUPPORTED) if len(frame) >= 4 else None
    request = parsed if isinstance(parsed, Request) else None
    reader, writer = await conn.open()
    writer.write(frame + _probe())
    answers: list[bytes] = []
    try:
        async with asyncio.timeout(CASE_TIMEOUT_S):
            await writer.drain()
            while True:
                answer = await _read_frame(reader)
                answers.append(answer)
                if struct.unpack_from(">i", answer)[0] == PROBE_CORRELATION:
                    break
    except asyncio.IncompleteReadError as exc:  # the broker closed the connection
        conn.drop()
        if exc.partial or answers:
            outcome.failures.append(f"answered {len(answers)} then closed mid-frame: "
                                    f"{frame[:200].hex()}")
        outcome.count("closed")
        return
    except ConnectionError:
        conn.drop()
        outcome.count("closed")
        return
    except TimeoutError:
        conn.drop()
        if request is not None and request.api_key in WAITS:
            outcome.count("waited")
            return
        outcome.failures.append(f"no answer and no close within {CASE_TIMEOUT_S}s "
                                f"({len(answers)} answers): {frame[:200].hex()}")
        return
    if len(answers) > 2:
        outcome.failures.append(f"{len(answers)} answers to one request: {frame[:200].hex()}")
        return
    outcome.count("answered" if len(answers) == 2 else "no answer (acks=0)")
    if request is not None and request.api_key == PRODUCE:
        if len(answers) == 2:
            _account(outcome, request, answers[0])
        else:
            _unanswered(outcome, request)


async def run_cases(port: int, frames: list[bytes], outcome: Outcome) -> None:
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for frame in frames:
        queue.put_nowait(frame)

    async def worker() -> None:
        conn = Connection(port)
        try:
            while not queue.empty():
                await run_case(conn, queue.get_nowait(), outcome)
        finally:
            conn.drop()

    await asyncio.gather(*(worker() for _ in range(WORKERS)))


async def healthy(port: int) -> bool:
    """A fresh connection's Metadata request is answered."""
    body = request_type(3, 12)(topics=None, allow_auto_topic_creation=False,
                               include_topic_authorized_operations=False)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        async with asyncio.timeout(10):
            writer.write(_frame(3, 12, 99, body))
            answer = await _read_frame(reader)
        return struct.unpack_from(">i", answer)[0] == 99
    finally:
        writer.close()


def stored_offsets(stub: Any, topic: str, partition: int) -> set[int]:
    """Every offset stored in a partition, each batch checked as a consumer checks it (CRC,
    strict framing, every record decoded): a poison batch fails here."""
    out: set[int] = set()
    offset = 0
    while True:
        response = stub.Fetch(broker_pb2.FetchRequest(min_bytes=0, partitions=[
            broker_pb2.FetchPartition(topic=topic, partition=partition, fetch_offset=offset)]),
            timeout=10)
        part = response.partitions[0]
        assert part.error_code == 0, part.error_message
        batches = list(decode_batch_lists(part.records, topic, partition, offset,
                                          check_crcs=True, strict=True))
        records = [r for batch in batches for r in batch]
        if not records:
            return out
        out.update(r.offset for r in records)
        offset = records[-1].offset + 1


def _check(target: Target, name: str) -> None:
    broker = target.broker
    assert broker.is_alive(), broker.stderr_tail()
    assert broker.is_ready(), f"not ready after fuzzing {name}"
    outcome = target.outcome
    assert not outcome.failures, "\n".join(outcome.failures[:10])
    target.produce_verify(f"after-{name}".encode())
    assert [r.value for r in fetch_all(target.stub, "kfuzz-verify", 0)] == target.verify
    for p in range(PARTITIONS):
        found = stored_offsets(target.stub, "kfuzz-a", p)
        missing = outcome.acked[p] - found
        assert not missing, (p, sorted(missing)[:20])
        extra = found - outcome.acked[p]
        assert len(extra) <= outcome.unaccounted[p], (p, sorted(extra)[:20])
    stderr = Path(broker.stderr_path).read_text(errors="replace")
    failures = [line for line in stderr.splitlines()
                if "ERROR" in line and ("strom.broker.kafka" in line or "asyncio" in line)]
    assert not failures and "Traceback" not in stderr, "\n".join(failures[:5]) or stderr[-3000:]
    # client-caused lines are rate-limited (0.9 MB for 8,500 cases before)
    assert len(stderr) < LOG_LIMIT_BYTES, f"{len(stderr)} bytes of broker log: {stderr[-2000:]}"


def _run(target: Target, name: str, frames: list[bytes]) -> None:
    port = target.broker.kafka_port
    started = time.monotonic()

    async def main() -> None:
        for at in range(0, len(frames), CHUNK):
            await run_cases(port, frames[at:at + CHUNK], target.outcome)
            assert await healthy(port), f"the broker stopped answering while fuzzing {name}"

    asyncio.run(main())
    target.cases += len(frames)
    _check(target, name)
    print(f"kafka {name}: {len(frames)} cases in {time.monotonic() - started:.1f}s; so far "
          f"{target.cases}, {target.outcome.counts}, acknowledged offsets of kfuzz-a "
          f"{ {p: len(o) for p, o in target.outcome.acked.items()} }, unacknowledged records "
          f"that produce "
          f"may have written {target.outcome.unaccounted}")


def test_fuzz_targeted_frames(target: Target) -> None:
    frames = targeted_cases()
    _run(target, "targeted", frames)
    # every one closes the connection, except the ApiVersions fallback (KIP-511), answered
    assert target.outcome.counts == {"closed": len(frames) - 1, "answered": 1}


#: Parses length-prefixed frames from stdin one by one, printing each index first: the frame
#: that kills it is the last index printed. Its address space is capped (4 GiB): with the
#: kernel's overcommit on (``vm.overcommit_memory=1``, as the kubelet leaves it) a reader's
#: allocation of 16 GB succeeds untouched and would hide the bug CI's fresh machine aborted on.
_PARSER = """
import resource, struct, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from strom.broker.kafka.apis import SUPPORTED
from strom.broker.kafka.frames import parse_request
data = sys.stdin.buffer.read()
at = index = 0
while at < len(data):
    (size,) = struct.unpack_from(">i", data, at)
    frame = data[at + 4:at + 4 + size]
    print(index, flush=True)
    parse_request(frame[4:], SUPPORTED) if len(frame) >= 4 else None
    at += 4 + size
    index += 1
print("done", flush=True)
"""


def process_killers(frames: list[bytes], most: int = 5) -> list[bytes]:
    """The frames whose parsing kills a process (the first ``most``; each found in a fresh
    subprocess, then the rest parsed on): kio 0.6.5's native reader aborted the process on a
    length prefix larger than memory (``Vec::with_capacity``) before ``declared_lengths``
    checked every length."""
    killers: list[bytes] = []
    start = 0
    while start < len(frames) and len(killers) < most:
        rest = frames[start:]
        stdin = b"".join(struct.pack(">i", len(f)) + f for f in rest)
        run = subprocess.run([sys.executable, "-c", _PARSER], input=stdin, capture_output=True,
                             timeout=300, check=False)
        lines = run.stdout.decode().split()
        if lines and lines[-1] == "done":
            break
        last = int(lines[-1]) if lines and lines[-1].isdigit() else 0
        killers.append(rest[last])
        start += last + 1
    return killers


@pytest.mark.parametrize("key", sorted(SUPPORTED), ids=lambda k: APIS[k].name)
def test_fuzz_api(target: Target, key: int) -> None:
    _run(target, APIS[key].name, cases_for(key, random.Random(f"{SEED}-{key}")))


#: OffsetForLeaderEpoch v4 whose topics array declares 26,093,992,032 elements (found by
#: test_fuzz_api): kio 0.6.5 aborted the process allocating them ("memory allocation of
#: 208751936256 bytes failed").
HUGE_NAME_FRAME = bytes.fromhex(
    "0000003b00170004a0ad8465000466757a7a000000003ae1f0ca9a61bbcf130000000299ea063b00b795"
    "00000000000044000009636f6e73756d6572")


def test_a_huge_declared_length_is_refused(target: Target) -> None:
    """What Kafka's parser does: a declared length beyond the bytes left is a malformed
    request (the connection is closed), never an allocation of what it declares; the broker
    stays up and answers a new connection (this frame aborted it before)."""
    frames = [HUGE_NAME_FRAME]
    assert process_killers(frames) == []
    before = dict(target.outcome.counts)
    _run(target, "huge declared length", frames)
    assert target.outcome.counts.get("closed", 0) == before.get("closed", 0) + 1
    assert asyncio.run(healthy(target.broker.kafka_port))


# ---- every declared length of every API and version, inflated -------------------------------

INFLATED_PER_API = int(os.environ.get("STROM_KAFKA_FUZZ_INFLATED", "150"))
"""Inflated-length frames sent per API (a seeded sample; all are parsed in a subprocess)."""


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _varint_width(data: bytes, at: int) -> int:
    width = 1
    while data[at + width - 1] >= 0x80:
        width += 1
    return width


def inflated_lengths(key: int, rng: random.Random) -> list[tuple[bytes, bool]]:
    """(size-prefixed frame, whether it must be refused): valid requests of every version of
    one API, each with one declared length (string, bytes, records, array count, tagged-field
    count or size, in the header or the body) replaced by a larger one - one more than the
    bytes left, the most its encoding holds, and (varints) exactly the bytes left."""
    low, high = SUPPORTED[key]
    values = Values(rng, key)
    out: list[tuple[bytes, bool]] = []
    for version in range(low, high + 1):
        cls = request_type(key, version)
        for body in _seed_bodies(key, version, values)[:2]:
            frame = _frame(key, version, rng.randrange(2**31), body)[4:]
            for at, encoding in length_fields(frame, cls.__header_schema__, cls) or ():
                width = {"int16": 2, "int32": 4}.get(encoding) or _varint_width(frame, at)
                rest = frame[at + width:]
                left = len(rest)
                if encoding == "int16":
                    news = [(struct.pack(">h", n), n) for n in {left + 1, 2**15 - 1} if n < 2**15]
                elif encoding == "int32":
                    news = [(struct.pack(">i", n), n) for n in (left + 1, 2**31 - 1)]
                else:  # compact lengths hold n + 1; a tagged-field count or size holds n
                    news = [(_uvarint(n), n - 1) for n in (left + 1, left + 2, 2**35 - 1)]
                for new, declared in news:
                    out.append((_reframe(frame[:at] + new + rest), declared > left))
    return out


def test_no_inflated_length_kills_a_parsing_process() -> None:
    """Every declared length of every served API and version, inflated, parsed in a
    subprocess first (a frame kio would allocate for aborts that process, not this one); then
    each one that declares more than is left is refused before kio reads it."""
    cases = [case for key in sorted(SUPPORTED)
             for case in inflated_lengths(key, random.Random(f"{SEED}-lengths-{key}"))]
    frames = [frame for frame, _ in cases]
    killers = process_killers(frames)
    assert not killers, f"{len(killers)} frames kill the parsing process: " \
                        f"{[f.hex()[:120] for f in killers[:5]]}"
    for frame, must_refuse in cases:
        parsed = parse_request(frame[4:], SUPPORTED)
        if must_refuse:  # by the length check, before kio's reader sees it
            cls = request_type(*struct.unpack_from(">hh", frame, 4))
            assert check_lengths(frame[4:], cls.__header_schema__, cls) is not None, \
                frame.hex()[:200]
            assert isinstance(parsed, Reject), (frame.hex()[:200], parsed)
    print(f"inflated lengths: {len(frames)} frames, "
          f"{sum(m for _, m in cases)} declaring more than is left, all refused")


@pytest.mark.parametrize("key", sorted(SUPPORTED), ids=lambda k: APIS[k].name)
def test_fuzz_inflated_lengths(target: Target, key: int) -> None:
    cases = inflated_lengths(key, random.Random(f"{SEED}-lengths-{key}"))
    frames = [frame for frame, _ in cases]
    sample = random.Random(f"{SEED}-sample-{key}").sample(
        frames, min(INFLATED_PER_API, len(frames)))
    _run(target, f"{APIS[key].name} inflated lengths", sample)
