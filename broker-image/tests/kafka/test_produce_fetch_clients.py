"""Real Kafka clients (librdkafka via confluent-kafka, kafka-python) produce and consume through
a broker's Kafka listener; Strom's own client sees the same records and offsets."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from strom.client import Consumer as StromConsumer
from strom.client import Producer as StromProducer
from strom.client import TopicPartition as StromTP
from strom.testing import BrokerProcess

from .conftest import new_topic, read_in_group

pytestmark = pytest.mark.integration


def produce(broker: BrokerProcess, topic: str, values: list[bytes], **config: Any
            ) -> list[Message]:
    delivered: list[Message] = []
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append(msg)

    p = Producer({"bootstrap.servers": broker.kafka_bootstrap, "linger.ms": 5, **config})
    for i, v in enumerate(values):
        p.produce(topic, value=v, key=b"k%d" % i, on_delivery=on_delivery,
                  headers=[("i", str(i).encode())])
    assert p.flush(30) == 0
    assert errors == []
    return delivered


def consume(broker: BrokerProcess, topic: str, partitions: int, count: int,
            timeout: float = 30, **config: Any) -> list[Message]:
    c = Consumer({"bootstrap.servers": broker.kafka_bootstrap, "group.id": "unused",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100, **config})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[Message] = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append(m)
        return out
    finally:
        c.close()


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_librdkafka_produces_with_each_acks_and_consumes_by_assign(broker: BrokerProcess,
                                                                   acks: str) -> None:
    topic = new_topic(broker, partitions=2)
    values = [b"v%d" % i for i in range(200)]
    produce(broker, topic, values, acks=acks)
    got = consume(broker, topic, 2, 200)
    assert sorted(m.value() for m in got) == sorted(values)
    for p in (0, 1):
        offsets = [m.offset() for m in got if m.partition() == p]
        assert offsets == list(range(len(offsets)))  # dense, in order


def test_large_fetch_answers_carry_every_record_in_order(broker: BrokerProcess) -> None:
    # 8 MiB per partition: one answer holds several MiB of record sets, written to the socket in
    # pieces straight from the log read (no copy into the frame)
    topic = new_topic(broker, partitions=2)
    values = [i.to_bytes(4, "big") * 256 for i in range(6000)]  # 1 KiB each, ~6 MB in all
    produce(broker, topic, values, **{"batch.size": 1_000_000})
    got = consume(broker, topic, 2, len(values), **{"max.partition.fetch.bytes": 8 << 20,
                                                    "fetch.max.bytes": 64 << 20})
    assert sorted(m.value() for m in got) == sorted(values)
    where = {m.value(): m.partition() for m in got}
    for p in (0, 1):
        mine = [m for m in got if m.partition() == p]
        assert [m.offset() for m in mine] == list(range(len(mine)))
        assert [m.value() for m in mine] == [v for v in values if where[v] == p]  # send order


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_with_headers_round_trip(broker: BrokerProcess, codec: str) -> None:
    topic = new_topic(broker)
    values = [b"%s-%d" % (codec.encode(), i) * 20 for i in range(300)]
    produce(broker, topic, values, **{"compression.type": codec, "acks": "all"})
    got = consume(broker, topic, 1, 300)
    assert [m.value() for m in got] == values
    assert [m.headers() for m in got] == [[("i", str(i).encode())] for i in range(300)]
    assert [m.key() for m in got] == [b"k%d" % i for i in range(300)]


def test_idempotent_producer_writes_each_record_once_in_order(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    values = [b"i%d" % i for i in range(2000)]
    delivered = produce(broker, topic, values, **{"enable.idempotence": True,
                                                   "max.in.flight.requests.per.connection": 5,
                                                   "linger.ms": 0, "batch.num.messages": 50})
    assert [m.offset() for m in delivered] == list(range(2000))
    assert [m.value() for m in consume(broker, topic, 1, 2000)] == values


def test_kafka_producer_and_strom_consumer_see_the_same_records_and_offsets(
        broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    delivered = produce(broker, topic, [b"a%d" % i for i in range(50)], acks="all")
    with StromConsumer(broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([StromTP(topic, 0)])
        records: list[Any] = []
        deadline = time.monotonic() + 20
        while len(records) < 50 and time.monotonic() < deadline:
            records += c.poll(200)
    assert [(r.offset, r.value, r.key) for r in records] == [
        (m.offset(), m.value(), m.key()) for m in delivered]
    assert list(records[0].headers) == [("i", b"0")]


def test_strom_producer_and_kafka_consumer_see_the_same_records_and_offsets(
        broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    with StromProducer(broker.bootstrap, acks="all") as p:
        futures = [p.send(topic, b"s%d" % i, key=b"k", partition=0) for i in range(50)]
        p.flush(20)
        sent = [f.result(10).offset for f in futures]
    got = consume(broker, topic, 1, 50)
    assert [(m.offset(), m.value(), m.key()) for m in got] == [
        (o, b"s%d" % i, b"k") for i, o in enumerate(sent)]


def test_seek_by_timestamp_and_watermarks(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    p = Producer({"bootstrap.servers": broker.kafka_bootstrap})
    for i in range(10):
        p.produce(topic, value=b"t%d" % i, timestamp=1_000_000 + i * 1000)
    assert p.flush(20) == 0
    c = Consumer({"bootstrap.servers": broker.kafka_bootstrap, "group.id": "ts"})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 10)
        found = c.offsets_for_times([TopicPartition(topic, 0, 1_004_500)], timeout=10)
        assert found[0].offset == 5
        beyond = c.offsets_for_times([TopicPartition(topic, 0, 9_000_000)], timeout=10)
        assert beyond[0].offset == -1  # no record at or after it: end (Kafka's answer)
    finally:
        c.close()


def test_kafka_python_produces_and_consumes(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = new_topic(broker)
    producer = KafkaProducer(bootstrap_servers=broker.kafka_bootstrap, acks="all",
                             compression_type="gzip")
    futures = [producer.send(topic, b"kp%d" % i) for i in range(20)]
    producer.flush(20)
    assert [f.get(10).offset for f in futures] == list(range(20))
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.kafka_bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    from kafka import TopicPartition as KTP
    consumer.assign([KTP(topic, 0)])
    values = [m.value for m in consumer][:20]
    consumer.close()
    assert values == [b"kp%d" % i for i in range(20)]


async def test_aiokafka_produces_and_consumes_by_group(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaProducer

    topic = new_topic(broker, partitions=2)
    producer = AIOKafkaProducer(bootstrap_servers=broker.kafka_bootstrap, acks="all",
                                enable_idempotence=True, compression_type="lz4")
    await producer.start()
    try:
        sent = [await producer.send_and_wait(topic, b"a%d" % i, partition=i % 2)
                for i in range(20)]
    finally:
        await producer.stop()
    assert sorted((m.partition, m.offset) for m in sent) == sorted(
        (p, o) for p in (0, 1) for o in range(10))
    values, committed = await read_in_group(broker.kafka_bootstrap, topic, f"{topic}-aio", 20)
    assert sorted(values) == sorted(b"a%d" % i for i in range(20))
    assert committed == 10
