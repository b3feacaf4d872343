"""Records in and out, compared between Apache Kafka and Strom with the same client code.

What a client observes must be the same on both: the offsets a producer is told, the records a
consumer reads back (partition, offset, key, value, headers, timestamp and its type), the
earliest / latest offsets, ListOffsets by timestamp, and what a consumer gets when it asks for
an offset that is out of range.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)

from strom.testing.compat import BASE_TS, create_topic, read_all, records_with_everything

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]],
            **config: Any) -> list[tuple[int, int, int | None]]:
    """Send ``records`` (produce() keyword arguments) one at a time, in order; return what each
    delivery report says: (partition, offset, error code or None)."""
    reports: list[tuple[int, int, int | None]] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        reports.append((msg.partition(), msg.offset(), None if err is None else err.code()))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **config})
    for record in records:
        producer.produce(topic, on_delivery=on_delivery, **record)
        producer.poll(0)
    assert producer.flush(30) == 0
    return reports


def test_produced_records_read_back_identically(pair: Any, name: Callable[[str], str]) -> None:
    topic = name("records")
    records = records_with_everything(30)
    seen = {}
    for server in pair.both():
        create_topic(server.bootstrap, topic, 3)
        reports = produce(server.bootstrap, topic, records)
        for p in range(3):  # within a partition, reports come in send order
            offsets = [o for q, o, _ in reports if q == p]
            assert offsets == sorted(offsets), (server.name, p, offsets)
        # across partitions the order of delivery reports is not defined: compare sorted
        seen[server.name] = (sorted(reports), read_all(server.bootstrap, topic, 3,
                                                        len(records)))
    assert seen["strom"][0] == seen["kafka"][0]  # delivery reports: partition, offset, no error
    assert seen["strom"][1] == seen["kafka"][1]
    # what both must show (not only "the same"): offsets 0..9 per partition, create times kept
    assert [r[1] for r in seen["kafka"][1] if r[0] == 0] == list(range(10))
    assert all(r[5] == TIMESTAMP_CREATE_TIME for r in seen["kafka"][1])


def test_idempotent_producer_offsets_and_order(pair: Any, name: Callable[[str], str]) -> None:
    """enable.idempotence (InitProducerId, sequence numbers) with 5 requests in flight: every
    record acknowledged once, in send order, at the same offsets on both."""
    topic = name("idem")
    records = [{"partition": i % 2, "value": f"{i}".encode(), "timestamp": BASE_TS + i}
               for i in range(2000)]
    seen = {}
    for server in pair.both():
        create_topic(server.bootstrap, topic, 2)
        reports = produce(server.bootstrap, topic, records, **{
            "enable.idempotence": True, "acks": "all", "linger.ms": 2,
            "max.in.flight.requests.per.connection": 5, "batch.num.messages": 50})
        values = [(r[0], r[1], r[3]) for r in read_all(server.bootstrap, topic, 2, 2000)]
        seen[server.name] = (sorted(reports), values)
    assert seen["strom"] == seen["kafka"]
    for p in (0, 1):
        assert [int(v) for q, _, v in seen["kafka"][1] if q == p] == list(range(p, 2000, 2))


def test_list_offsets_by_time_and_watermarks(pair: Any, name: Callable[[str], str]) -> None:
    """offsets_for_times (ListOffsets by timestamp) before, between, on and after the records'
    create times, and the low / high watermarks."""
    topic = name("times")
    # non-monotonic times: ListOffsets answers the first offset whose timestamp is >= the asked one
    times = [BASE_TS + t for t in (0, 10, 5, 20, 20, 30, 25)]
    asked = [BASE_TS - 1, BASE_TS, BASE_TS + 4, BASE_TS + 6, BASE_TS + 20, BASE_TS + 26,
             BASE_TS + 30, BASE_TS + 31]
    seen = {}
    for server in pair.both():
        create_topic(server.bootstrap, topic, 1)
        produce(server.bootstrap, topic, [{"value": b"x", "timestamp": t} for t in times])
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "unused"})
        try:
            found = [consumer.offsets_for_times([TopicPartition(topic, 0, t)], timeout=10)[0]
                     for t in asked]
            marks = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        finally:
            consumer.close()
        seen[server.name] = ([(tp.offset, tp.error) for tp in found], marks)
    assert seen["strom"] == seen["kafka"]
    assert [o for o, _ in seen["kafka"][0]] == [0, 0, 1, 1, 3, 5, 5, -1]
    assert seen["kafka"][1] == (0, 7)


@pytest.mark.parametrize("reset", ["earliest", "latest", "error"])
def test_offset_out_of_range(pair: Any, name: Callable[[str], str], reset: str) -> None:
    """A consumer positioned past the end: auto.offset.reset decides, as on Kafka; with
    ``error`` the client reports the broker's OFFSET_OUT_OF_RANGE."""
    topic = name("oor")
    seen = {}
    for server in pair.both():
        create_topic(server.bootstrap, topic, 1)
        produce(server.bootstrap, topic, [{"value": f"{i}".encode()} for i in range(5)])
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": name("g"),
                             "auto.offset.reset": reset, "enable.auto.commit": False})
        events: list[Any] = []
        try:
            consumer.assign([TopicPartition(topic, 0, 100)])
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and len(events) < (5 if reset == "earliest"
                                                                 else 1):
                msg = consumer.poll(0.3)
                if msg is None:
                    if reset == "latest" and time.monotonic() > deadline - 12:
                        break
                    continue
                events.append(msg.error().code() if msg.error() else (msg.offset(),
                                                                       msg.value()))
            position = consumer.position([TopicPartition(topic, 0)])[0].offset
        finally:
            consumer.close()
        seen[server.name] = (events, position)
    assert seen["strom"] == seen["kafka"]
    if reset == "error":
        assert seen["kafka"][0][0] == KafkaError._AUTO_OFFSET_RESET
