"""Fixtures for the Spark connector tests: one SparkSession per test session, real brokers.

Facts measured on the project's 2-core VM that this relies on: Spark's Python workers must run
the venv's interpreter (``PYSPARK_PYTHON``), the driver binds 127.0.0.1, two shuffle partitions and
no UI keep local mode quick, and one shared session saves 5-7 s per test. Without Java the Spark
tests skip with the reason (``strom_spark.java``), and fail under ``CI=true``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.testing import running_broker
from strom.testing.process import starts_processes

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
@starts_processes
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One broker for the Spark suite (tests use their own topics), with fast retention checks so
    the data-loss test sees deleted segments within a second."""
    with running_broker(tmp_path_factory.mktemp("broker"),
                        config={"log.retention.check.interval.ms": 500}) as b:
        yield str(b.bootstrap)


def kafka_connector_jars() -> list[Path]:
    """Spark's Kafka connector jars (Maven, ``kafka-ref/spark-kafka/pom.xml``), or [] when
    Maven or the repository's pom is missing: only the format("kafka") tests need them, and
    they skip then (fail under CI=true)."""
    from strom.testing.kafka_jars import KafkaToolMissing, spark_kafka_jars

    try:
        return spark_kafka_jars()
    except KafkaToolMissing:
        return []


@pytest.fixture(scope="session")
@starts_processes  # the Spark JVM (and its Python workers)
def spark() -> Iterator[Any]:
    from strom.testing.tools import missing
    from strom_spark.java import java_missing

    lacking = java_missing()
    if lacking is not None:
        missing(lacking)
    from pyspark.sql import SparkSession

    import strom_spark

    builder = SparkSession.builder
    jars = kafka_connector_jars()
    if jars:  # Spark's own Kafka source and sink (format("kafka"), test_kafka_format.py)
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
    session = (
        builder.master("local[2]")
        .appName("strom-spark-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    strom_spark.register(session)
    yield session
    session.stop()


_counter = iter(range(1_000_000))


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A fresh topic name per test."""
    return f"{request.node.name.replace('[', '-').replace(']', '')[:40]}-{next(_counter)}"


def create_topic(bootstrap: str, name: str, partitions: int,
                 configs: dict[str, str] | None = None) -> None:
    from strom.client import Admin

    # Tests use fixed timestamps from 1970 or 2023: time-based retention (7 days by default)
    # would delete them at the next (fast) retention check, so it is off unless a test asks.
    with Admin(bootstrap) as admin:
        admin.create_topic(name, partitions, 1, {"retention.ms": "-1", **(configs or {})})


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]],
            *, partition: int | None = None, headers: list[tuple[str, bytes]] | None = None,
            timestamp_ms: int | None = None) -> list[Any]:
    """Send (key, value) pairs with acks=all; return their RecordMetadata."""
    from strom.client import Producer

    with Producer(bootstrap, acks="all", linger_ms=5) as producer:
        futures = [producer.send(topic, v, k, partition=partition, headers=headers,
                                 timestamp_ms=timestamp_ms) for k, v in records]
        producer.flush()
        return [f.result() for f in futures]


def consume_all(bootstrap: str, topic: str) -> list[Any]:
    """Every record of ``topic`` now, in partition then offset order."""
    from strom.client import Consumer, TopicPartition

    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        from strom.client import Admin

        with Admin(bootstrap) as admin:
            n = len(admin.describe_topics([topic])[0].partitions)
        tps = [TopicPartition(topic, p) for p in range(n)]
        ends = consumer.end_offsets(tps)
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        out: list[Any] = []
        deadline = time.monotonic() + 60
        while sum(1 for r in out) < sum(ends.values()) and time.monotonic() < deadline:
            out.extend(consumer.poll(timeout_ms=500, max_records=10_000))
        return sorted(out, key=lambda r: (r.partition, r.offset))


@pytest.fixture(scope="session")
def helpers() -> Any:
    class H:
        create_topic = staticmethod(create_topic)
        produce = staticmethod(produce)
        consume_all = staticmethod(consume_all)

    return H
