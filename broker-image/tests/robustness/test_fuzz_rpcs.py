"""Every gRPC method of a real broker, fuzzed (hypothesis, derandomized so CI is repeatable):
random bytes, mutated valid requests and structurally valid messages with hostile field values.

Asserted for every case: the answer is never UNKNOWN or INTERNAL (a bug, not a bad request);
after each method the broker is alive and ready; at the end the logs read back exactly what was
acknowledged - the records produced to ``fuzz-verify`` before and after the fuzzing, and for
``fuzz-a`` (which fuzzed Produce requests write to) exactly the offsets that fuzzed Produce
calls were told were written. Methods that could legitimately destroy data (deleting or
reconfiguring topics, reassignments) never see the two checked topics' names.

Cases per method: ``STROM_FUZZ_CASES`` (default 2,000), made as ``EXAMPLES`` hypothesis
examples, each drawing ``DRAWN`` payloads and a seed from which ``VARIANTS`` further mutations
(or random bytes) of each are made - hypothesis is slow at drawing thousands of payloads, a
seeded ``random.Random`` is not - all sent concurrently (so a method that waits, such as
JoinGroup, does not serialize the run). Measured: 68,000 cases (34 methods then; 38 today,
76,000) took 66 s of CPU (test process and broker): about a minute on an idle 2-core runner,
3 minutes at load 15. The count and the time are printed.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.protocol.batch import iter_headers
from strom.protocol.records import encode_batch
from strom.protocol.v1 import admin_pb2, broker_pb2, group_pb2, replica_pb2
from strom.testing import BrokerProcess
from strom.testing.grpc_reads import fetch_all
from strom.transport.status import from_rpc_error
from strom.transport.v1 import admin_pb2_grpc, broker_pb2_grpc

from .grpc_methods import METHODS

pytestmark = pytest.mark.integration

CASES = int(os.environ.get("STROM_FUZZ_CASES", "2000"))
"""Cases per method (rounded to whole examples)."""
EXAMPLES = int(os.environ.get("STROM_FUZZ_EXAMPLES", "4"))
DRAWN = 10
"""Payloads hypothesis draws per example; each is sent with ``VARIANTS`` seeded mutations."""
VARIANTS = max(0, CASES // (EXAMPLES * DRAWN) - 1)
BATCH = DRAWN * (1 + VARIANTS)
CALL_TIMEOUT_S = 5.0
CHECKED = ("fuzz-a", "fuzz-verify")
PARTITIONS = 2

# Methods that may name fuzz-a: they read it or (Produce) append to it, which is accounted.
READERS = {"Produce", "Fetch", "ListOffsets", "Metadata", "DescribeTopics", "DescribeConfigs",
           "ListPartitionReassignments", "ReplicaFetch", "OffsetFetch", "OffsetCommit"}
BAD = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}


def _batch(n: int = 2) -> bytes:
    return encode_batch([(b"k", b"v" * 10) for _ in range(n)])


def _seeds(name: str) -> list[Message]:
    """A few valid requests per method (mutations start from these)."""
    topic = "fuzz-a" if name in READERS else "fuzz-other"
    seeds: dict[str, list[Message]] = {
        "Produce": [broker_pb2.ProduceRequest(acks=a, timeout_ms=1000, partitions=[
            broker_pb2.PartitionProduceData(topic="fuzz-a", partition=p, records=_batch())
            for p in range(PARTITIONS)]) for a in (1, -1, 0)],
        "Fetch": [broker_pb2.FetchRequest(max_wait_ms=10, partitions=[
            broker_pb2.FetchPartition(topic=topic, partition=0, fetch_offset=0,
                                      partition_max_bytes=4096)])],
        "ListOffsets": [broker_pb2.ListOffsetsRequest(partitions=[
            broker_pb2.ListOffsetsPartition(topic=topic, partition=0, timestamp=-1)])],
        "Metadata": [broker_pb2.MetadataRequest(topics=[topic])],
        "InitProducerId": [broker_pb2.InitProducerIdRequest(producer_id=-1, producer_epoch=-1)],
        "CreateTopics": [admin_pb2.CreateTopicsRequest(topics=[admin_pb2.NewTopic(
            name="fuzz-new", num_partitions=1, replication_factor=1)], validate_only=True)],
        "CreatePartitions": [admin_pb2.CreatePartitionsRequest(
            topic="fuzz-other", new_total_count=3, validate_only=True)],
        "DeleteTopics": [admin_pb2.DeleteTopicsRequest(names=["fuzz-doomed"])],
        "JoinGroup": [group_pb2.JoinGroupRequest(
            group_id="fuzz-g", session_timeout_ms=6000, rebalance_timeout_ms=100,
            protocol_type="consumer")],
        "OffsetCommit": [group_pb2.OffsetCommitRequest(group_id="fuzz-g", generation=-1)],
        "ReplicaFetch": [replica_pb2.ReplicaFetchRequest(replica_id=7, max_wait_ms=10)],
    }
    cls = GetMessageClass(_descriptor(name))
    return [*seeds.get(name, []), cls()]


def _descriptor(name: str) -> Descriptor:
    return next(d for m, d in METHODS.items() if m.endswith(f"/{name}"))


# ---- strategies ------------------------------------------------------------------------------

_INTS = st.one_of(st.sampled_from([0, 1, -1, 2, 3, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]),
                  st.integers(-(2**63), 2**63 - 1))


def _strings(reader: bool) -> st.SearchStrategy[str]:
    names = ["fuzz-other", "fuzz-doomed", "fuzz-g", "", "..", "__consumer_offsets",
             "x" * 300, "t\x00", "retention.ms", "cleanup.policy", "-1", "0"]
    if reader:
        names.append("fuzz-a")
    return st.one_of(st.sampled_from(names), st.text(max_size=20))


def _bytes() -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=64), st.just(_batch()),
                     st.binary(min_size=1, max_size=8).map(lambda b: _batch() + b),
                     st.integers(1, 60).map(lambda n: _batch()[:n]))


def _value(field: FieldDescriptor, reader: bool, depth: int) -> st.SearchStrategy[Any]:
    t = field.type
    if t == FieldDescriptor.TYPE_MESSAGE:
        if field.message_type.GetOptions().map_entry:
            return st.tuples(_strings(reader), _strings(reader))
        return _message(field.message_type, reader, depth + 1)
    if t == FieldDescriptor.TYPE_STRING:
        return _strings(reader)
    if t == FieldDescriptor.TYPE_BYTES:
        return _bytes()
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t == FieldDescriptor.TYPE_ENUM:
        return st.integers(-1, 8)
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=False, width=32)
    bits = 32 if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32,
                       FieldDescriptor.TYPE_SFIXED32) else 64
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return st.integers(0, 2**32 - 1)
    if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return st.integers(0, 2**64 - 1)
    return _INTS.filter(lambda v: -(2 ** (bits - 1)) <= v < 2 ** (bits - 1))


def _message(desc: Descriptor, reader: bool, depth: int = 0) -> st.SearchStrategy[bytes]:
    """Serialized messages of type ``desc`` with hostile but well-typed field values."""
    if depth > 2:
        return st.just(b"")
    cls = GetMessageClass(desc)
    fields = {}
    for f in desc.fields:
        value = _value(f, reader, depth)
        fields[f.name] = (st.lists(value, max_size=3) if f.is_repeated
                          else value)

    def build(values: dict[str, Any]) -> bytes:
        msg = cls()
        for f in desc.fields:
            if f.name not in values:
                continue
            v = values[f.name]
            if f.type == FieldDescriptor.TYPE_MESSAGE:
                if f.message_type.GetOptions().map_entry:
                    getattr(msg, f.name).update(dict(v))
                elif f.is_repeated:
                    for item in v:
                        getattr(msg, f.name).add().MergeFromString(item)
                else:
                    getattr(msg, f.name).MergeFromString(v)
            elif f.is_repeated:
                getattr(msg, f.name).extend(v)
            else:
                setattr(msg, f.name, v)
        return bytes(msg.SerializeToString())

    return st.fixed_dictionaries({}, optional=fields).map(build)


def _mutate(data: bytes, ops: list[tuple[int, int, bytes]]) -> bytes:
    out = bytearray(data)
    for kind, where, extra in ops:
        at = where % (len(out) + 1)
        if kind == 0 and out:  # flip a bit
            out[at % len(out)] ^= 1 << (where % 8)
        elif kind == 1:  # insert
            out[at:at] = extra
        elif kind == 2:  # delete
            del out[at:at + 1 + where % 8]
        elif kind == 3:  # truncate
            del out[at:]
        else:  # overwrite
            out[at:at + len(extra)] = extra
    return bytes(out)


def _expand(drawn: list[bytes], rng: random.Random) -> list[bytes]:
    out: list[bytes] = []
    for payload in drawn:
        out.append(payload)
        for _ in range(VARIANTS):
            if rng.random() < 0.2:
                out.append(rng.randbytes(rng.randrange(0, 120)))
            else:
                ops = [(rng.randrange(5), rng.randrange(2**16), rng.randbytes(rng.randrange(6)))
                       for _ in range(rng.randrange(1, 4))]
                out.append(_mutate(payload, ops))
    return out


def payloads(name: str) -> st.SearchStrategy[bytes]:
    reader = name in READERS
    seeds = [m.SerializeToString() for m in _seeds(name)]
    mutated = st.tuples(st.sampled_from(seeds), st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 2**16), st.binary(max_size=6)),
        min_size=1, max_size=4)).map(lambda t: _mutate(*t))
    return st.one_of(st.binary(max_size=200), mutated, _message(_descriptor(name), reader))


# ---- the broker and the bookkeeping ----------------------------------------------------------


class Target:
    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.channel = grpc.insecure_channel(broker.bootstrap)
        self.stub: Any = broker_pb2_grpc.BrokerStub(self.channel)  # type: ignore[no-untyped-call]
        self.admin: Any = admin_pb2_grpc.AdminStub(self.channel)  # type: ignore[no-untyped-call]
        self.acked: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
        self.verify: list[bytes] = []
        self.cases = 0
        self.statuses: dict[str, int] = {}

    def account_produce(self, payload: bytes, answer: bytes) -> None:
        """Offsets a fuzzed Produce was told it wrote to fuzz-a."""
        request = broker_pb2.ProduceRequest.FromString(payload)
        response = broker_pb2.ProduceResponse.FromString(answer)
        sent = [(d.topic, d.partition, d.records) for d in request.partitions]
        for i, part in enumerate(response.partitions):
            if part.topic != "fuzz-a" or part.error_code or part.base_offset < 0:
                continue
            records = sent[i][2]
            count = sum(h.last_offset_delta + 1 for h in iter_headers(records))
            self.acked[part.partition].update(range(part.base_offset, part.base_offset + count))

    def offsets(self, topic: str, partition: int) -> list[tuple[int, bytes]]:
        return [(r.offset, r.value or b"") for r in fetch_all(self.stub, topic, partition)]

    def produce_verify(self, values: list[bytes]) -> None:
        response = self.stub.Produce(broker_pb2.ProduceRequest(acks=-1, partitions=[
            broker_pb2.PartitionProduceData(topic="fuzz-verify", partition=0,
                                            records=encode_batch([(None, v) for v in values]))
        ]), timeout=10)
        assert response.partitions[0].error_code == 0, response.partitions[0].error_message
        self.verify += values


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    broker = BrokerProcess(tmp_path_factory.mktemp("fuzz"))
    try:
        broker.start()
        t = Target(broker)
        created = t.admin.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[
            admin_pb2.NewTopic(name=n, num_partitions=PARTITIONS, replication_factor=1)
            for n in (*CHECKED, "fuzz-other", "fuzz-doomed")]), timeout=10)
        assert all(r.error_code == 0 for r in created.results), created
        t.produce_verify([f"before-{i}".encode() for i in range(50)])
        yield t
        t.channel.close()
    finally:
        broker.stop()


@pytest.mark.parametrize("method", sorted(METHODS))
def test_fuzz_method(target: Target, method: str) -> None:
    name = method.rsplit("/", 1)[1]
    call = target.channel.unary_unary(method)
    started = time.monotonic()

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(st.lists(payloads(name), min_size=DRAWN, max_size=DRAWN), st.integers(0, 2**32))
    def run(drawn: list[bytes], seed: int) -> None:
        batch = _expand(drawn, random.Random(seed))
        futures = [(p, call.future(p, timeout=CALL_TIMEOUT_S)) for p in batch]
        for payload, future in futures:
            try:
                answer = future.result()
            except grpc.RpcError as exc:
                code = exc.code()
                target.statuses[code.name] = target.statuses.get(code.name, 0) + 1
                assert code not in BAD, (
                    f"{name} answered {code.name}: {exc.details()}; payload {payload!r}; "
                    f"{from_rpc_error(exc).message}")
                continue
            target.statuses["OK"] = target.statuses.get("OK", 0) + 1
            if name == "Produce":
                target.account_produce(payload, answer)
        target.cases += len(batch)

    run()
    assert target.broker.is_alive(), target.broker.stderr_tail()
    assert target.broker.is_ready(), f"not ready after fuzzing {name}"
    # The logs still read back exactly what was acknowledged.
    target.produce_verify([f"after-{name}".encode()])
    assert [v for _, v in target.offsets("fuzz-verify", 0)] == target.verify
    for p in range(PARTITIONS):
        found = {o for o, _ in target.offsets("fuzz-a", p)}
        assert found == target.acked[p], (p, sorted(found ^ target.acked[p])[:20])
    stderr = Path(target.broker.stderr_path).read_text()
    print(f"{name}: {EXAMPLES * BATCH} cases in {time.monotonic() - started:.1f}s; so far "
          f"{target.cases} cases, {target.statuses}, broker log {len(stderr)} bytes, "
          f"{stderr.count('Traceback')} tracebacks")
