"""The ``strom dev demo`` step that talks to the cluster as an Apache Kafka client would.

Why it exists: Strom's brokers speak Kafka's wire protocol beside gRPC, and the demo shows it
with a real Kafka client (confluent-kafka, i.e. librdkafka): it creates topic ``demo-kafka``
through Kafka's CreateTopics, produces records with an idempotent ``acks=all`` producer, reads
them back with a Kafka consumer and checks each one sits at the offset its acknowledgement gave.
confluent-kafka is an optional dependency (a dev dependency of the repository): without it the
step is skipped with a note saying how to get it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from strom.cli.errors import CliError

KAFKA_TOPIC = "demo-kafka"


@dataclass(frozen=True)
class KafkaStepResult:
    records: int
    seconds: float


def kafka_client_step(kafka_bootstrap: str, records: int, note: Callable[[str], None],
                      timeout_s: float = 60.0) -> KafkaStepResult | None:
    """Produce ``records`` records with confluent-kafka and read them back; None if skipped."""
    try:
        from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
    except ImportError:
        note("skipping the Kafka-client step: confluent-kafka is not installed "
             "(pip install confluent-kafka)")
        return None
    started = time.monotonic()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    try:
        admin.create_topics([NewTopic(KAFKA_TOPIC, 1, -1)])[KAFKA_TOPIC].result(timeout_s)
        note(f"created topic {KAFKA_TOPIC} with a Kafka client (CreateTopics)")
    except Exception as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise CliError(f"the Kafka client could not create {KAFKA_TOPIC} at "
                           f"{kafka_bootstrap}: {exc}") from None
    acked: dict[int, bytes] = {}
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5})
    for i in range(records):
        producer.produce(KAFKA_TOPIC, value=b"kafka-%d" % i, key=b"%d" % (i % 16),
                         on_delivery=on_delivery)
        producer.poll(0)
    left = producer.flush(timeout_s)
    if left or errors or len(acked) != records:
        raise CliError(f"the Kafka producer got {len(acked)} of {records} acknowledgements "
                       f"({left} unsent; errors: {errors[:3]})")
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "strom-demo-kafka",
                         "enable.auto.commit": False})
    try:
        first = min(acked)
        consumer.assign([TopicPartition(KAFKA_TOPIC, 0, first)])
        seen: dict[int, bytes] = {}
        deadline = time.monotonic() + timeout_s
        while len(seen) < records and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None or m.error() is not None:
                continue
            offset, value = m.offset(), m.value()
            if offset is not None and offset in acked and value is not None:
                seen[offset] = value
    finally:
        consumer.close()
    if seen != acked:
        wrong = sorted(o for o in acked if seen.get(o) != acked[o])[:5]
        raise CliError(f"the Kafka consumer read {len(seen)} of {records} records back; "
                       f"first offsets that differ: {wrong}")
    return KafkaStepResult(records, time.monotonic() - started)
