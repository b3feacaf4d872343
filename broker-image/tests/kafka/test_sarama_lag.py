"""Go's sarama -- the client KEDA's Kafka scaler and kafka_exporter are built on -- reads a
consumer group's lag from Strom's Kafka listener as they do: metadata, OffsetFetch, ListOffsets,
ListGroups, DescribeGroups (``sarama_probe/main.go``, built with the local Go toolchain from the
Go module proxy, pinned by its go.sum). kafka_exporter itself is not on the module proxy here
(403), and building KEDA's scalers package means building every scaler's cloud SDK; the probe
makes the same sarama calls."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strom.testing import BrokerProcess
from strom.testing.tools import find_go, missing

from .conftest import new_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

PROBE = Path(__file__).parent / "sarama_probe"


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = find_go()
    if go is None:
        missing("Go is not installed (1.24+ on PATH, for the sarama test)")
    out = tmp_path_factory.mktemp("sarama") / "probe"
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}
    built = subprocess.run([go, "build", "-o", str(out), "."], cwd=PROBE, env=env,
                           capture_output=True, text=True, timeout=800, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    return out


def test_sarama_reads_a_groups_lag_as_keda_and_kafka_exporter_do(broker: BrokerProcess,
                                                                  probe: Path) -> None:
    topic = new_topic(broker, partitions=3)
    producer = Producer({"bootstrap.servers": broker.kafka_bootstrap})
    for i in range(30):
        producer.produce(topic, value=b"%d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    del producer
    group = f"{topic}-g"
    consumer = Consumer({"bootstrap.servers": broker.kafka_bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 4)],
                        asynchronous=False)
    finally:
        consumer.close()
    done = subprocess.run([str(probe), broker.kafka_bootstrap, group, topic],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    assert seen["partitions"] == {"0": {"end": 10, "committed": 10},
                                  "1": {"end": 10, "committed": 4},
                                  "2": {"end": 10, "committed": -1}}, seen
    assert group in seen["groups"] and seen["state"] == "Empty", seen
