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
