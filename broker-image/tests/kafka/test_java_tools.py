"""Apache Kafka's own command-line tools against a Strom broker's Kafka listener, as an operator
runs them: kafka-consumer-groups (describe with lag, delete offsets), kafka-configs (alter,
describe with synonyms), kafka-log-dirs, kafka-delete-records and kafka-transactions
describe-producers. Each tool is Kafka's Java admin client, the reference implementation of the
protocol; the test reads what the tool prints, as a person would. (kafka-topics, console tools
and GetOffsetShell are compared with Apache Kafka's output in e2e/compat.) Every tool is a JVM
start (5-20 s here): one scenario keeps them few."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from strom.testing import BrokerProcess
from strom.testing.kafka import require_jars
from strom.testing.kafka_tools import run_tool

from .conftest import new_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS = "kafka.admin.ConfigCommand"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"
TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"


def _tool(main_class: str, *args: str) -> str:
    done = run_tool(main_class, *args)
    assert done.returncode == 0, (main_class, args, done.stdout[-2000:], done.stderr[-3000:])
    return done.stdout


def _rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def test_kafka_tools_manage_topics_groups_configs_and_records(broker: BrokerProcess,
                                                               tmp_path: Path) -> None:
    require_jars()
    bs = broker.kafka_bootstrap
    topic = new_topic(broker, partitions=3)

    producer = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
    for i in range(30):
        producer.produce(topic, value=b"%d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    del producer
    group = f"{topic}-g"
    consumer = Consumer({"bootstrap.servers": bs, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        got = 0
        for _ in range(300):
            m = consumer.poll(0.2)
            got += m is not None and m.error() is None
            if got == 30:
                break
        assert got == 30
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()

    lag = _rows(_tool(GROUPS, "--bootstrap-server", bs, "--describe", "--group", group))
    per_partition = {int(r[2]): r[3:6] for r in lag if r[:2] == [group, topic]}
    assert per_partition == {p: ["10", "10", "0"] for p in range(3)}, lag
    deleted = _tool(GROUPS, "--bootstrap-server", bs, "--delete-offsets", "--group", group,
                    "--topic", f"{topic}:0")
    assert [topic, "0", "Successful"] in _rows(deleted), deleted

    assert "Completed updating config" in _tool(
        CONFIGS, "--bootstrap-server", bs, "--alter", "--add-config", "retention.ms=100000",
        "--entity-type", "topics", "--entity-name", topic)
    configs = _tool(CONFIGS, "--bootstrap-server", bs, "--describe", "--entity-type", "topics",
                    "--entity-name", topic)
    assert re.search(r"retention.ms=100000 sensitive=false "
                     r"synonyms=\{DYNAMIC_TOPIC_CONFIG:retention.ms=100000, "
                     r"DEFAULT_CONFIG:log.retention.ms=604800000\}", configs), configs

    dirs = _tool(LOG_DIRS, "--bootstrap-server", bs, "--describe", "--topic-list", topic)
    report = json.loads(dirs.strip().splitlines()[-1])
    (b,) = report["brokers"]
    sizes = {p["partition"]: p["size"] for d in b["logDirs"] for p in d["partitions"]}
    assert set(sizes) == {f"{topic}-{p}" for p in range(3)} and all(
        s > 0 for s in sizes.values()), report

    offsets = tmp_path / "delete.json"
    offsets.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 1, "offset": 4}]}))
    out = _tool(DELETE_RECORDS, "--bootstrap-server", bs, "--offset-json-file", str(offsets))
    assert re.search(rf"partition: {topic}-1\s+low_watermark: 4", out), out

    producers = _rows(_tool(TRANSACTIONS, "--bootstrap-server", bs, "describe-producers",
                            "--topic", topic, "--partition", "2"))
    assert producers[0][:4] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch",
                                "LastSequence"], producers
    (row,) = producers[1:]
    assert row[1:4] == ["0", "-1", "9"], producers  # epoch 0, no coordinator, 10 records
