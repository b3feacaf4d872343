"""The metric names a real broker process exports on ``/metrics`` are the names
``strom.broker.metrics.EXPORTED`` lists (the list the chart's dashboards and alerts are checked
against), and promtool accepts the scrape (Prometheus naming rules).

The broker is made busy enough to export every labelled family: gRPC and Kafka-protocol
produce, a consumer group that commits, and a per-partition error. Only what a follower exports
is left out (one broker follows nobody); ``e2e/test_prometheus_dashboards.py`` checks the whole
list on three brokers.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from confluent_kafka import Producer as KafkaProducer

from strom.broker.metrics import EXPORTED
from strom.client import Admin, Consumer, Producer
from strom.protocol.v1 import broker_pb2
from strom.testing import BrokerProcess, running_broker
from strom.testing.tools import require_tool
from strom.transport.v1 import broker_pb2_grpc

pytestmark = pytest.mark.integration

#: Exported only by a broker that follows another's partition.
FOLLOWER_ONLY = frozenset({"strom_replica_fetcher_lag"})


def _busy(broker: BrokerProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("t", partitions=2)
    with Producer(broker.bootstrap) as producer:
        for i in range(10):
            producer.send("t", b"v%d" % i)
        producer.flush()
    kafka = KafkaProducer({"bootstrap.servers": broker.kafka_bootstrap})
    kafka.produce("t", b"through the Kafka listener")
    assert kafka.flush(30) == 0
    with Consumer(broker.bootstrap, group_id="g", auto_offset_reset="earliest") as consumer:
        consumer.subscribe(["t"])
        got = 0
        deadline = time.monotonic() + 60
        while got < 11 and time.monotonic() < deadline:
            got += len(consumer.poll(500))
        assert got == 11
        consumer.commit()
    with grpc.insecure_channel(broker.bootstrap) as channel:  # a per-partition error
        stub = broker_pb2_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
        answer = stub.ListOffsets(broker_pb2.ListOffsetsRequest(partitions=[
            broker_pb2.ListOffsetsPartition(topic="t", partition=99, timestamp=-1)]),
            timeout=10)
        assert answer.partitions[0].error_code != 0


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_broker(tmp_path_factory.mktemp("metrics"),
                        config={"group.initial.rebalance.delay.ms": "0"}) as broker:
        _busy(broker)
        with urllib.request.urlopen(broker.metrics_url, timeout=10) as response:
            yield response.read().decode()


def test_a_busy_broker_exports_exactly_the_listed_names(scrape: str) -> None:
    names = {m.group(1) for m in re.finditer(r"^([a-z_:][a-z0-9_:]*)[{ ]", scrape, re.M)}
    strom = {n for n in names if n.startswith("strom_") and not n.endswith("_created")}
    assert not strom - EXPORTED, f"exported, not in EXPORTED: {sorted(strom - EXPORTED)}"
    absent = EXPORTED - FOLLOWER_ONLY - strom
    assert not absent, f"listed in EXPORTED, not exported: {sorted(absent)}"


def test_promtool_accepts_the_scrape(scrape: str) -> None:
    promtool = require_tool("promtool", "Debian package prometheus")
    result = subprocess.run([promtool, "check", "metrics"], input=scrape.encode(),
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
