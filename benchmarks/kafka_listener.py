"""The Kafka listener against the gRPC path on the same broker, same run (issue 14, section
``kafka-listener``): is the second front as fast as the first?

One Strom broker; the same workloads as section ``single`` (``1p-100B``, ``8p-1KiB``: produce at
full speed, catch-up from offset 0; end-to-end latency at a fixed rate) run alternately through
its gRPC port with Strom's own Python client and through its Kafka listener with confluent-kafka
(librdkafka), each on fresh topics, median of ``repeats``. Rows ``strom gRPC (strom client)`` and
``strom Kafka listener (confluent-kafka)``, the latter with its ratio to the former: the issue's
targets are throughput >= 0.8x of gRPC and end-to-end p99 no worse.

What differs besides the front is the client: Strom's client is Python over a compiled
RecordBatch codec; librdkafka is C. So a ratio says what a user gets with each path, not the
servers' cost alone (the broker's CPU time per run is in each row's ``extra`` for that). Rows
``strom gRPC (raw client)`` and ``strom Kafka listener (raw client)`` answer the target as the
issue writes it, with the same client-side cost on both paths (:mod:`benchmarks.raw_compare`):
records/s and the broker's CPU per record, produce and catch-up.
Writes ``results/kafka-listener.png`` when matplotlib is installed (it is not a dependency).
"""

from __future__ import annotations

import functools
import os
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import kafka_workloads as kw
from benchmarks import raw_compare
from benchmarks import strom_workloads as sw
from benchmarks.harness import Result, percentile
from benchmarks.raw_compare import cpu_seconds

GRPC = "strom gRPC (strom client)"
KAFKA = "strom Kafka listener (confluent-kafka)"
KAFKA_DEFAULT_FETCH = "strom Kafka listener (confluent-kafka, fetch defaults)"
#: librdkafka's own fetch sizes (1 MiB per partition, 50 MiB per fetch) instead of the 8 / 64 MiB
#: every catch-up row uses: smaller responses pipeline better through the listener (measured).
DEFAULT_FETCH = {"max.partition.fetch.bytes": 1 << 20, "fetch.max.bytes": 52_428_800}


def produce_requests(metrics_url: str) -> float:
    """The Produce requests the broker has served through either front (its
    ``strom_broker_requests`` counter): per run, the records each request carried. 30 s: a
    broker hosting 10,000 partitions takes up to a second to answer ``/metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(metrics_url, timeout=30) as resp:
        text = resp.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "strom_broker_requests_total" and s.labels.get("api") == "Produce")


def _broker_cpu(runs: list[float], records: int) -> dict[str, float]:
    """The broker's CPU in the median run: what the server spent, whichever client is the
    limit (confluent-kafka's Python consume loop reads Apache Kafka at the same rate)."""
    median = sorted(runs)[(len(runs) - 1) // 2]
    return {"broker_cpu_s_per_run": median, "broker_cpu_us_per_record": median / records * 1e6}


def run(params: dict[str, Any], results: list[Result],
        progress: Callable[[str], None]) -> list[Result]:
    from strom.testing import running_broker

    reps = int(params["repeats"])
    rate, secs = int(params["latency_rate"]), float(params["latency_seconds"])
    workloads = [("1p-100B", 1, int(params["records_100b"]), 100),
                 ("8p-1KiB", 8, int(params["records_1k"]), 1024)]
    rows: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="strom-bench-listener-") as tmp, \
            running_broker(Path(tmp), config={"log.segment.bytes": str(256 << 20)}) as broker:
        create = functools.partial(sw.create_topic, broker.bootstrap)
        paths: dict[str, tuple[str, Any]] = {GRPC: (broker.bootstrap, sw),
                                             KAFKA: (broker.kafka_bootstrap, kw)}
        warm = 20_000 if reps == 1 else 200_000
        for system, (bs, client) in paths.items():
            progress(f"kafka-listener: warm-up of {system}, {warm:,} records")
            topic = f"warmup-{'g' if system == GRPC else 'k'}"
            create(topic, 1)
            client.produce(bs, topic, warm, 100)
            client.consume_all(bs, topic, 1, warm, 100)
        for label, parts, n, size in workloads:
            produced: dict[str, list[Any]] = {GRPC: [], KAFKA: []}
            consumed: dict[str, list[Any]] = {GRPC: [], KAFKA: []}
            consumed_default: list[Any] = []
            cpu: dict[str, list[float]] = {GRPC: [], KAFKA: []}
            cpu_read: dict[str, list[float]] = {GRPC: [], KAFKA: [], KAFKA_DEFAULT_FETCH: []}
            for rep in range(reps):
                for system, (bs, client) in paths.items():
                    topic = f"{label}-{rep}-{'g' if system == GRPC else 'k'}"
                    create(topic, parts)
                    progress(f"kafka-listener: {system}, {label}, run {rep + 1}/{reps}")
                    before = cpu_seconds(broker.pid)
                    produced[system].append(client.produce(bs, topic, n, size))
                    middle = cpu_seconds(broker.pid)
                    cpu[system].append(middle - before)
                    consumed[system].append(client.consume_all(bs, topic, parts, n, size))
                    cpu_read[system].append(cpu_seconds(broker.pid) - middle)
                    if system == KAFKA:
                        before = cpu_seconds(broker.pid)
                        consumed_default.append(kw.consume_all(
                            bs, topic, parts, n, size, consumer_config=DEFAULT_FETCH))
                        cpu_read[KAFKA_DEFAULT_FETCH].append(cpu_seconds(broker.pid) - before)
            for system in paths:
                peers = [GRPC] if system == KAFKA else []
                p, c = sw.median_run(produced[system]), sw.median_run(consumed[system])
                extra = _broker_cpu(cpu[system], n)
                rows.append(Result(system, label, "produce", p.records_per_s, "records/s",
                                   peers=list(peers), extra={
                                       "runs": [t.records_per_s for t in produced[system]],
                                       **extra}))
                rows.append(Result(system, label, "produce MB/s", p.mb_per_s, "MB/s",
                                   peers=list(peers)))
                rows.append(Result(system, label, "consume", c.records_per_s, "records/s",
                                   peers=list(peers), extra={
                                       "runs": [t.records_per_s for t in consumed[system]],
                                       **_broker_cpu(cpu_read[system], n)}))
            d = sw.median_run(consumed_default)
            rows.append(Result(KAFKA_DEFAULT_FETCH, label, "consume", d.records_per_s,
                               "records/s", peers=[GRPC], extra={
                                   "runs": [t.records_per_s for t in consumed_default],
                                   "consumer": DEFAULT_FETCH,
                                   **_broker_cpu(cpu_read[KAFKA_DEFAULT_FETCH], n)}))
        # The target as issue 14 writes it: the same client-side cost on both paths.
        rows += raw_compare.measure(broker.bootstrap, broker.kafka_bootstrap, broker.pid,
                                    create, workloads, reps, int(params["listener_raw_read"]),
                                    progress)
        latency_runs: list[tuple[str, str, Callable[[str], list[float]]]] = [
            (GRPC, "", lambda t: sw.end_to_end_latency(broker.bootstrap, t, 1, rate, secs)),
            (KAFKA, "", lambda t: kw.end_to_end_latency(broker.kafka_bootstrap, t, 1, rate,
                                                        secs)),
            # librdkafka pipelines up to 1,000,000 requests per connection by default, and at
            # linger.ms=0 each carries one record: the broker then serves one request per
            # record. With 5 in flight (the idempotent producer's and Java's default) records
            # that arrive meanwhile share the next request, as the Strom client's do.
            (KAFKA, ", max.in.flight=5",
             lambda t: kw.end_to_end_latency(broker.kafka_bootstrap, t, 1, rate, secs,
                                             producer_config={"max.in.flight": 5})),
        ]
        # Alternated per repeat, like the throughput rows; each percentile is the median of
        # the runs' percentiles.
        per_run: dict[int, list[list[float]]] = {i: [] for i in range(len(latency_runs))}
        # What each run's tail is made of (docs/decisions.md "The Kafka listener's e2e tail
        # under load"): the broker's CPU, its Produce requests (records per request) and the
        # load, in run order beside the percentiles.
        conditions: dict[int, list[dict[str, float]]] = {i: [] for i in range(len(latency_runs))}
        for rep in range(reps):
            for i, (system, variant, measure) in enumerate(latency_runs):
                topic = f"latency-{i}-{rep}"
                create(topic, 1)
                progress(f"kafka-listener: {system}{variant}, end-to-end latency at {rate:,}/s "
                         f"for {secs:g} s, run {rep + 1}/{reps}")
                load, cpu, produces = os.getloadavg()[0], cpu_seconds(broker.pid), \
                    produce_requests(broker.metrics_url)
                per_run[i].append(measure(topic))
                requests = produce_requests(broker.metrics_url) - produces
                conditions[i].append({
                    "broker_cpu_s": cpu_seconds(broker.pid) - cpu,
                    "records_per_produce_request": len(per_run[i][-1]) / max(requests, 1),
                    "load_avg_1m": (load + os.getloadavg()[0]) / 2})
        for i, (system, variant, _) in enumerate(latency_runs):
            for q in (50, 99):
                by_run = [percentile(lat, q) for lat in per_run[i]]
                values = sorted(by_run)
                rows.append(Result(f"{system}{variant}", "1p-100B", f"e2e p{q:g} @{rate}/s",
                                   values[(len(values) - 1) // 2], "ms",
                                   higher_is_better=False,
                                   peers=[GRPC] if system == KAFKA else [],
                                   extra={"runs": values, "by_run": [
                                       {f"p{q:g}_ms": v, **c}
                                       for v, c in zip(by_run, conditions[i], strict=True)]}))
    results.extend(rows)
    return rows


def plot(rows: list[Result], path: Path) -> bool:
    """Bars: each throughput row of both paths (raw clients included), the broker's CPU per
    record of the raw clients' rows, and the latency rows; False without matplotlib."""
    try:
        import matplotlib  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]

    fig, (top, cpu, bottom) = plt.subplots(1, 3, figsize=(15, 4))
    for ax, unit in ((top, "records/s"), (cpu, "us"), (bottom, "ms")):
        keys = sorted({(r.workload, r.metric) for r in rows if r.unit == unit})
        systems = list(dict.fromkeys(r.system for r in rows if r.unit == unit))
        for i, system in enumerate(systems):
            values = {(r.workload, r.metric): r.value for r in rows
                      if r.system == system and r.unit == unit}
            width = 0.8 / len(systems)
            ax.bar([k + i * width for k in range(len(keys))],
                   [values.get(k, 0.0) for k in keys], width=width, label=system)
        ax.set_xticks([k + 0.4 for k in range(len(keys))],
                      [f"{w}\n{m.removesuffix(' broker CPU/record')}" for w, m in keys],
                      fontsize=7)
        ax.set_ylabel("broker CPU us per record" if unit == "us" else unit)
        if unit != "us":
            # the default-pipelining latency is 100x the others; the raw clients read 10x
            # faster than the real ones
            ax.set_yscale("log")
        ax.legend(fontsize=7)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return True
