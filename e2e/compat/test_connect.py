"""Kafka Connect (standalone worker, Kafka's FileStreamSource and FileStreamSink connectors)
against Strom's Kafka listener: a file of lines in, the same lines out, and after a worker
restart only the new lines move (the source's offsets in the worker's offset file, the sink's
as its consumer group's committed offsets in Strom).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from strom.client import Admin
from strom.testing.kafka_tools import running_java
from strom.testing.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(400)]

STANDALONE = "org.apache.kafka.connect.cli.ConnectStandalone"


def properties(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def wait_for_lines(path: Path, want: list[str], worker: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    got: list[str] = []
    while time.monotonic() < deadline:
        worker.check_running()
        got = path.read_text().splitlines() if path.exists() else []
        if len(got) >= len(want):
            break
        time.sleep(0.3)
    assert got == want, f"the sink file has {len(got)} of {len(want)} lines; worker log:\n" \
                        f"{worker.log_tail()}"


def source_position(offsets: Path) -> int | None:
    """The FileStreamSource's last flushed position: the worker's offset file is a Java-serialised
    map whose values are the JSON converter's bytes, ``{"position":N}``."""
    if not offsets.exists():
        return None
    found = re.findall(rb'"position":(\d+)', offsets.read_bytes())
    return int(found[-1]) if found else None


def test_file_source_to_file_sink_through_strom_survives_a_worker_restart(
        pair: Any, name: Any, tmp_path: Path) -> None:
    topic = name("connect")
    source, sink = tmp_path / "in.txt", tmp_path / "out.txt"
    offsets = tmp_path / "connect.offsets"
    worker = properties(tmp_path / "worker.properties", {
        "bootstrap.servers": pair.strom.bootstrap,
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "offset.storage.file.filename": str(offsets),
        "offset.flush.interval.ms": "500",
        "listeners": "http://127.0.0.1:0",
        "topic.creation.enable": "false",
    })
    src = properties(tmp_path / "source.properties", {
        "name": f"{topic}-source", "connector.class":
            "org.apache.kafka.connect.file.FileStreamSourceConnector",
        "tasks.max": "1", "file": str(source), "topic": topic})
    dst = properties(tmp_path / "sink.properties", {
        "name": f"{topic}-sink", "connector.class":
            "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "tasks.max": "1", "file": str(sink), "topics": topic,
        "consumer.override.auto.offset.reset": "earliest"})
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": pair.strom.bootstrap})  # kept: in use below
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    first = [f"line {i}" for i in range(50)]
    source.write_text("".join(f"{line}\n" for line in first))
    with running_java(STANDALONE, str(worker), str(src), str(dst),
                      log_path=tmp_path / "worker-1.log", name="connect worker",
                      heap=("-Xmx384m",)) as proc:
        wait_for_lines(sink, first, proc)
        size = source.stat().st_size  # the source's offsets flushed (every 500 ms) at the end
        wait_until(lambda: source_position(offsets) == size, 30,
                   what=f"the source's flushed position {size} in {offsets}")
    more = [f"more {i}" for i in range(20)]
    with source.open("a") as fh:
        fh.write("".join(f"{line}\n" for line in more))
    with running_java(STANDALONE, str(worker), str(src), str(dst),
                      log_path=tmp_path / "worker-2.log", name="connect worker",
                      heap=("-Xmx384m",)) as proc:
        wait_for_lines(sink, first + more, proc)
        # nothing read twice can still arrive: the source has read the whole file and the
        # sink's group has committed (after writing) everything the topic holds
        size = source.stat().st_size
        with Admin(pair.strom_broker.bootstrap) as strom:
            def sink_at_the_end() -> bool:
                lag = strom.group_lag(f"connect-{topic}-sink")
                return source_position(offsets) == size and bool(lag) and all(
                    p.committed == p.log_end_offset for p in lag)

            wait_until(sink_at_the_end, 30, interval_s=0.2,
                       what="the source at the end of its file and the sink's commits at the "
                            "end of the topic")
        assert sink.read_text().splitlines() == first + more
