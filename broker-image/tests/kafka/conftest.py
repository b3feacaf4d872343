"""Real brokers for the Kafka-listener tests, shared per module (starting one takes seconds)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from strom.client import Admin
from strom.testing import BrokerProcess, running_broker

_names = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("kafka"),
                        config={"group.initial.rebalance.delay.ms": "0"}) as b:
        yield b


def new_topic(broker: BrokerProcess, partitions: int = 1, rf: int = 1) -> str:
    """A fresh topic, created through Strom's own admin client."""
    name = f"k{next(_names)}"
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(name, partitions=partitions, replication_factor=rf)
    return name
