"""The equal-cost raw clients of section ``kafka-listener`` (``benchmarks/raw_*.py``): their pure
parts (batch-header counting, the two loops, request and answer encoding by each protocol's
library) and one short run of each against a real broker that must see the same records."""

from __future__ import annotations

import contextlib
import datetime
import importlib
import io
import struct
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17 import request as fetch_req
from kio.schema.fetch.v17 import response as fetch_resp
from kio.schema.produce.v13 import request as produce_req
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.serial import entity_reader, entity_writer

from strom.protocol.records import decode_batches
from strom.protocol.v1 import broker_pb2

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, ModuleType]]:
    """The benchmarks package lives beside the workspace packages: the repository root on
    sys.path for this test only (as ``python -m benchmarks`` does)."""
    monkeypatch.syspath_prepend(str(ROOT))
    yield {name: importlib.import_module(f"benchmarks.{name}")
           for name in ("raw_records", "raw_kafka", "raw_grpc", "raw_compare")}


def _at(batch: bytes, base_offset: int) -> bytes:
    """``batch`` with another base offset (outside the CRC, as a broker writes it)."""
    return struct.pack(">q", base_offset) + batch[8:]


def test_records_are_counted_from_batch_headers(bench: dict[str, ModuleType]) -> None:
    rr = bench["raw_records"]
    three, two = rr.build_batch(3, 100), rr.build_batch(2, 1024)
    data = _at(three, 10) + _at(two, 13)
    for start in range(10, 16):  # what a full decoder reads from each offset
        decoded = [r.offset for r in decode_batches(data, "t", 0, start)]
        assert rr.count_records(data, start) == (len(decoded), max(decoded, default=14) + 1)
    assert rr.count_records(data, 10) == (5, 15)
    assert rr.count_records(memoryview(data), 10) == (5, 15)
    # the first batch starts before the fetch offset: its records below it are not counted
    assert rr.count_records(data, 12) == (3, 15)
    # a batch cut off at a size limit is not counted; the next fetch starts at it
    assert rr.count_records(data[:-1], 10) == (3, 13)
    assert rr.count_records(data[:len(three) + 30], 10) == (3, 13)
    assert rr.count_records(b"", 7) == (0, 7)


def test_a_built_batch_holds_the_values_asked_for(bench: dict[str, ModuleType]) -> None:
    rr = bench["raw_records"]
    records = list(decode_batches(rr.build_batch(4, 300), "t", 0))
    assert [(r.offset, len(r.value or b"")) for r in records] == [(i, 300) for i in range(4)]
    assert {r.key for r in records} == {None}


def test_catch_up_fetches_each_partition_from_its_next_offset(bench: dict[str, ModuleType]
                                                              ) -> None:
    rr = bench["raw_records"]
    logs = {0: [_at(rr.build_batch(2, 10), 0), _at(rr.build_batch(3, 10), 2)],
            1: [_at(rr.build_batch(4, 10), 0)]}
    asked: list[dict[int, int]] = []

    def fetch(offsets: Mapping[int, int]) -> dict[int, bytes]:
        asked.append(dict(offsets))
        out = {}
        for p, o in offsets.items():  # one batch per answer: the one holding the offset
            out[p] = next((b for b in logs[p] if rr.count_records(b, o)[0]), b"")
        return out

    got = rr.catch_up(fetch, 2, 9, 10)
    assert (got.records, got.bytes) == (9, 90)
    assert asked == [{0: 0, 1: 0}, {0: 2, 1: 4}]
    with pytest.raises(RuntimeError, match="fetched only 9 of 10"):
        rr.catch_up(fetch, 2, 10, 10, timeout_s=0.2)


def test_produce_sizes_and_loop(bench: dict[str, ModuleType]) -> None:
    rr, rc = bench["raw_records"], bench["raw_compare"]
    assert rr.requests_for(1000, 1, 300) == 4
    assert rr.requests_for(1200, 2, 300) == 2
    calls: list[int] = []
    got = rr.produce_loop(lambda: calls.append(1), 4, 300, 100)
    assert (len(calls), got.records, got.bytes) == (4, 1200, 120_000)
    assert rc.batch_records(100) == 655 and rc.batch_records(1024) == 64
    assert rc.batch_records(1 << 20) == 1
    assert rc.passes(200_000, 2_000_000) == 10 and rc.passes(300, 1000) == 4
    assert rc.passes(5_000_000, 2_000_000) == 1
    assert rc.median_index([3.0, 1.0, 2.0]) == 2 and rc.median_index([4.0, 1.0]) == 1


def test_the_median_run_gives_the_rate_and_the_broker_cpu_per_record(
        bench: dict[str, ModuleType]) -> None:
    rc, sw = bench["raw_compare"], importlib.import_module("benchmarks.strom_workloads")
    runs = [sw.Throughput(1000, 1.0, 0), sw.Throughput(1000, 0.5, 0), sw.Throughput(1000, 2, 0)]
    rate, cpu = rc.rows_for("s", "w", "consume", runs, [0.3, 0.2, 0.1], ["peer"])
    assert (rate.value, rate.unit, rate.peers) == (1000.0, "records/s", ["peer"])
    assert cpu.value == pytest.approx(300.0) and cpu.unit == "us"  # 0.3 s / 1000 records
    assert not cpu.higher_is_better and cpu.metric == "consume broker CPU/record"


def test_kafka_requests_are_kio_encodings_at_the_listeners_newest_versions(
        bench: dict[str, ModuleType]) -> None:
    rk, rr = bench["raw_kafka"], bench["raw_records"]
    topic_id = uuid.uuid4()
    batch = rr.build_batch(3, 50)
    frame = rk.with_correlation_id(rk.produce_frame(topic_id, 2, batch), 77)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    header, at = entity_reader(RequestHeader)(frame[4:], 0)
    assert (header.request_api_key, header.request_api_version, header.correlation_id) == (
        0, 13, 77)
    body, _ = entity_reader(produce_req.ProduceRequest)(frame[4:], at)
    [topic] = body.topic_data
    assert topic.topic_id == topic_id and body.acks == 1
    assert [(p.index, p.records) for p in topic.partition_data] == [(0, batch), (1, batch)]

    fetch = rk.frame(1, 17, 5, rk.fetch_body(topic_id, {0: 7, 3: 9}, 500, 1 << 26, 1 << 23))
    header, at = entity_reader(RequestHeader)(fetch[4:], 0)
    assert (header.request_api_key, header.request_api_version) == (1, 17)
    asked, _ = entity_reader(fetch_req.FetchRequest)(fetch[4:], at)
    assert (asked.session_id, asked.session_epoch, asked.max_bytes) == (0, -1, 1 << 26)
    assert [(p.partition, p.fetch_offset, p.partition_max_bytes)
            for p in asked.topics[0].partitions] == [(0, 7, 1 << 23), (3, 9, 1 << 23)]


def _fetch_answer(parts: list[tuple[int, int, bytes]]) -> bytes:
    """A Fetch v17 answer frame (header included, no size) written by kio."""
    buffer = io.BytesIO()
    entity_writer(ResponseHeader)(buffer, ResponseHeader(correlation_id=1))  # type: ignore[arg-type]
    entity_writer(fetch_resp.FetchResponse)(buffer, fetch_resp.FetchResponse(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,  # type: ignore[arg-type]
        responses=(fetch_resp.FetchableTopicResponse(topic_id=uuid.uuid4(), partitions=tuple(
            fetch_resp.PartitionData(
                partition_index=p, error_code=ErrorCode(code), high_watermark=10,  # type: ignore[arg-type]
                aborted_transactions=None, records=records)  # type: ignore[arg-type]
            for p, code, records in parts)),)))
    return buffer.getvalue()


def test_kafka_fetch_answers_give_each_partitions_records_or_raise(
        bench: dict[str, ModuleType]) -> None:
    rk = bench["raw_kafka"]
    answer = _fetch_answer([(0, 0, b"abc"), (2, 0, b"")])
    assert rk.records_of(memoryview(answer).toreadonly()) == {0: b"abc", 2: b""}
    with pytest.raises(RuntimeError, match="partition 1"):
        rk.records_of(_fetch_answer([(1, 1, b"")]))  # OFFSET_OUT_OF_RANGE


def test_grpc_requests_and_answers(bench: dict[str, ModuleType]) -> None:
    rg, rr = bench["raw_grpc"], bench["raw_records"]
    request = rg.fetch_request("t", {0: 7, 3: 9}, 500, 1 << 26, 1 << 23)
    assert (request.max_bytes, request.replica_id, request.min_bytes) == (1 << 26, -1, 1)
    assert [(p.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
            for p in request.partitions] == [("t", 0, 7, 1 << 23), ("t", 3, 9, 1 << 23)]
    batch = rr.build_batch(2, 10)
    produce = broker_pb2.ProduceRequest.FromString(rg.produce_request("t", 2, batch))
    assert produce.acks == 1
    assert [(p.partition, p.records) for p in produce.partitions] == [(0, batch), (1, batch)]
    answer = broker_pb2.FetchResponse(partitions=[
        broker_pb2.FetchPartitionResponse(topic="t", partition=1, records=b"xy")])
    assert rg.records_of(answer) == {1: b"xy"}
    answer.partitions[0].error_code = 1
    with pytest.raises(RuntimeError, match="t-1: error 1"):
        rg.records_of(answer)
    with pytest.raises(RuntimeError, match="t-0: error 6"):
        rg.check_produced(broker_pb2.ProduceResponse(partitions=[
            broker_pb2.PartitionProduceResponse(topic="t", partition=0, error_code=6)]))


@pytest.mark.integration
def test_both_raw_clients_write_and_read_the_same_log(bench: dict[str, ModuleType],
                                                      tmp_path: Path) -> None:
    """Each raw client produces through its path and reads back what it and the other wrote:
    one log, one core, two doors."""
    from strom.client import Admin, Consumer, TopicPartition
    from strom.testing import running_broker

    rg, rk = bench["raw_grpc"], bench["raw_kafka"]
    with running_broker(tmp_path / "broker") as broker:
        with Admin(broker.bootstrap) as admin:
            admin.create_topic("raw", partitions=2, replication_factor=1)
        with contextlib.closing(rg.RawGrpc(broker.bootstrap)) as g, \
                contextlib.closing(rk.RawKafka(broker.kafka_bootstrap)) as k:
            assert g.produce("raw", 2, 700, 100, 300).records == 1200  # 2 requests of 2 x 300
            assert k.produce("raw", 2, 600, 100, 300).records == 600
            for client in (g, k):
                got = client.catch_up("raw", 2, 1800, 100, max_bytes=1 << 20,
                                      partition_max_bytes=40_000)  # several answers
                assert got.records == 1800
        consumer = Consumer(broker.bootstrap)
        try:
            tps = [TopicPartition("raw", p) for p in range(2)]
            assert consumer.end_offsets(tps) == dict.fromkeys(tps, 900)
        finally:
            consumer.close()


def test_a_frame_sent_in_parts_arrives_whole_past_partial_writes(
        bench: dict[str, ModuleType]) -> None:
    """The producer sends the rewritten head and the untouched rest of its frame with one
    sendmsg; a socket buffer smaller than the frame makes the writes partial."""
    import socket
    import threading

    rk = bench["raw_kafka"]
    client, server = socket.socketpair()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    client.settimeout(30)  # as RawKafka's: Python then writes what fits and returns
    raw = object.__new__(rk.RawKafka)
    raw._socket = client
    frame = bytes(range(256)) * 16384  # 4 MiB
    head, rest = rk.split_at_correlation_id(frame)
    received = bytearray()

    def read() -> None:
        while len(received) < len(frame):
            chunk = server.recv(1 << 16)
            if not chunk:  # the sender closed early
                return
            received.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        raw._send_parts([memoryview(head), rest])
        reader.join(timeout=60)
    finally:
        client.close()
        server.close()
    assert not reader.is_alive() and bytes(received) == frame
