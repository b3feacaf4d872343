"""Kafka Connect in distributed mode (Kafka 4.3.1's ``ConnectDistributed``) against Apache Kafka
and against Strom: the worker creates its config, offset and status topics through the admin
API, forms its worker group (protocol type ``connect``), and runs a FileStreamSource and a
FileStreamSink connector from its REST API: a file of lines in, the same lines out. What is
compared: the sink file, the connectors' and tasks' states, and the internal topics as the
admin API describes them (partitions, ``cleanup.policy`` set by the worker).
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from strom.testing import free_port
from strom.testing.kafka_tools import running_java

# one worker JVM per server: ~60-120 s each at load 15-20 on 2 cores
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

DISTRIBUTED = "org.apache.kafka.connect.cli.ConnectDistributed"
LINES = [f"line {i}" for i in range(40)]


def _rest(url: str, body: dict[str, Any] | None = None, timeout: float = 60) -> Any:
    request = urllib.request.Request(
        url, data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}, method="GET" if body is None else "POST")
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read() or b"null")


def _wait(what: str, check: Any, timeout: float, worker: Any) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        worker.check_running()
        try:
            got = check()
        except OSError:
            got = None
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s\n" \
                                            f"{worker.log_tail()}"
        time.sleep(0.5)


def _topics(bootstrap: str, names: list[str]) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(timeout=30).topics
    out: dict[str, Any] = {}
    for name in names:
        resource = ConfigResource(ConfigResource.Type.TOPIC, name)
        configs = admin.describe_configs([resource])[resource].result(timeout=30)
        out[name] = {"partitions": len(meta[name].partitions) if name in meta else None,
                     "cleanup.policy": configs["cleanup.policy"].value}
    return out


def scenario(bootstrap: str, tmp: Path, topic: str) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    internal = [f"{topic}-configs", f"{topic}-offsets", f"{topic}-status"]
    props = tmp / "worker.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in {
        "bootstrap.servers": bootstrap, "group.id": f"{topic}-workers",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "config.storage.topic": internal[0], "offset.storage.topic": internal[1],
        "status.storage.topic": internal[2], "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1", "status.storage.replication.factor": "1",
        "offset.storage.partitions": "3", "status.storage.partitions": "2",
        "offset.flush.interval.ms": "500", "listeners": url, "plugin.discovery": "only_scan",
        "topic.creation.enable": "false"}.items()))
    source, sink = tmp / "in.txt", tmp / "out.txt"
    source.write_text("".join(f"{line}\n" for line in LINES))
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept while the future runs
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    seen: dict[str, Any] = {}
    with running_java(DISTRIBUTED, str(props), log_path=tmp / "worker.log",
                      name="connect distributed worker", heap=("-Xmx384m",)) as worker:
        _wait("the worker's REST API", lambda: _rest(f"{url}/connectors") == [], 240, worker)
        for name, config in (
                ("file-source", {"connector.class":
                                 "org.apache.kafka.connect.file.FileStreamSourceConnector",
                                 "file": str(source), "topic": topic, "tasks.max": "1"}),
                ("file-sink", {"connector.class":
                               "org.apache.kafka.connect.file.FileStreamSinkConnector",
                               "file": str(sink), "topics": topic, "tasks.max": "1",
                               "consumer.override.auto.offset.reset": "earliest"})):
            _rest(f"{url}/connectors", {"name": name, "config": config})
        _wait("the sink file's lines", lambda: sink.exists()
              and len(sink.read_text().splitlines()) >= len(LINES), 120, worker)
        seen["sink"] = sink.read_text().splitlines()
        states = {}
        for name in ("file-source", "file-sink"):
            status = _wait(f"{name} running", lambda n=name: (
                s := _rest(f"{url}/connectors/{n}/status"))["connector"]["state"] == "RUNNING"
                and [t["state"] for t in s["tasks"]] == ["RUNNING"] and s, 60, worker)
            states[name] = (status["connector"]["state"], [t["state"] for t in status["tasks"]])
        seen["states"] = states
    seen["topics"] = {name.removeprefix(topic): value
                      for name, value in _topics(bootstrap, internal).items()}
    return seen


def test_a_distributed_worker_moves_a_file_through_kafka_and_strom_alike(
        pair: Any, name: Any, tmp_path: Path) -> None:
    topic = name("connectd")
    got = {}
    for server in pair.both():
        (tmp_path / server.name).mkdir()
        got[server.name] = scenario(server.bootstrap, tmp_path / server.name, topic)
    assert got["kafka"]["sink"] == LINES
    assert got["strom"] == got["kafka"]
    assert got["kafka"]["topics"]["-offsets"] == {"partitions": 3, "cleanup.policy": "compact"}
