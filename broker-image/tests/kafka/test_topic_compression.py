"""A topic's ``compression.type`` through the Kafka listener: librdkafka creates the topic with
it, produces uncompressed, and the segment on disk holds batches in the topic's codec while the
consumer reads the same records back (the leader recompressed them, as Kafka's does)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.batch import iter_headers
from strom.protocol.records import Compression
from strom.testing import BrokerProcess

pytestmark = pytest.mark.integration


def test_the_log_stores_the_topic_codec(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.kafka_bootstrap})
    admin.create_topics([NewTopic("zstd-topic", 1, 1, config={"compression.type": "zstd"})])[
        "zstd-topic"].result(20)
    producer = Producer({"bootstrap.servers": broker.kafka_bootstrap,
                         "compression.type": "none", "linger.ms": 5})
    values = [b"record %d " % i * 20 for i in range(500)]
    for v in values:
        producer.produce("zstd-topic", v)
    assert producer.flush(30) == 0

    segments = list(broker.data_dir.glob("broker-*/zstd-topic-0/*.log"))
    assert len(segments) == 1
    headers = list(iter_headers(memoryview(segments[0].read_bytes())))
    assert headers and {h.compression for h in headers} == {Compression.ZSTD}
    assert sum(h.records_count for h in headers) == 500

    consumer = Consumer({"bootstrap.servers": broker.kafka_bootstrap, "group.id": "zstd-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe(["zstd-topic"])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 500 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                got.append(message.value())
        assert got == values
    finally:
        consumer.close()
