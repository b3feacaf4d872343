"""Kafka Streams (Kafka's own WordCountDemo) on the same input against Apache Kafka and against
Strom: the word counts it writes must be the same on both, and right
(``benchmarks/kafka_streams.py`` runs it; its benchmark section adds the throughput ratio)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

# two Streams JVMs (one per server) and their first rebalances: ~60-120 s at load 10-20
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
LINES = 2000


def test_word_count_gives_the_same_counts_on_kafka_and_strom(
        pair: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # the benchmarks package lives at the root
    streams = importlib.import_module("benchmarks.kafka_streams")
    got = streams.compare(pair.kafka.bootstrap, pair.strom.bootstrap, tmp_path, LINES)
    assert got["kafka"]["counts"] == got["expected"]
    assert got["strom"]["counts"] == got["kafka"]["counts"]
    assert sum(got["expected"].values()) == LINES * streams.WORDS_PER_LINE
