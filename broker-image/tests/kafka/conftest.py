"""Real brokers for the Kafka-listener tests, shared per module (starting one takes seconds)."""

from __future__ import annotations

import io
import itertools
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer

from strom.client import Admin
from strom.testing import BrokerProcess, running_broker
from strom.testing.process import starts_processes

_names = itertools.count()


@pytest.fixture(scope="module")
@starts_processes
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from checked_broker(tmp_path_factory, "kafka", {"group.initial.rebalance.delay.ms": "0"})


def checked_broker(tmp_path_factory: pytest.TempPathFactory, name: str,
                   config: dict[str, str]) -> Iterator[BrokerProcess]:
    """A module fixture's broker with ``config``, checked for internal errors afterwards."""
    with running_broker(tmp_path_factory.mktemp(name), config=config) as b:
        yield b
    assert_no_internal_errors(b)


async def read_in_group(bootstrap: str, topic: str, group: str, count: int
                        ) -> tuple[list[bytes], int | None]:
    """aiokafka in ``group`` reads ``count`` values of ``topic`` (bounded: 60 s), commits,
    and returns them with partition 0's committed offset."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            values += [m.value for msgs in batches.values() for m in msgs]
        await consumer.commit()
        committed: int | None = await consumer.committed(TopicPartition(topic, 0))
    finally:
        await consumer.stop()
    return values, committed


def assert_no_internal_errors(broker: BrokerProcess) -> None:
    """A handler that failed inside the broker closed a client's connection; clients retry, so
    only the broker's log tells: it must not have a traceback from the Kafka front."""
    log = broker.stderr_path.read_text(errors="replace")
    failures = [line for line in log.splitlines()
                if "ERROR" in line and ("strom.broker.kafka" in line or "asyncio" in line)]
    assert not failures, "\n".join(failures[:5])


def new_topic(broker: BrokerProcess, partitions: int = 1, rf: int = 1) -> str:
    """A fresh topic, created through Strom's own admin client."""
    name = f"k{next(_names)}"
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(name, partitions=partitions, replication_factor=rf)
    return name


def kafka_call(port: int, api_key: int, version: int, body: Any, response: Any) -> Any:
    """One raw request over a new connection (flexible versions: header v2 / response v1)."""
    buffer = io.BytesIO()
    entity_writer(RequestHeader)(buffer, RequestHeader(
        request_api_key=api_key, request_api_version=version, correlation_id=1,
        client_id="raw"))
    entity_writer(type(body))(buffer, body)
    data = buffer.getvalue()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(struct.pack(">i", len(data)) + data)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        frame = s.recv(size, socket.MSG_WAITALL)
    value, _ = entity_reader(response)(frame, 5)  # correlation id + empty tagged fields
    return value
