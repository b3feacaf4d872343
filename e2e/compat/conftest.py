"""The two servers every differential scenario runs against: one Apache Kafka node (the
reference, :mod:`strom.testing.kafka`) and one Strom broker through its Kafka listener.

Both start once for the package (Kafka takes 10-35 s on this VM) with the settings a scenario's
result depends on made equal: no automatic topic creation (Strom's default; Kafka's default is
on, see docs/kafka-protocol.md), a 0 ms initial rebalance delay, one partition by default.
Scenarios create fresh topic and group names, so they do not see each other's data.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from strom.testing import BrokerProcess, running_broker
from strom.testing.kafka import KafkaCluster, require_jars, running_kafka

#: The settings both servers get (Kafka's key names; Strom uses the same ones).
COMMON = {"auto.create.topics.enable": "false", "group.initial.rebalance.delay.ms": "0",
          "num.partitions": "1"}

_names = itertools.count()


@dataclass(frozen=True)
class Server:
    """One side of a comparison: a name for messages, its Kafka-protocol bootstrap address and
    its broker count."""

    name: str
    bootstrap: str
    brokers: int = 1


@dataclass(frozen=True)
class Pair:
    kafka: Server
    strom: Server
    kafka_cluster: KafkaCluster
    strom_broker: BrokerProcess

    def both(self) -> tuple[Server, Server]:
        return self.kafka, self.strom


def fresh(prefix: str) -> str:
    """A topic or group name used once per session (the same name on both servers)."""
    return f"{prefix}-{next(_names)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def name() -> Callable[[str], str]:
    """``name("t")``: a fresh topic or group name (the test modules cannot import conftest)."""
    return fresh


@pytest.fixture(scope="package")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    require_jars()
    with running_kafka(1, root=tmp_path_factory.mktemp("ref"), config=COMMON) as kafka, \
            running_broker(tmp_path_factory.mktemp("strom"), config=COMMON) as broker:
        yield Pair(Server("kafka", kafka.bootstrap), Server("strom", broker.kafka_bootstrap),
                   kafka, broker)
