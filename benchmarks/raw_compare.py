"""The Kafka listener against the gRPC path with the same client-side cost (issue 14's target as
written), part of section ``kafka-listener``.

The raw clients (:mod:`benchmarks.raw_grpc`, :mod:`benchmarks.raw_kafka`) run in the benchmark
process and differ only in the protocol: the same pre-built RecordBatch (about 64 KiB of values)
to each partition per Produce, acks=1, one request in flight; catch-up from offset 0 with
sequential Fetch requests for every partition at its next offset, the same max bytes as the
real clients' rows (64 MiB per response, 8 MiB per partition), records counted from batch
headers, the topic read again from offset 0 until ``read_at_least`` records are read (page
cache, as the first pass). Per workload and repeat both paths run on fresh topics,
alternated (the order swapped on every other repeat); the medians of the repeats, the
listener's ratio to gRPC, and the broker's CPU per record (``/proc/PID/stat``) of each
median run.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import raw_grpc, raw_kafka
from benchmarks import strom_workloads as sw
from benchmarks.harness import Result
from benchmarks.thread_cpu import CLK_TCK, parse_stat_ticks

GRPC_RAW = "strom gRPC (raw client)"
KAFKA_RAW = "strom Kafka listener (raw client)"
BATCH_VALUE_BYTES = 64 << 10
FETCH_MAX_BYTES, PARTITION_MAX_BYTES = 64 << 20, 8 << 20


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    return parse_stat_ticks(Path(f"/proc/{pid}/stat").read_text()) / CLK_TCK


def batch_records(value_size: int) -> int:
    """Records per produced batch: about 64 KiB of values."""
    return max(1, BATCH_VALUE_BYTES // value_size)


def passes(records: int, read_at_least: int) -> int:
    """Catch-ups of a topic of ``records`` that read at least ``read_at_least`` (a run of one
    would be a few answers, shorter than the broker's CPU clock tick counts well)."""
    return max(1, -(-read_at_least // records))


def read(client: Any, topic: str, parts: int, records: int, size: int, times: int
         ) -> sw.Throughput:
    """``times`` catch-ups of ``topic`` from offset 0 as one run."""
    runs = [client.catch_up(topic, parts, records, size, max_bytes=FETCH_MAX_BYTES,
                            partition_max_bytes=PARTITION_MAX_BYTES) for _ in range(times)]
    return sw.Throughput(sum(r.records for r in runs), sum(r.seconds for r in runs),
                         sum(r.bytes for r in runs))


def median_index(values: list[float]) -> int:
    """The index of the median value (the lower middle one of an even count)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    return order[(len(order) - 1) // 2]


def rows_for(system: str, label: str, metric: str, runs: list[sw.Throughput],
             cpu: list[float], peers: list[str], client_cpu: list[float] | None = None,
             load: list[float] | None = None) -> list[Result]:
    """The median run's records/s and the broker's CPU per record in that same run (the
    benchmark process's own CPU per record and the load average in ``extra``: which side
    was the limit)."""
    rates = [t.records_per_s for t in runs]
    m = median_index(rates)
    us = cpu[m] / runs[m].records * 1e6
    return [
        Result(system, label, metric, rates[m], "records/s", peers=list(peers), extra={
            "runs": rates, "broker_cpu_s": cpu, "records": runs[m].records,
            "broker_cpu_us_per_record": us,
            "client_cpu_us_per_record": [c / t.records * 1e6 for c, t in
                                         zip(client_cpu or [], runs, strict=False)],
            "load_avg": load or []}),
        Result(system, label, f"{metric} broker CPU/record", us, "us",
               higher_is_better=False, peers=list(peers), extra={
                   "runs": [c / t.records * 1e6 for c, t in zip(cpu, runs, strict=True)]}),
    ]


def measure(bootstrap: str, kafka_bootstrap: str, broker_pid: int,
            create: Callable[[str, int], None],
            workloads: list[tuple[str, int, int, int]], reps: int, read_at_least: int,
            progress: Callable[[str], None]) -> list[Result]:
    clients: dict[str, Callable[[], Any]] = {
        GRPC_RAW: lambda: raw_grpc.RawGrpc(bootstrap),
        KAFKA_RAW: lambda: raw_kafka.RawKafka(kafka_bootstrap)}
    rows: list[Result] = []
    for label, parts, n, size in workloads:
        produced: dict[str, list[sw.Throughput]] = {s: [] for s in clients}
        consumed: dict[str, list[sw.Throughput]] = {s: [] for s in clients}
        cpu_write: dict[str, list[float]] = {s: [] for s in clients}
        cpu_read: dict[str, list[float]] = {s: [] for s in clients}
        mine_write: dict[str, list[float]] = {s: [] for s in clients}
        mine_read: dict[str, list[float]] = {s: [] for s in clients}
        load: dict[str, list[float]] = {s: [] for s in clients}
        for rep in range(reps):
            order = list(clients) if rep % 2 == 0 else list(reversed(clients))
            for system in order:
                topic = f"raw-{label}-{rep}-{'g' if system == GRPC_RAW else 'k'}"
                create(topic, parts)
                progress(f"kafka-listener: {system}, {label}, run {rep + 1}/{reps}")
                with contextlib.closing(clients[system]()) as client:
                    before, mine0 = cpu_seconds(broker_pid), time.process_time()
                    p = client.produce(topic, parts, n, size, batch_records(size))
                    middle, mine1 = cpu_seconds(broker_pid), time.process_time()
                    c = read(client, topic, parts, p.records, size,
                             passes(p.records, read_at_least))
                    after, mine2 = cpu_seconds(broker_pid), time.process_time()
                produced[system].append(p)
                consumed[system].append(c)
                cpu_write[system].append(middle - before)
                cpu_read[system].append(after - middle)
                mine_write[system].append(mine1 - mine0)
                mine_read[system].append(mine2 - mine1)
                load[system].append(os.getloadavg()[0])
        for system in clients:
            peers = [GRPC_RAW] if system == KAFKA_RAW else []
            rows += rows_for(system, label, "produce", produced[system], cpu_write[system],
                             peers, mine_write[system], load[system])
            rows += rows_for(system, label, "consume", consumed[system], cpu_read[system],
                             peers, mine_read[system], load[system])
    return rows
