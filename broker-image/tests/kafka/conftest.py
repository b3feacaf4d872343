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
    assert_no_internal_errors(b)


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
