"""The Kafka-protocol benchmark workloads' pure parts: reading ProducerPerformance's summary."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def parse_producer_performance(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Any]:
    """The benchmarks package lives beside the workspace packages, not in one: put the
    repository root on sys.path for this test only (as ``python -m benchmarks`` does)."""
    monkeypatch.syspath_prepend(str(ROOT))
    module = importlib.import_module("benchmarks.kafka_workloads")
    return module.parse_producer_performance  # type: ignore[no-any-return]

OUTPUT = """\
49981 records sent, 9996.2 records/sec (0.95 MB/sec), 7.4 ms avg latency, 312.0 ms max latency.
100000 records sent, 20251.113811 records/sec (1.93 MB/sec), 5.43 ms avg latency, 312.00 ms \
max latency, 3 ms 50th, 17 ms 95th, 48 ms 99th, 90 ms 99.9th.
"""


def test_the_final_summary_line_is_read(parse_producer_performance: Callable[[str], Any]
                                        ) -> None:
    got = parse_producer_performance(OUTPUT)
    assert got == {"records": 100000.0, "records/s": 20251.113811, "MB/s": 1.93,
                   "avg ms": 5.43, "max ms": 312.0}


def test_output_without_a_summary_is_an_error_showing_the_output(
        parse_producer_performance: Callable[[str], Any]) -> None:
    with pytest.raises(RuntimeError,
                       match=r"(?s)no ProducerPerformance summary.*Connection refused"):
        parse_producer_performance("WARN Connection refused\n")


CONSUMER_OUTPUT = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, \
rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
[2026-11-25 16:36:41,001] INFO [Consumer clientId=perf-consumer-client] Subscribed to \
topic(s): w1-perf0 (org.apache.kafka.clients.consumer.KafkaConsumer)
2026-11-25 16:36:40:864, 2026-11-25 16:36:46:239, 1.9073, 0.3549, 20000, 3720.9302, 3883, \
1492, 1.2784, 13404.8257
"""


def test_consumer_performance_figures_are_read_past_log_lines(monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    module = importlib.import_module("benchmarks.kafka_workloads")
    assert module.parse_consumer_performance(CONSUMER_OUTPUT) == {
        "records": 20000.0, "records/s": 3720.9302, "MB/s": 0.3549,
        "fetch records/s": 13404.8257, "rebalance ms": 3883.0}
    with pytest.raises(RuntimeError, match="no ConsumerPerformance figures"):
        module.parse_consumer_performance("start.time, end.time\n")


def test_end_to_end_latency_summary_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    module = importlib.import_module("benchmarks.kafka_workloads")
    text = "Avg latency: 1.2345 ms\nPercentiles: 50th = 1, 99th = 3, 99.9th = 10\n"
    assert module.parse_end_to_end_latency(text) == {
        "avg ms": 1.2345, "p50 ms": 1.0, "p99 ms": 3.0, "p99.9 ms": 10.0}


def test_producer_performance_percentiles_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    module = importlib.import_module("benchmarks.kafka_workloads")
    assert module.parse_producer_percentiles(OUTPUT) == {
        "p50 ms": 3.0, "p95 ms": 17.0, "p99 ms": 48.0, "p99.9 ms": 90.0}
    with pytest.raises(RuntimeError, match="no ProducerPerformance percentiles"):
        module.parse_producer_percentiles("49981 records sent, 9996.2 records/sec\n")


class _QueuedConsumer:
    """librdkafka's consumer queue as the latency consumer sees it: ``consume(n, timeout)``
    blocks until ``n`` messages are queued or ``timeout`` passes (recorded, not slept)."""

    def __init__(self, queued: list[str]) -> None:
        self.queued = queued
        self.blocked_for: list[float] = []

    def poll(self, timeout: float) -> str | None:
        if not self.queued:
            self.blocked_for.append(timeout)
            return None
        return self.queued.pop(0)

    def consume(self, num_messages: int, timeout: float) -> list[str]:
        if len(self.queued) < num_messages:
            self.blocked_for.append(timeout)
        taken, self.queued = self.queued[:num_messages], self.queued[num_messages:]
        return taken


def test_records_are_taken_as_they_arrive_not_after_the_batch_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    consume_arrived = importlib.import_module("benchmarks.kafka_workloads").consume_arrived
    consumer = _QueuedConsumer(["a", "b", "c"])
    assert consume_arrived(consumer, 0.2) == ["a", "b", "c"]
    assert consumer.blocked_for == [0]  # a short queue never waits for the batch to fill
    assert consume_arrived(consumer, 0.2) == []
    assert consumer.blocked_for == [0, 0.2]  # nothing queued: one bounded wait for the first


def test_strom_beside_kafka_gets_the_reference_settings_it_has(monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """The Strom brokers measured beside the reference Kafka run with the settings the
    reference changes from Kafka's defaults, where Strom has the key: above all no initial
    rebalance delay (ConsumerPerformance's rate counts its fresh group's join; with Strom's
    default 3 s against the reference's 0 it read Strom at 0.2-0.3x of Kafka)."""
    from strom.broker.config import KEYS
    from strom.testing.kafka import reference_settings

    monkeypatch.syspath_prepend(str(ROOT))
    module = importlib.import_module("benchmarks.kafka_workloads")
    for nodes in (1, 3, 5):
        got = module.strom_beside_kafka(nodes, {"log.segment.bytes": "268435456"})
        assert got["group.initial.rebalance.delay.ms"] == "0"
        assert got["log.segment.bytes"] == "268435456"
        shared = {k: v for k, v in reference_settings(min(nodes, 3)).items() if k in KEYS}
        assert {k: got[k] for k in shared} == shared
        assert set(got) <= set(KEYS), "only keys a Strom broker accepts"
    assert module.strom_beside_kafka(1, {"group.initial.rebalance.delay.ms": "5"})[
        "group.initial.rebalance.delay.ms"] == "5", "the caller's config wins"
