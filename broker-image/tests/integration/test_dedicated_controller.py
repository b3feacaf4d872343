"""Dedicated controller mode: a ``python -m strom.controller`` process owns the metadata log and
brokers with ``process.roles=broker`` follow it as Raft observers.

Checks what combined mode checks, through the other deployment shape: brokers register and are
unfenced by the dedicated controller, a replicated topic is created through any broker, records
produced with acks=all are read back, and when the partition leader is killed the controller fences
it and elects the other replica.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.client import Admin, Consumer, Producer, TopicPartition
from strom.testing import BrokerProcess, free_port
from strom.testing.controller import controller_process

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONTROLLER_ID = 100


@pytest.fixture()
def controller(tmp_path: Path) -> Iterator[str]:
    voters = f"{CONTROLLER_ID}@127.0.0.1:{free_port()}"
    proc = controller_process(
        CONTROLLER_ID, voters, tmp_path / "controller", tmp_path / "controller.log",
        "--session-timeout-ms", "2000", "--election-timeout-ms", "300",
        "--heartbeat-interval-ms", "50").start()
    try:
        yield voters
    finally:
        proc.stop(10)


def _brokers(tmp_path: Path, voters: str, ids: list[int]) -> list[BrokerProcess]:
    config = {"process.roles": "broker", "controller.quorum.voters": voters,
              "broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "200",
              "default.replication.factor": "2"}
    return [BrokerProcess(tmp_path, broker_id=b, config=config) for b in ids]


def _wait(predicate: object, timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = predicate()  # type: ignore[operator]
            if last:
                return last
        except Exception as exc:  # a broker may be restarting
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def test_brokers_follow_a_dedicated_controller(tmp_path: Path, controller: str) -> None:
    brokers = _brokers(tmp_path, controller, [0, 1])
    try:
        for b in brokers:
            b.start(wait=False)
        for b in brokers:
            b.wait_ready()
        bootstrap = ",".join(b.bootstrap for b in brokers)
        with Admin(bootstrap) as admin:
            cluster = admin.describe_cluster()
            assert cluster.voters == [CONTROLLER_ID]
            assert cluster.controller_id == CONTROLLER_ID
            assert sorted(b.broker_id for b in cluster.brokers) == [0, 1]
            admin.create_topic("t", partitions=1, replication_factor=2)

            def isr() -> list[int]:
                part = admin.describe_topics(["t"])[0].partitions[0]
                return sorted(part.isr) if len(part.isr) == 2 else []

            _wait(isr, 30, "both replicas in the ISR")
            with Producer(bootstrap, acks="all") as producer:
                for i in range(100):
                    producer.send("t", b"%d" % i)
                producer.flush(30)
            leader = admin.describe_topics(["t"])[0].partitions[0].leader
            brokers[leader].kill()
            other = 1 - leader

            def led_by_other() -> bool:
                with Admin(brokers[other].bootstrap) as survivor:
                    return bool(survivor.describe_topics(["t"])[0].partitions[0].leader == other)

            _wait(led_by_other, 30, f"broker {other} to lead t-0")
        tp = TopicPartition("t", 0)
        with Consumer(brokers[other].bootstrap) as consumer:
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < 100 and time.monotonic() < deadline:
                got.extend(r.value or b"" for r in consumer.poll(timeout_ms=500))
        assert got == [b"%d" % i for i in range(100)]
    finally:
        for b in brokers:
            b.stop()
