"""Steps the differential compatibility suite (``e2e/compat/``) shares between its client
modules: creating a topic and waiting for its leaders, filling one, the record set with every
field a record can carry, reading a topic back as comparable tuples, and polling a
kafka-python consumer from its own thread (:func:`polled`).

Each scenario of the suite runs once against Apache Kafka and once against Strom with one
client library (confluent-kafka, kafka-python, aiokafka, Kafka's Java tools); these steps use
confluent-kafka, so a scenario written with another client can check that what it stored reads
back the same through librdkafka. pytest's importlib mode keeps test modules from importing one
another, hence a module here. confluent-kafka is a test dependency: it is imported in the
functions, as in :mod:`strom.testing.kafka`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["BASE_TS", "create_topic", "polled", "read_all", "records_with_everything",
           "topic_with_records"]

#: ms: explicit create times (2023), so both servers store the same ones.
BASE_TS = 1_700_000_000_000


def create_topic(bootstrap: str, topic: str, partitions: int = 1, **configs: str) -> None:
    """Create ``topic`` and wait until every partition has a leader in the metadata.

    No time-based retention: the records carry create times of 2023, which the 7-day default
    would delete at the next retention check (Kafka: every 5 min)."""
    create_led_topic(bootstrap, topic, partitions, configs={"retention.ms": "-1", **configs},
                     timeout_s=30)


def create_led_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int = 1,
                     configs: dict[str, str] | None = None, timeout_s: float = 60.0) -> None:
    """Create ``topic`` through the Kafka protocol and wait until every partition has a leader
    in the metadata: a produce before that (acks=0 above all) can be lost on either server."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                  replication_factor=replication_factor,
                                  config=configs or {})])[topic].result(timeout_s)
    wait_for_led_topic(admin, topic, partitions, timeout_s)


def wait_for_led_topic(admin: Any, topic: str, partitions: int, timeout_s: float = 30.0,
                       failure: str | None = None) -> None:
    """Wait until ``admin``'s metadata shows ``topic`` with ``partitions`` partitions, each
    led; AssertionError (``failure``, or a default naming the topic) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=5).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions \
                and all(p.leader >= 0 for p in meta.partitions.values()):
            return
        time.sleep(0.1)
    raise AssertionError(failure or f"{topic}: no leader for every partition after "
                                    f"{timeout_s:g} s")


def topic_with_records(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    """A new topic whose partition ``p`` holds the values ``p-0``, ``p-1``, ... (no keys)."""
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, f"{p}-{i}".encode(), partition=p)
    assert producer.flush(30) == 0


def read_all(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple[Any, ...]]:
    """Every record of ``topic`` from the beginning, as (partition, offset, key, value,
    headers, timestamp type, timestamp), sorted by partition and offset."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            ts_type, ts = msg.timestamp()
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value(),
                        msg.headers(), ts_type, ts))
    finally:
        consumer.close()
    assert len(got) == count, f"read {len(got)} of {count} records"
    return sorted(got, key=lambda r: (r[0], r[1]))


def records_with_everything(n: int) -> list[dict[str, Any]]:
    """Keys (some null), values (one empty, one null), headers (none, one, repeated keys, a
    null value) and explicit timestamps, spread over three partitions by hand; as
    confluent-kafka's ``produce()`` keyword arguments."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        record: dict[str, Any] = {
            "partition": i % 3,
            "key": None if i % 4 == 0 else f"k{i}".encode(),
            "value": b"" if i == 5 else None if i == 7 else f"value-{i}".encode() * (1 + i % 3),
            "timestamp": BASE_TS + 1000 * i,
        }
        if i % 3 == 1:
            record["headers"] = [("h", f"{i}".encode()), ("h", b"again"), ("empty", None)]
        out.append(record)
    return out


@contextlib.contextmanager
def polled(consumer: Any, timeout_ms: int = 1000) -> Iterator[None]:
    """Poll a kafka-python ``KafkaConsumer`` from its own thread until the block ends, as an
    application's consumer loop does; an exception raised by ``poll()`` is raised at the end.

    kafka-python 3.0.12 takes part in its group only inside ``poll()``: a JoinGroup/SyncGroup
    round that completes while no ``poll()`` of that consumer is running is dropped
    (``join_group_async`` sees the finished task, starts a new JoinGroup and never reads the
    result). A leader that drops its round re-joins the Stable group, which starts another
    round on Kafka and Strom alike. Two consumers polled in turns from one thread made every
    round end inside the other consumer's ``poll()`` (the follower's rejoin completes it), and
    rounds followed one another until the leader's answers happened to come during its own
    (67 rounds in 29 s seen on Strom, 17 on Kafka; docs/decisions.md "Consumer groups in the
    compat suite"). A consumer polled without pause drops a round only in the gap between two
    calls, and each call is long (``timeout_ms``, 1 s) so that a round rarely spans two: a
    round that the leader re-joins for a metadata change (its first assignment was made
    without the topic's metadata) is lost outright when the call that started it returns
    first, since its own assignment already made ``need_rejoin()`` false (seen 2 of 15 times
    on Kafka with 100 ms calls). Ask for the topic's partitions before polling
    (``partitions_for_topic``) so a first assignment has them."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            while not stop.is_set():
                consumer.poll(timeout_ms=timeout_ms)
        except BaseException as exc:  # handed to the test at the end of the block
            failures.append(exc)

    thread = threading.Thread(target=run, name="polled-consumer", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)
    if thread.is_alive():
        raise AssertionError("a polled consumer's poll() did not return within 30 s")
    if failures:
        raise failures[0]
