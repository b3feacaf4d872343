"""The floor responders of ``benchmarks.produce_floor`` (issue 21 item 1): their answers are
what a Kafka client reads, the Go floor's bytes are the Python floor's, and the benchmark gives
every row. Shape and correctness, not speed: the figures come from the benchmark's full run."""

from __future__ import annotations

import datetime
import importlib
import json
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kio.schema.metadata.v12 import request as md_req
from kio.schema.metadata.v12 import response as md_resp
from kio.serial import entity_reader

from benchmarks import produce_floor as pf
from benchmarks import raw_records as rr
from strom.testing import kafka_wire
from strom.testing.tools import find_go, missing

ROOT = Path(__file__).resolve().parents[1]
_SIZE = struct.Struct(">i")


def metadata_frame(topic: str, correlation_id: int = 1) -> bytes:
    body = md_req.MetadataRequest(topics=(md_req.MetadataRequestTopic(topic_id=None, name=topic),),
                                  allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False)
    return kafka_wire.frame(3, 12, correlation_id, body, client_id="floor-test")


def produce_frame(version: int, topic: str, partition: int, batch: bytes,
                  correlation_id: int) -> bytes:
    mod = importlib.import_module(f"kio.schema.produce.v{version}.request")
    body = mod.ProduceRequest(
        transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=30),
        topic_data=(mod.TopicProduceData(name=topic, partition_data=(
            mod.PartitionProduceData(index=partition, records=batch),)),))
    return kafka_wire.frame(0, version, correlation_id, body, client_id="floor-test")


def read_answer(version: int, answer: bytes) -> Any:
    """A Produce answer frame read by kio (size and header v1 skipped)."""
    mod = importlib.import_module(f"kio.schema.produce.v{version}.response")
    assert _SIZE.unpack_from(answer)[0] == len(answer) - 4
    body, _ = entity_reader(mod.ProduceResponse)(answer, 4 + 4 + 1)
    return body


def test_python_floor_answers_metadata_and_produce_as_kio_reads_them(tmp_path: Path) -> None:
    floor = pf.Floor(tmp_path, "127.0.0.1", 4321)
    try:
        meta = floor.answer(metadata_frame("floor-3-a")[4:])
        assert meta is not None
        response, _ = entity_reader(md_resp.MetadataResponse)(meta, 4 + 4 + 1)
        assert [(b.host, b.port) for b in response.brokers] == [("127.0.0.1", 4321)]
        [topic] = response.topics
        assert topic.name == "floor-3-a" and [p.partition_index for p in topic.partitions] \
            == [0, 1, 2] and all(p.leader_id == 0 for p in topic.partitions)
        assert sorted(p.name for p in tmp_path.iterdir()) == [f"floor-3-a-{i}" for i in range(3)]
        # the same request again: the kept answer, with this request's correlation id
        again = floor.answer(metadata_frame("floor-3-a", correlation_id=77)[4:])
        assert again is not None and again[8:] == meta[8:] and _SIZE.unpack_from(again, 4)[0] == 77
        batch = rr.build_batch(5, 100)
        offsets = []
        for i, version in enumerate((9, 10, 11, 12, 9)):
            answer = floor.answer(produce_frame(version, "floor-3-a", 1, batch, i)[4:])
            assert answer is not None and _SIZE.unpack_from(answer, 4)[0] == i
            [t] = read_answer(version, answer).responses
            [p] = t.partition_responses
            assert (t.name, p.index, p.error_code.value) == ("floor-3-a", 1, 0)
            offsets.append(p.base_offset)
        assert offsets == [0, 5, 10, 15, 20]
        assert (tmp_path / "floor-3-a-1").read_bytes() == batch * 5
        assert floor.produce_requests == 5
        old_format = bytearray(batch)
        old_format[16] = 1
        with pytest.raises(ValueError, match="format v2"):
            floor.answer(produce_frame(9, "floor-3-a", 0, bytes(old_format), 9)[4:])
    finally:
        floor.close()


def _exchange(address: str, frames: list[bytes]) -> list[bytes]:
    """Each frame's answer, one at a time over one connection."""
    host, port = address.rsplit(":", 1)
    answers = []
    with socket.create_connection((host, int(port)), timeout=30) as sock, \
            sock.makefile("rb") as stream:
        for frame in frames:
            sock.sendall(frame)
            head = stream.read(4)
            answer = head + stream.read(_SIZE.unpack(head)[0])
            assert len(answer) == 4 + _SIZE.unpack(head)[0], "the floor closed the connection"
            answers.append(answer)
    return answers


@pytest.fixture(scope="module")
def go_floor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if find_go() is None:
        missing("Go is not installed (1.24+ on PATH, for the Go floor responder)")
    return pf.build_go_floor(tmp_path_factory.mktemp("floor-go"))


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_go_floor_writes_and_answers_what_the_python_floor_does(tmp_path: Path,
                                                                go_floor: Path) -> None:
    """The same requests to both floors: the same answer bytes (ApiVersions and Metadata
    through the Go floor's relay name the Go floor), the same bytes in the partitions' files;
    and librdkafka produces through the Go floor (acks=1, every record acknowledged)."""
    batch = rr.build_batch(7, 100)
    frames = [metadata_frame("floor-4-g")] + [
        produce_frame(version, "floor-4-g", p, batch, 10 + i)
        for i, (version, p) in enumerate([(9, 0), (10, 3), (11, 3), (12, 1), (9, 3)])]
    with pf.running_floor(tmp_path / "py") as (py_bootstrap, _), \
            pf.running_floor(tmp_path / "go", go_floor) as (go_bootstrap, pids):
        assert len(pids) == 2
        py_answers = _exchange(py_bootstrap, frames)
        go_answers = _exchange(go_bootstrap, frames)
        go_port = int(go_bootstrap.rsplit(":", 1)[1])
        meta, _ = entity_reader(md_resp.MetadataResponse)(go_answers[0], 9)
        assert [b.port for b in meta.brokers] == [go_port]
        assert go_answers[1:] == py_answers[1:]
        for p in range(4):
            name = f"floor-4-g-{p}"
            assert (tmp_path / "go" / name).read_bytes() == (tmp_path / "py" / name).read_bytes()
        assert (tmp_path / "go" / "floor-4-g-3").read_bytes() == batch * 3
        from benchmarks.partition_scale import produce_keyed_kafka

        pf._create_floor_topic(go_bootstrap, "floor-8-k")
        done = produce_keyed_kafka(go_bootstrap, "floor-8-k", 2_000)  # raises if not all acked
        assert done.records == 2_000
        written = sum((tmp_path / "go" / f"floor-8-k-{p}").stat().st_size for p in range(8))
        assert written > 2_000 * 100


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_produce_floor_benchmark_gives_every_row(tmp_path: Path, go_floor: Path) -> None:
    out = tmp_path / "floor.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.produce_floor", "--counts", "2,8", "--records",
         "3000", "--repeats", "1", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=800, check=False,
        env={**os.environ, "PATH": f"{os.environ.get('PATH', '')}:/usr/local/go/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert sorted((r["peer"], r["partitions"]) for r in rows) == sorted(
        (peer, n) for peer in pf.PEERS for n in (2, 8))
    assert all(r["produce_rps"] > 0 and r["requests"] >= 1 for r in rows), rows
    assert "| floor-go | 8 |" in proc.stdout and "Strom's rate / this" in proc.stdout


def test_cli_refuses_unknown_peers_with_a_usage_error() -> None:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.produce_floor", "--peers",
                           "strom,kafka"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2 and "--peers: kafka" in proc.stderr, proc.stderr
