"""Kafka Streams beside Apache Kafka: Kafka's own ``WordCountDemo`` (kafka-streams-examples,
a Java Streams application with a repartition topic and a changelog-backed RocksDB store) run
on the same input against Kafka and against Strom; the word counts it writes are compared, and
the time it takes to count the input gives a throughput ratio.

One run: the input and output topics are created (2 partitions each; the demo's own internal
topics it creates itself through the admin API), the application started and warmed up (one
line counted end to end, so the JVM start and the group's first rebalance are not timed), then
``lines`` lines are produced (confluent-kafka) in equal batches, each once the previous one is
counted; a batch's clock stops when the output topic holds every word's count after it. The
figure is the median batch's input lines per second. The demo's output value is the count as
a big-endian long; with its record cache off every input word emits one update, so the output
carries one record per word read. The application id is the demo's, fixed: one run per cluster.
"""

from __future__ import annotations

import random
import re
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.kafka_workloads import consume_arrived

INPUT, OUTPUT = "streams-plaintext-input", "streams-wordcount-output"
DEMO = "org.apache.kafka.streams.examples.wordcount.WordCountDemo"
WARMUP = "warmupword"
#: The vocabulary of the input: enough distinct keys to spread over both partitions.
VOCABULARY = 200
WORDS_PER_LINE = 8


def make_lines(count: int, seed: int = 20) -> list[str]:
    """``count`` lines of lowercase words (the same for a given seed)."""
    rng = random.Random(seed)
    words = [f"w{i:03d}" for i in range(VOCABULARY)]
    return [" ".join(rng.choice(words) for _ in range(WORDS_PER_LINE)) for _ in range(count)]


def expected_counts(lines: list[str]) -> dict[str, int]:
    """What WordCountDemo computes: lower-cased, split on non-word characters."""
    counts: Counter[str] = Counter()
    for line in lines:
        counts.update(w for w in re.split(r"\W+", line.lower()) if w)
    return dict(counts)


def _create_topics(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, num_partitions=2, replication_factor=1)
                                   for t in (INPUT, OUTPUT)])
    for future in futures.values():
        future.result(timeout=60)


def word_count(bootstrap: str, workdir: Path, lines: list[str], batches: int = 1,
               timeout_s: float = 300.0) -> tuple[dict[str, int], list[float]]:
    """Run the demo on ``lines`` against ``bootstrap``, fed in ``batches`` equal parts, each
    once the previous one is fully counted; (the last count of every word seen in the output,
    seconds of each batch from its first line to the last count it changes). A demo that exits,
    or counts that are not reached within ``timeout_s`` of a batch, raise RuntimeError."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    from strom.testing.kafka_tools import running_java

    workdir.mkdir(parents=True, exist_ok=True)
    _create_topics(bootstrap)
    props = workdir / "streams.properties"
    props.write_text(f"bootstrap.servers={bootstrap}\nstate.dir={workdir / 'state'}\n"
                     "commit.interval.ms=500\n")
    counts: dict[str, int] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wc-check-{time.time_ns()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(OUTPUT, p, OFFSET_BEGINNING) for p in range(2)])
    log = workdir / "streams.log"

    def read_until(done: Any, deadline: float, what: str, app: Any) -> None:
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"word count against {bootstrap}: {what} not within "
                                   f"{timeout_s:.0f} s; demo log:\n{app.log_tail()}")
            app.check_running()
            for msg in consume_arrived(consumer, 0.2):
                if msg.error() is None and msg.key() is not None:
                    counts[msg.key().decode()] = int.from_bytes(msg.value(), "big")

    try:
        with running_java(DEMO, str(props), log_path=log, name="kafka streams word count",
                          heap=("-Xmx384m",)) as app:
            producer.produce(INPUT, WARMUP.encode())
            producer.flush(60)
            read_until(lambda: WARMUP in counts, time.monotonic() + timeout_s,
                       "the warm-up line's count", app)
            size = -(-len(lines) // batches)
            elapsed: list[float] = []
            for first in range(0, len(lines), size):
                want = expected_counts(lines[:first + size])
                start = time.monotonic()
                for line in lines[first:first + size]:
                    producer.produce(INPUT, line.encode())
                    producer.poll(0)
                producer.flush(120)
                read_until(lambda w=want: all(counts.get(k) == n for k, n in w.items()),
                           start + timeout_s, "every word's final count", app)
                elapsed.append(time.monotonic() - start)
    finally:
        consumer.close()
    counts.pop(WARMUP, None)
    return counts, elapsed


def compare(kafka_bootstrap: str, strom_bootstrap: str, workdir: Path, lines: int,
            batches: int = 1) -> dict[str, Any]:
    """The demo on the same ``lines`` against both, in ``batches``; the counts, and input
    lines per second of the median batch (every batch's in ``batch lines/s``)."""
    text = make_lines(lines)
    out: dict[str, Any] = {"expected": expected_counts(text), "lines": lines}
    per_batch = -(-lines // batches)
    for name, bootstrap in (("kafka", kafka_bootstrap), ("strom", strom_bootstrap)):
        counts, seconds = word_count(bootstrap, workdir / name, text, batches)
        rates = [min(per_batch, lines - i * per_batch) / s for i, s in enumerate(seconds)]
        out[name] = {"counts": counts, "seconds": seconds, "batch lines/s": rates,
                     "lines/s": statistics.median(rates)}
    return out
