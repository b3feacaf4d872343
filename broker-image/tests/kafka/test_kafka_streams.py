"""Kafka Streams runs against Strom unchanged: Apache Kafka's own WordCountDemo (from the
kafka-streams-examples jar) creates its repartition and changelog topics, forms its group with
the StreamsPartitionAssignor (task assignments travel as user data in the subscriptions and
assignments, which the coordinator must relay untouched), and counts words from the input topic
into the output topic."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from strom.client import Admin
from strom.testing import BrokerProcess
from strom.testing.kafka import require_jars
from strom.testing.kafka_tools import running_java

pytestmark = pytest.mark.integration

INPUT, OUTPUT = "streams-plaintext-input", "streams-wordcount-output"
LINES = ["all streams lead to kafka", "hello kafka streams", "join kafka summit"]
EXPECTED = {b"all": 1, b"streams": 2, b"lead": 1, b"to": 1, b"kafka": 3, b"hello": 1, b"join": 1,
            b"summit": 1}


def test_the_word_count_demo_counts_words(broker: BrokerProcess, tmp_path: Path) -> None:
    require_jars()
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(INPUT, partitions=2, replication_factor=1)
        admin.create_topic(OUTPUT, partitions=2, replication_factor=1)
    props = tmp_path / "streams.properties"
    props.write_text(f"bootstrap.servers={broker.kafka_bootstrap}\n"
                     f"state.dir={tmp_path / 'state'}\ncommit.interval.ms=500\n")
    producer = Producer({"bootstrap.servers": broker.kafka_bootstrap})
    for line in LINES:
        producer.produce(INPUT, value=line.encode())
    assert producer.flush(30) == 0
    del producer
    log = tmp_path / "streams.log"
    with running_java("org.apache.kafka.streams.examples.wordcount.WordCountDemo", str(props),
                      log_path=log, name="kafka streams word count") as streams:
        consumer = Consumer({"bootstrap.servers": broker.kafka_bootstrap,
                             "group.id": "word-count-check", "auto.offset.reset": "earliest"})
        counts: dict[bytes, int] = {}
        try:
            consumer.subscribe([OUTPUT])
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and counts != EXPECTED:
                streams.check_running()
                m = consumer.poll(0.5)
                if m is not None and m.error() is None:
                    counts[m.key()] = int.from_bytes(m.value(), "big")
        finally:
            consumer.close()
        text = log.read_text(errors="replace")
    assert counts == EXPECTED, (counts, text[-3000:])
    assert " ERROR " not in text, text[-3000:]
