"""Kafka Connect runs against Strom unchanged: Apache Kafka's own distributed worker
(``ConnectDistributed``, connect-runtime) creates its compacted config/offset/status topics,
forms its worker group with protocol type ``connect`` (metadata and assignments the coordinator
relays without reading), runs a FileStreamSource connector from its REST API, and the file's
lines arrive in the topic."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from kio.schema.describe_groups.v5 import request as dg_req
from kio.schema.describe_groups.v5 import response as dg_resp

from strom.client import Admin
from strom.testing import BrokerProcess, free_port
from strom.testing.kafka import require_jars
from strom.testing.kafka_tools import running_java

from .conftest import kafka_call

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

LINES = 20


def _worker_properties(broker: BrokerProcess, port: int) -> str:
    return "\n".join([
        f"bootstrap.servers={broker.kafka_bootstrap}", "group.id=connect-cluster",
        "key.converter=org.apache.kafka.connect.storage.StringConverter",
        "value.converter=org.apache.kafka.connect.storage.StringConverter",
        "offset.storage.topic=connect-offsets", "config.storage.topic=connect-configs",
        "status.storage.topic=connect-status", "offset.storage.replication.factor=1",
        "config.storage.replication.factor=1", "status.storage.replication.factor=1",
        "offset.storage.partitions=2", "status.storage.partitions=1",
        "offset.flush.interval.ms=1000", f"listeners=http://127.0.0.1:{port}",
        "plugin.discovery=only_scan", ""])


def test_a_distributed_worker_runs_a_file_source_connector(broker: BrokerProcess,
                                                           tmp_path: Path) -> None:
    require_jars()
    with Admin(broker.bootstrap) as admin:  # auto.create.topics.enable is off by default
        admin.create_topic("connect-test", partitions=1, replication_factor=1)
    port = free_port()
    props = tmp_path / "worker.properties"
    props.write_text(_worker_properties(broker, port))
    source = tmp_path / "input.txt"
    source.write_text("".join(f"line {i}\n" for i in range(LINES)))
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "connect.log"
    with running_java("org.apache.kafka.connect.cli.ConnectDistributed", str(props),
                      log_path=log, name="kafka connect worker", heap=("-Xmx384m",)) as worker:
        deadline = time.monotonic() + 240
        while True:
            worker.check_running()
            try:
                urllib.request.urlopen(f"{url}/connectors", timeout=2).read()
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
                time.sleep(0.5)
        config = {"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                  "file": str(source), "topic": "connect-test", "tasks.max": "1"}
        created = urllib.request.urlopen(urllib.request.Request(
            f"{url}/connectors", data=json.dumps({"name": "file-source", "config": config})
            .encode(), headers={"Content-Type": "application/json"}, method="POST"), timeout=60)
        assert created.status == 201
        consumer = Consumer({"bootstrap.servers": broker.kafka_bootstrap,
                             "group.id": "connect-check", "auto.offset.reset": "earliest"})
        got: list[bytes] = []
        try:
            consumer.subscribe(["connect-test"])
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and len(got) < LINES:
                worker.check_running()
                m = consumer.poll(0.5)
                if m is not None and m.error() is None:
                    got.append(m.value())
        finally:
            consumer.close()
        assert got == [f"line {i}".encode() for i in range(LINES)], log.read_text(
            errors="replace")[-3000:]
        status = json.loads(urllib.request.urlopen(f"{url}/connectors/file-source/status",
                                                   timeout=30).read())
        assert status["connector"]["state"] == "RUNNING", status
        described = kafka_call(broker.kafka_port, 15, 5, dg_req.DescribeGroupsRequest(
            groups=("connect-cluster",), include_authorized_operations=False),
            dg_resp.DescribeGroupsResponse)
        (group,) = described.groups
        assert (group.group_state, group.protocol_type) == ("Stable", "connect"), group
        assert len(group.members) == 1 and group.members[0].member_assignment
