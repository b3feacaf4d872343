"""`uv run python -m benchmarks [--smoke|--full]`: Strom's throughput and latency, with peers.

Starts every system it measures on 127.0.0.1 with temp data dirs, runs the workloads, stops
everything, prints one table (each figure with its ratio to the peer row) and writes JSON with
machine info under benchmarks/results/. ``--smoke`` runs in seconds (CI runs it so the harness
never rots); the default is the full run whose latest numbers are summarised in README.md.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import strom_workloads as sw
from benchmarks.harness import (
    RESULTS_DIR,
    Result,
    attach_ratios,
    format_table,
    percentile,
    write_json,
)
from benchmarks.peers._proc import RssSampler, rss_bytes


def _progress(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def run_strom(params: dict[str, int | float], results: list[Result]) -> None:
    from strom.testing import running_broker

    n_small = int(params["records_100b"])
    n_large = int(params["records_1k"])
    with tempfile.TemporaryDirectory(prefix="strom-bench-") as tmp, \
            running_broker(Path(tmp), config={"log.segment.bytes": str(256 << 20)}) as broker:
        bs = broker.bootstrap
        idle_rss = rss_bytes(broker.pid)
        # Workload 1: 1 topic, 1 partition, 100-byte records.
        sw.create_topic(bs, "w1", 1)
        _progress(f"workload 1: producing {n_small:,} x 100 B")
        with RssSampler(broker.pid) as rss:
            t = sw.produce(bs, "w1", n_small, 100)
            results.append(Result("strom", "1p-100B", "produce", t.records_per_s, "records/s",
                                  extra={"MB/s": t.mb_per_s}))
            results.append(Result("strom", "1p-100B", "produce MB/s", t.mb_per_s, "MB/s"))
            reps = int(params["repeats"])
            _progress(f"workload 1: consuming (catch-up from offset 0, median of {reps})")
            runs = [sw.consume_all(bs, "w1", 1, n_small, 100) for _ in range(reps)]
            c = sw.median_run(runs)
        _memory_rows(results, "strom", "1p-100B", idle_rss, rss.peak)
        results.append(Result("strom", "1p-100B", "consume", c.records_per_s, "records/s",
                              extra={"runs": [r.records_per_s for r in runs]}))
        results.append(Result("strom", "1p-100B", "consume MB/s", c.mb_per_s, "MB/s"))
        sw.create_topic(bs, "w1lat", 1)
        rate, secs = int(params["latency_rate"]), float(params["latency_seconds"])
        _progress(f"workload 1: end-to-end latency at {rate:,} records/s for {secs:.0f} s")
        lat = sw.end_to_end_latency(bs, "w1lat", 1, rate, secs)
        for q in (50, 99, 99.9):
            results.append(Result("strom", "1p-100B", f"e2e p{q:g} @{rate}/s",
                                  percentile(lat, q), "ms", higher_is_better=False))

        # Workload 2: 1 topic, 8 partitions, 1 KiB records.
        sw.create_topic(bs, "w2", 8)
        _progress(f"workload 2: producing {n_large:,} x 1 KiB over 8 partitions")
        t = sw.produce(bs, "w2", n_large, 1024)
        results.append(Result("strom", "8p-1KiB", "produce", t.records_per_s, "records/s"))
        results.append(Result("strom", "8p-1KiB", "produce MB/s", t.mb_per_s, "MB/s"))
        _progress(f"workload 2: consuming (median of {reps})")
        runs = [sw.consume_all(bs, "w2", 8, n_large, 1024) for _ in range(reps)]
        c = sw.median_run(runs)
        results.append(Result("strom", "8p-1KiB", "consume", c.records_per_s, "records/s",
                              extra={"runs": [r.records_per_s for r in runs]}))
        results.append(Result("strom", "8p-1KiB", "consume MB/s", c.mb_per_s, "MB/s"))
        sw.create_topic(bs, "w2lat", 8)
        _progress(f"workload 2: end-to-end latency at {rate:,} records/s for {secs:.0f} s")
        lat = sw.end_to_end_latency(bs, "w2lat", 8, rate, secs, value_size=1024)
        for q in (50, 99, 99.9):
            results.append(Result("strom", "8p-1KiB", f"e2e p{q:g} @{rate}/s",
                                  percentile(lat, q), "ms", higher_is_better=False))

        # Growth: the same produce + catch-up on a log that already holds `big_log_bytes`.
        big = int(params["big_log_bytes"])
        sw.create_topic(bs, "empty", 1)
        sw.create_topic(bs, "big", 1)
        _progress(f"growth: pre-filling a log with {big / 1e6:,.0f} MB")
        sw.prefill(bs, "big", big)
        n = n_small
        for topic, label in (("empty", "strom (empty log)"), ("big", "strom (big log)")):
            _progress(f"growth: produce + consume {n:,} x 100 B on the {topic} log")
            t = sw.produce(bs, topic, n, 100)
            results.append(Result(label, "growth", "produce", t.records_per_s, "records/s",
                                  peers=["strom (empty log)"] if topic == "big" else [],
                                  extra={"log_bytes_before": big if topic == "big" else 0}))
        for topic, label in (("empty", "strom (empty log)"), ("big", "strom (big log)")):
            c = sw.consume_all(bs, topic, 1, n, 100, tail=True)
            results.append(Result(label, "growth", "consume tail", c.records_per_s, "records/s",
                                  peers=["strom (empty log)"] if topic == "big" else []))


def _memory_rows(results: list[Result], system: str, workload: str, idle: float,
                 load: float) -> None:
    results.append(Result(system, workload, "RSS idle", idle / 1e6, "MB",
                          higher_is_better=False))
    results.append(Result(system, workload, "RSS under load", load / 1e6, "MB",
                          higher_is_better=False))


def run_strom_partitions(params: dict[str, int | float], results: list[Result]) -> None:
    """Growth with the partition count, on a fresh broker: broker RSS per partition (RSS after
    creating a topic with the most partitions, minus idle, over the count) and produce
    throughput with 1, 100 and 1000 partitions (ratios to the 1-partition row)."""
    from strom.testing import running_broker

    counts = [int(c) for c in params["partition_counts"]]  # type: ignore[union-attr]
    n = int(params["records_partitions"])
    with tempfile.TemporaryDirectory(prefix="strom-bench-parts-") as tmp, \
            running_broker(Path(tmp)) as broker:
        bs = broker.bootstrap
        idle = rss_bytes(broker.pid)
        most = max(counts)
        _progress(f"partitions: creating a topic with {most:,} partitions")
        sw.create_topic(bs, f"parts{most}", most)
        time.sleep(1.0)  # let the broker open every partition's log before reading RSS
        after = rss_bytes(broker.pid)
        label = f"strom ({most} partitions)"
        results.append(Result(label, "partitions", "RSS per partition", (after - idle) / most / 1e3,
                              "KB", higher_is_better=False,
                              extra={"rss_idle": idle, "rss_after_create": after}))
        base = "strom (1 partition)"
        for count in counts:
            if count != most:
                sw.create_topic(bs, f"parts{count}", count)
        for count in counts:
            _progress(f"partitions: producing {n:,} x 100 B over {count:,} partitions")
            with RssSampler(broker.pid) as rss:
                t = sw.produce(bs, f"parts{count}", n, 100)
            name = base if count == 1 else f"strom ({count} partitions)"
            results.append(Result(name, "partitions", "produce", t.records_per_s, "records/s",
                                  peers=[] if count == 1 else [base],
                                  extra={"rss_peak": rss.peak}))


def run_partition_scale(params: dict[str, Any], results: list[Result]) -> None:
    """Partition scale (issue 21, ``benchmarks/partition_scale.py``): per N on a fresh broker,
    topic creation (wall, broker CPU, in 100 requests), the cost of one more metadata change,
    idle CPU, one Metadata request, keyed produce, consume, the broker's open files and RSS, a
    clean restart and a kill -9 restart (ratios to the first N);
    a PNG beside the JSON when matplotlib happens to be installed."""
    from benchmarks import partition_scale as ps

    points = ps.measure([int(c) for c in params["scale_counts"]], int(params["scale_records"]),
                        _progress, float(params.get("scale_idle_seconds", 5.0)))
    base = f"strom ({points[0].partitions} partitions)"
    for p in points:
        name = f"strom ({p.partitions} partitions)"
        peers = [] if name == base else [base]
        results.append(Result(name, "partition scale", "create", p.create_s, "s",
                              higher_is_better=False, peers=peers))
        results.append(Result(name, "partition scale", "keyed produce", p.produce_rps,
                              "records/s", peers=peers))
        results.append(Result(name, "partition scale", "consume", p.consume_rps, "records/s",
                              peers=peers))
        results.append(Result(name, "partition scale", "fds after produce",
                              p.fds_after_produce, "files", higher_is_better=False,
                              peers=peers, extra={"fds_idle": p.fds_idle}))
        results.append(Result(name, "partition scale", "create CPU per partition",
                              p.create_cpu_s / p.partitions * 1000, "ms",
                              higher_is_better=False, peers=peers,
                              extra={"create_cpu_s": p.create_cpu_s,
                                     "create_settled_cpu_s": p.create_settled_cpu_s}))
        results.append(Result(name, "partition scale", "one more metadata change", p.change_ms,
                              "ms", higher_is_better=False, peers=peers))
        results.append(Result(name, "partition scale", "idle CPU", p.idle_cpu_pct, "%",
                              higher_is_better=False, peers=peers))
        if p.metadata_ms is not None:
            results.append(Result(name, "partition scale", "metadata request", p.metadata_ms,
                                  "ms", higher_is_better=False, peers=peers))
        if p.rss_mib_after is not None:
            results.append(Result(name, "partition scale", "RSS after produce", p.rss_mib_after,
                                  "MiB", higher_is_better=False, peers=peers,
                                  extra={"rss_mib_idle": p.rss_mib_idle}))
        if p.create_100_s is not None:
            results.append(Result(name, "partition scale", "create in 100 requests",
                                  p.create_100_s, "s", higher_is_better=False))
        if p.restart_s is not None:
            results.append(Result(name, "partition scale", "clean restart to first write",
                                  p.restart_s, "s", higher_is_better=False, peers=peers))
        if p.kill9_s is not None:
            results.append(Result(name, "partition scale", "kill -9 restart to first write",
                                  p.kill9_s, "s", higher_is_better=False, peers=peers,
                                  extra={"fds_after": p.fds_restarted, "stop_s": p.stop_s,
                                         "load_avg": p.load_avg}))
    print(ps.format_points(points), file=sys.stderr)
    png = _plot_dir[0] / "partition-scale.png"
    if ps.plot(points, png):
        _progress(f"partition scale: wrote {png}")


def run_partition_scale_rf3(params: dict[str, Any], results: list[Result]) -> None:
    """Partition scale on 3 brokers at RF 3 (issue 21 item 7,
    ``benchmarks/partition_scale_rf3.py``): per N, create until every ISR is full, idle
    CPU / RSS / open files per broker, keyed produce with acks=all, kill -9 of a broker to new
    leaders for all it led and to the first write, the restart back into every ISR."""
    from benchmarks import partition_scale_rf3 as rf3

    points = rf3.measure([int(c) for c in params["rf3_counts"]], int(params["rf3_records"]),
                         float(params.get("rf3_max_seconds", 900.0)),
                         float(params.get("scale_idle_seconds", 5.0)), _progress)
    for p in points:
        name = f"strom (3 brokers, {p.partitions} partitions RF 3)"
        extra = {"victim_led": p.victim_led, "notes": p.notes, "load_avg": p.load_avg,
                 "brokers": [vars(b) for b in p.brokers]}
        for metric, value, unit, better in (
                ("create -> all led, ISR full", p.create_s, "s", False),
                ("keyed produce acks=all", p.produce_rps, "records/s", True),
                ("kill -9 -> all new leaders", p.new_leaders_s, "s", False),
                ("kill -9 -> first write", p.first_write_s, "s", False),
                ("restart -> back in every ISR", p.back_in_isr_s, "s", False)):
            if value is not None:
                results.append(Result(name, "partition scale rf3", metric, value, unit,
                                      higher_is_better=better, extra=extra))
    print(rf3.format_points(points), file=sys.stderr)
    png = _plot_dir[0] / "partition-scale-rf3.png"
    if rf3.plot(points, png):
        _progress(f"partition scale rf3: wrote {png}")


def run_kafka_listener(params: dict[str, Any], results: list[Result]) -> None:
    """Strom's Kafka listener beside its gRPC path on one broker, same run (issue 14,
    ``benchmarks/kafka_listener.py``); a PNG beside the JSON when matplotlib is installed."""
    from benchmarks import kafka_listener as kl

    rows = kl.run(params, results, _progress)
    png = _plot_dir[0] / "kafka-listener.png"
    if kl.plot(rows, png):
        _progress(f"kafka-listener: wrote {png}")


def run_strom_replicated(params: dict[str, int | float], results: list[Result]) -> None:
    """Replication on one machine: 3 brokers in combined mode; RF=3 acks=all beside RF=1 acks=1
    (same cluster, same run, ratio = replicated / unreplicated) for both workloads."""
    from strom.testing import running_cluster

    n_small = int(params["records_replicated"])
    n_large = int(params["records_replicated_1k"])
    reps = int(params["repeats"])
    base = "strom RF=1 acks=1 (3 brokers)"
    with tempfile.TemporaryDirectory(prefix="strom-bench-rf3-") as tmp, \
            running_cluster(Path(tmp), brokers=3,
                            config={"log.segment.bytes": str(256 << 20)}) as cluster:
        bs = cluster.bootstrap
        for label, parts, n, size in (("1p-100B", 1, n_small, 100),
                                      ("8p-1KiB", 8, n_large, 1024)):
            _progress(f"replication: {label}, {n:,} records with RF=1 acks=1 and RF=3 acks=all, "
                      f"alternating, median of {reps}")
            runs1: list[sw.Throughput] = []
            runs3: list[sw.Throughput] = []
            for k in range(reps):
                # Fresh topics per run, deleted after it: each run writes into page cache that
                # earlier runs gave back, as on a long-running machine. Otherwise every later
                # run (RF=3 three times as much) pays this VM's first touch of new memory
                # (benchmarks/README.md, "Replication").
                rf1, rf3 = f"rf1-{label}-{k}", f"rf3-{label}-{k}"
                sw.create_topic(bs, rf1, parts, 1)
                sw.create_topic(bs, rf3, parts, 3, {"min.insync.replicas": "2"})
                for p in range(parts):
                    cluster.wait_for_isr(rf3, p, 3, timeout=30)
                runs1.append(sw.produce(bs, rf1, n, size, acks=1))
                runs3.append(sw.produce(bs, rf3, n, size, acks="all"))
                sw.delete_topics(bs, [rf1, rf3], Path(tmp))
            results.append(_median_produce_row(base, f"replication {label}", runs1))
            results.append(_median_produce_row("strom RF=3 acks=all", f"replication {label}",
                                               runs3, peers=[base]))


def _median_produce_row(system: str, workload: str, runs: list[sw.Throughput],
                        peers: list[str] | None = None) -> Result:
    """The produce row of the median of ``runs``, with its MB/s and every run's rate."""
    t = sw.median_run(runs)
    return Result(system, workload, "produce", t.records_per_s, "records/s",
                  peers=list(peers or []),
                  extra={"MB/s": t.mb_per_s, "runs": [r.records_per_s for r in runs]})


def run_failover(params: dict[str, Any], results: list[Result]) -> None:
    """Failover at production defaults (``benchmarks/failover.py``): the leader of an RF=3
    acks=all partition is killed (kill -9), hung (SIGSTOP) or cut off (network namespace);
    time until writes resume, median and max over several runs of each."""
    from benchmarks import failover

    labels = {"kill": "kill -9", "kill-controller": "kill -9 (leader + controller)",
              "stop": "SIGSTOP", "partition": "netns partition"}
    with tempfile.TemporaryDirectory(prefix="strom-bench-failover-") as tmp:
        found = failover.run_faults(Path(tmp), tuple(params["failover_faults"]),
                                    int(params["failovers"]), _progress)
    for fault, runs in found.items():
        samples = [round(r.resume_s * 1000, 1) for r in runs]
        extra = {"samples_ms": samples,
                 "new_leader_seen_ms": [None if r.new_leader_s is None
                                        else round(r.new_leader_s * 1000, 1) for r in runs],
                 "victim_was_controller": [r.victim_was_controller for r in runs]}
        for name, value in (("median", statistics.median(samples)), ("max", max(samples))):
            results.append(Result("strom RF=3 acks=all", "failover",
                                  f"{labels[fault]} to write {name}", value, "ms",
                                  higher_is_better=False, extra=extra))


KAFKA = "kafka"
KAFKA_VIA = "strom (confluent-kafka)"


def _kafka_available() -> bool:
    """Whether Java and Kafka's jars are here (fetched if need be); without them the Kafka rows
    are skipped with a note, except under CI, where the missing tool is an error."""
    from strom.testing.kafka import KafkaToolMissing
    from strom.testing.kafka_jars import ensure_jars, java_binary
    from strom.testing.tools import in_ci

    try:
        java_binary()
        ensure_jars()
    except KafkaToolMissing as err:
        if in_ci():
            raise
        _progress(f"skipping Apache Kafka: {err}")
        return False
    return True


def run_kafka(params: dict[str, int | float], results: list[Result], *,
              client_rows: bool = True) -> None:
    """Apache Kafka, the main peer (issue 20): one KRaft node (Maven's jars, RF 1) and one Strom
    broker, the same workloads through the Kafka protocol on both with the same client
    (confluent-kafka), plus Kafka's own ProducerPerformance, ConsumerPerformance and
    EndToEndLatency against both. Strom's own-client rows ("strom") get their ratio to the
    "kafka" rows in :func:`assign_peers`."""
    from benchmarks import kafka_workloads as kw
    from strom.testing import running_broker
    from strom.testing.kafka import running_kafka

    if not _kafka_available():
        return
    rate, secs = int(params["latency_rate"]), float(params["latency_seconds"])
    reps = int(params["repeats"])
    warm_secs = float(params["warmup_latency_seconds"])
    workloads = [("1p-100B", "w1", 1, int(params["records_100b"]), 100),
                 ("8p-1KiB", "w2", 8, int(params["records_1k"]), 1024)]
    with tempfile.TemporaryDirectory(prefix="strom-bench-kafka-") as tmp:
        _progress("kafka: starting one Apache Kafka node")
        with running_kafka(1, root=tmp) as kafka:
            node = kafka.nodes[0]
            assert node.process is not None
            pid = node.process.pid
            on_kafka = functools.partial(kw.create_topic, kafka.bootstrap)
            if client_rows:
                _kafka_rows(KAFKA, kafka.bootstrap, on_kafka, pid, workloads, rate, secs, reps,
                            results, warm_secs, params)
            with running_broker(Path(tmp) / "strom", config=kw.strom_beside_kafka(
                    1, {"log.segment.bytes": str(256 << 20)})) as broker:
                # topics through the Kafka protocol's CreateTopics on both servers
                on_strom = functools.partial(kw.create_topic, broker.kafka_bootstrap)
                if client_rows:
                    _kafka_rows(KAFKA_VIA, broker.kafka_bootstrap, on_strom, broker.pid,
                                workloads, rate, secs, reps, results, warm_secs, params)
                servers = ((KAFKA, kafka.bootstrap, on_kafka),
                           (KAFKA_VIA, broker.kafka_bootstrap, on_strom))
                _kafka_tool_rows(kafka, servers, workloads, reps, params, results)


def run_kafka_tools(params: dict[str, int | float], results: list[Result]) -> None:
    """Only the ``kafka`` section's rows of Kafka's own Java tools (ProducerPerformance,
    ConsumerPerformance, EndToEndLatency against both servers), without its confluent-kafka
    rows (``--medium``: ~13 min at load 12-16)."""
    run_kafka(params, results, client_rows=False)


def _kafka_tool_rows(kafka: Any, servers: tuple[tuple[str, str, Callable[[str, int], None]],
                                                ...],
                     workloads: list[tuple[str, str, int, int, int]], reps: int,
                     params: dict[str, Any], results: list[Result]) -> None:
    """Kafka's own Java tools against both servers, the servers alternating within each
    repetition; the median of ``reps`` runs per row (every run in ``extra``)."""
    from benchmarks import kafka_workloads as kw

    def row(system: str, label: str, metric: str, runs: list[float], unit: str,
            higher: bool = True) -> None:
        peer = system.replace("strom", "kafka") if system.startswith("strom") else ""
        results.append(Result(system, label, metric, statistics.median(runs), unit,
                              higher_is_better=higher, peers=[peer] if peer else [],
                              extra={"runs": runs}))

    for label, name, parts, n, size in workloads:
        produced: dict[str, list[dict[str, float]]] = {}
        consumed: dict[str, list[dict[str, float]]] = {}
        for rep in range(reps):
            for server, bootstrap, create in servers:
                tool = "kafka" if server == KAFKA else "strom"
                topic = f"{name}-perf{rep}"
                create(topic, parts)
                _progress(f"{tool}: ProducerPerformance, ConsumerPerformance {label}, "
                          f"{n:,} records (run {rep + 1} of {reps})")
                produced.setdefault(tool, []).append(
                    kw.producer_performance(kafka, bootstrap, topic, n, size))
                consumed.setdefault(tool, []).append(
                    kw.consumer_performance(kafka, bootstrap, topic, n))
        for tool in ("kafka", "strom"):
            system = f"{tool} ProducerPerformance"
            row(system, label, "produce", [r["records/s"] for r in produced[tool]], "records/s")
            row(system, label, "produce MB/s", [r["MB/s"] for r in produced[tool]], "MB/s")
            row(system, label, "produce avg ms", [r["avg ms"] for r in produced[tool]], "ms",
                higher=False)
            system = f"{tool} ConsumerPerformance"
            row(system, label, "consume", [r["records/s"] for r in consumed[tool]], "records/s")
            row(system, label, "consume MB/s", [r["MB/s"] for r in consumed[tool]], "MB/s")
            # the rate above counts the fresh group's join; these two split it out
            row(system, label, "consume, fetch time only",
                [r["fetch records/s"] for r in consumed[tool]], "records/s")
            row(system, label, "consume, group join", [r["rebalance ms"] for r in consumed[tool]],
                "ms", higher=False)
    n_e2e = int(params["e2e_tool_records"])
    lat: dict[str, list[dict[str, float]]] = {}
    for rep in range(reps):
        for server, bootstrap, create in servers:
            tool = "kafka" if server == KAFKA else "strom"
            topic = f"e2e-tool{rep}"
            create(topic, 1)
            _progress(f"{tool}: EndToEndLatency, {n_e2e:,} records of 100 B, acks=1 "
                      f"(run {rep + 1} of {reps})")
            lat.setdefault(tool, []).append(
                kw.end_to_end_latency_tool(kafka, bootstrap, topic, n_e2e, 100))
    for tool in ("kafka", "strom"):
        for q in ("p50", "p99", "p99.9", "avg"):
            row(f"{tool} EndToEndLatency", "1p-100B", f"round trip {q}",
                [r[f"{q} ms"] for r in lat[tool]], "ms", higher=False)


def _kafka_rows(system: str, bootstrap: str, create: Callable[[str, int], None], pid: int,
                workloads: list[tuple[str, str, int, int, int]], rate: int, secs: float,
                reps: int, results: list[Result], warm_secs: float,
                params: dict[str, Any]) -> None:
    """The throughput, catch-up and latency rows of one server through confluent-kafka."""
    from benchmarks import kafka_workloads as kw

    peers = [KAFKA] if system != KAFKA else []
    # Warm-up, not measured: a fresh JVM runs Kafka's request path interpreted until the JIT
    # has compiled it (first latency run on this VM: p50 12 s, the third: 0.14 s), and
    # librdkafka connects lazily. Both servers get the same warm-up.
    warm = params_warmup(workloads)
    create("warmup", 1)
    _progress(f"{system}: warm-up, {warm:,} records and {warm_secs:.0f} s of latency")
    kw.produce(bootstrap, "warmup", warm, 100)
    kw.consume_all(bootstrap, "warmup", 1, warm, 100)
    kw.end_to_end_latency(bootstrap, "warmup", 1, rate, warm_secs)
    for label, name, parts, n, size in workloads:
        idle = rss_bytes(pid)
        with RssSampler(pid) as rss:
            sends = []
            for rep in range(reps):  # each run on a fresh topic; the catch-up reads the first
                create(name if rep == 0 else f"{name}-r{rep}", parts)
                _progress(f"{system}: {label}, producing {n:,} x {size} B "
                          f"(run {rep + 1} of {reps})")
                sends.append(kw.produce(bootstrap, name if rep == 0 else f"{name}-r{rep}", n,
                                        size))
            _progress(f"{system}: {label}, consuming (median of {reps})")
            runs = [kw.consume_all(bootstrap, name, parts, n, size) for _ in range(reps)]
        t = sw.median_run(sends)
        c = sw.median_run(runs)
        if label == "1p-100B":
            _memory_rows(results, system, label, idle, rss.peak)
        for metric, value, unit, each in (
                ("produce", t.records_per_s, "records/s", sends),
                ("produce MB/s", t.mb_per_s, "MB/s", None),
                ("consume", c.records_per_s, "records/s", runs),
                ("consume MB/s", c.mb_per_s, "MB/s", None)):
            results.append(Result(system, label, metric, value, unit, peers=list(peers),
                                  extra={"runs": [r.records_per_s for r in each]}
                                  if each else {}))
        create(f"{name}lat", parts)
        _progress(f"{system}: {label}, end-to-end latency at {rate:,} records/s for {secs:.0f} s")
        lat = kw.end_to_end_latency(bootstrap, f"{name}lat", parts, rate, secs, value_size=size)
        for q in (50, 99, 99.9):
            results.append(Result(system, label, f"e2e p{q:g} @{rate}/s", percentile(lat, q),
                                  "ms", higher_is_better=False, peers=list(peers)))
    # latency against throughput: the same fixed-rate run at rising rates, 1 partition, 100 B;
    # each point the median of ``curve_repeats`` runs on fresh topics
    curve_secs = float(params["curve_seconds"])
    curve_reps = int(params["curve_repeats"])
    for point, curve_rate in enumerate(params["curve_rates"]):
        lats = []
        for rep in range(curve_reps):
            topic = f"curve{point}" if rep == 0 else f"curve{point}-r{rep}"
            create(topic, 1)
            _progress(f"{system}: latency curve, {curve_rate:,} records/s for {curve_secs:.0f} s"
                      f" (run {rep + 1} of {curve_reps})")
            lats.append(kw.end_to_end_latency(bootstrap, topic, 1, int(curve_rate), curve_secs))
        results.extend(curve_point(system, "curve-1p-100B", curve_rate, lats, peers))


def curve_point(system: str, label: str, rate: float, lats: list[list[float]],
                peers: list[str]) -> list[Result]:
    """A latency curve's p50 and p99 at one offered rate: the median over runs of each run's
    percentile (one slow run moves a point no further than the middle run), every run's figure
    and record count in ``extra``."""
    out = []
    for q in (50, 99):
        each = [percentile(lat, q) for lat in lats]
        out.append(Result(system, label, f"e2e p{q:g} @{rate}/s", statistics.median(each), "ms",
                          higher_is_better=False, peers=list(peers),
                          extra={"rate": rate, "runs": each,
                                 "records": [len(lat) for lat in lats],
                                 "load_avg_1m": os.getloadavg()[0]}))
    return out


def run_kafka_curve8(params: dict[str, Any], results: list[Result]) -> None:
    """The latency-versus-throughput curve with 8 partitions x 1 KiB (acks=1, linger.ms=0),
    one Apache Kafka node and one Strom broker through the same confluent-kafka code; at each
    offered rate Kafka then Strom, so the machine's load drifts over both alike."""
    from benchmarks import kafka_workloads as kw
    from strom.testing import running_broker
    from strom.testing.kafka import running_kafka

    if not _kafka_available():
        return
    secs = float(params["curve_seconds"])
    with tempfile.TemporaryDirectory(prefix="strom-bench-kafka-curve8-") as tmp:
        _progress("kafka curve 8p: starting one Apache Kafka node and one Strom broker")
        with running_kafka(1, root=tmp) as kafka, \
                running_broker(Path(tmp) / "strom", config=kw.strom_beside_kafka(
                    1, {"log.segment.bytes": str(256 << 20)})) as broker:
            servers = ((KAFKA, kafka.bootstrap), (KAFKA_VIA, broker.kafka_bootstrap))
            for _, bootstrap in servers:  # JIT and connections warm, not measured
                kw.create_topic(bootstrap, "curve8-warmup", 8)
                kw.end_to_end_latency(bootstrap, "curve8-warmup", 8, 2000,
                                      float(params["warmup_latency_seconds"]), value_size=1024)
            reps = int(params["curve_repeats"])
            for point, rate in enumerate(params["curve8_rates"]):
                lats: dict[str, list[list[float]]] = {}
                perfs: dict[str, list[dict[str, float]]] = {}
                for rep in range(reps):  # Kafka then Strom in each repetition
                    for system, bootstrap in servers:
                        topic = f"curve8-{point}-r{rep}"
                        kw.create_topic(bootstrap, topic, 8)
                        _progress(f"{system}: 8p x 1 KiB at {rate:,} records/s for {secs:.0f} s"
                                  f" (run {rep + 1} of {reps})")
                        lats.setdefault(system, []).append(kw.end_to_end_latency(
                            bootstrap, topic, 8, int(rate), secs, value_size=1024))
                    # Kafka's own Java producer at the same offered rate: its send-to-ack
                    # latency (one JVM, no Python on the measuring path)
                    for system, bootstrap in servers:
                        topic = f"curve8-pp-{point}-r{rep}"
                        kw.create_topic(bootstrap, topic, 8)
                        _progress(f"{system} ProducerPerformance: 8p x 1 KiB at {rate:,} "
                                  f"records/s (run {rep + 1} of {reps})")
                        perfs.setdefault(system, []).append(kw.producer_performance(
                            kafka, bootstrap, topic, int(rate * secs), 1024,
                            throughput=int(rate), linger_ms=0))
                for system, _ in servers:
                    results.extend(curve_point(system, "curve-8p-1KiB", rate, lats[system],
                                               [] if system == KAFKA else [KAFKA]))
                    tool = "kafka" if system == KAFKA else "strom"
                    for q in (50, 99):
                        each = [perf[f"p{q} ms"] for perf in perfs[system]]
                        results.append(Result(
                            f"{tool} ProducerPerformance", "curve-8p-1KiB",
                            f"ack p{q:g} @{rate}/s", statistics.median(each), "ms",
                            higher_is_better=False,
                            peers=[] if tool == "kafka" else ["kafka ProducerPerformance"],
                            extra={"rate": rate, "runs": each,
                                   "achieved records/s": [p["records/s"] for p in perfs[system]],
                                   "load_avg_1m": os.getloadavg()[0]}))


def run_kafka_streams(params: dict[str, Any], results: list[Result]) -> None:
    """Kafka Streams' WordCountDemo on the same input against one Apache Kafka node and one
    Strom broker (``benchmarks/kafka_streams.py``): the counts must be equal (else the run
    fails), the rows are input lines per second from a batch's first line to its last count,
    median of ``repeats`` batches."""
    from benchmarks import kafka_streams as ks
    from benchmarks import kafka_workloads as kw
    from strom.testing import running_broker
    from strom.testing.kafka import running_kafka

    if not _kafka_available():
        return
    lines = int(params["streams_lines"])
    with tempfile.TemporaryDirectory(prefix="strom-bench-kafka-streams-") as tmp:
        _progress(f"kafka streams: word count of {lines:,} lines on Kafka, then on Strom")
        with running_kafka(1, root=tmp, config={"auto.create.topics.enable": "false"}) as kafka, \
                running_broker(Path(tmp) / "strom", config=kw.strom_beside_kafka(1)) as broker:
            got = ks.compare(kafka.bootstrap, broker.kafka_bootstrap, Path(tmp) / "runs", lines,
                             int(params["repeats"]))
    for side in ("kafka", "strom"):
        if got[side]["counts"] != got["expected"]:
            wrong = {w: (got[side]["counts"].get(w), n) for w, n in got["expected"].items()
                     if got[side]["counts"].get(w) != n}
            raise RuntimeError(f"word count on {side}: {len(wrong)} word(s) counted wrong "
                               f"(got, expected): {dict(list(wrong.items())[:5])}")
    for side, system in (("kafka", KAFKA), ("strom", KAFKA_VIA)):
        results.append(Result(system, "streams word count", "input lines/s",
                              got[side]["lines/s"], "lines/s",
                              peers=[] if side == "kafka" else [KAFKA],
                              extra={"lines": lines, "seconds": got[side]["seconds"],
                                     "batch lines/s": got[side]["batch lines/s"],
                                     "words": sum(got["expected"].values()),
                                     "load_avg_1m": os.getloadavg()[0]}))


KAFKA_FAILOVER = "kafka 3 nodes RF=3 acks=all"
STROM_FAILOVER = "strom 3 brokers RF=3 acks=all (confluent-kafka)"


#: The workload of each kafka_failover fault's rows.
KAFKA_FAILOVER_WORKLOADS = {"kill": "failover kill -9",
                            "kill-controller": "failover kill -9 (leader + controller)"}


def run_kafka_failover(params: dict[str, Any], results: list[Result]) -> None:
    """Failover beside Apache Kafka (``benchmarks/kafka_failover.py``): kill -9 of the leader
    of an RF=3 acks=all partition on 3 Kafka nodes and on 3 Strom brokers, production defaults,
    the same confluent-kafka writer; the time until writes resume (median of runs) and the
    acknowledged records missing afterwards. Fault ``kill`` kills whichever node leads,
    ``kill-controller`` a leader first moved to the active controller."""
    from benchmarks import kafka_failover as kf

    if not _kafka_available():
        return
    with tempfile.TemporaryDirectory(prefix="strom-bench-kafka-failover-") as tmp:
        outcomes = kf.compare(Path(tmp), int(params["kafka_failovers"]), _progress,
                              tuple(params["kafka_failover_faults"]))
    for o in outcomes:
        system = KAFKA_FAILOVER if o.system == "kafka" else STROM_FAILOVER
        workload = KAFKA_FAILOVER_WORKLOADS[o.fault]
        peers = [] if o.system == "kafka" else [KAFKA_FAILOVER]
        samples = [round(r.resume_s * 1000, 1) for r in o.runs]
        extra = {"samples_ms": samples, "victims": [r.victim for r in o.runs],
                 "new_leader_seen_ms": [None if r.new_leader_s is None
                                        else round(r.new_leader_s * 1000, 1) for r in o.runs],
                 "controllers_at_kill": [r.controller for r in o.runs],
                 "controllers_after": [r.controller_after for r in o.runs],
                 "victim_was_controller": [r.victim_was_controller for r in o.runs],
                 "load_avg_1m_at_kills": [round(r.load_1m, 2) for r in o.runs],
                 "load_avg_1m": os.getloadavg()[0]}
        results.append(Result(system, workload, "unavailability median",
                              statistics.median(samples), "ms", higher_is_better=False,
                              peers=peers, extra=extra))
        results.append(Result(system, workload, "unavailability max", max(samples),
                              "ms", higher_is_better=False, peers=peers))
        results.append(Result(system, workload, "acknowledged records", o.acked, "records"))
        results.append(Result(system, workload, "acknowledged lost", o.lost,
                              "records", higher_is_better=False))


KAFKA_RF1 = "kafka RF=1 acks=1 (3 nodes)"
KAFKA_RF3 = "kafka RF=3 acks=all"
VIA_RF3 = "strom (confluent-kafka) RF=3 acks=all"


def run_kafka_replicated(params: dict[str, int | float], results: list[Result]) -> None:
    """Replication beside Apache Kafka: 3 Kafka nodes, then 3 Strom brokers (one after the other,
    not side by side on 2 cores), RF=1 acks=1 and RF=3 acks=all (min.insync.replicas=2) through
    confluent-kafka, median of ``repeats`` runs on fresh topics. Strom's own-client replication
    rows get their ratio to the Kafka rows in :func:`assign_peers`."""
    from benchmarks import kafka_workloads as kw
    from strom.testing import running_cluster
    from strom.testing.kafka import running_kafka

    if not _kafka_available():
        return
    reps = int(params["repeats"])
    sizes = (("1p-100B", 1, int(params["records_replicated"]), 100),
             ("8p-1KiB", 8, int(params["records_replicated_1k"]), 1024))
    with tempfile.TemporaryDirectory(prefix="strom-bench-kafka-rf3-") as tmp:
        _progress("kafka replication: starting 3 Apache Kafka nodes")
        with running_kafka(3, root=tmp) as kafka:
            create = functools.partial(kw.create_topic, kafka.bootstrap)
            _replicated_rows((KAFKA_RF1, KAFKA_RF3), kafka.bootstrap, create, sizes, reps,
                             results)
        _progress("kafka replication: starting 3 Strom brokers")
        with running_cluster(Path(tmp) / "strom", brokers=3, config=kw.strom_beside_kafka(
                3, {"log.segment.bytes": str(256 << 20)})) as cluster:
            create = functools.partial(sw.create_topic, cluster.bootstrap)
            _replicated_rows(("strom (confluent-kafka) RF=1 acks=1 (3 brokers)", VIA_RF3),
                             cluster.kafka_bootstrap, create, sizes, reps, results)


def _replicated_rows(names: tuple[str, str], bootstrap: str,
                     create: Callable[..., None], sizes: tuple[tuple[str, int, int, int], ...],
                     reps: int, results: list[Result]) -> None:
    from benchmarks import kafka_workloads as kw

    rf1_name, rf3_name = names
    create("warmup", 1, 3, {"min.insync.replicas": "2"})
    warm = max(20_000, min(200_000, max(n for _, _, n, _ in sizes)))
    _progress(f"{rf3_name}: warm-up, {warm:,} records")
    kw.produce(bootstrap, "warmup", warm, 100, acks="all")
    for label, parts, n, size in sizes:
        _progress(f"{rf3_name}: {label}, {n:,} records, RF=1 and RF=3 alternating, "
                  f"median of {reps}")
        runs1: list[sw.Throughput] = []
        runs3: list[sw.Throughput] = []
        for k in range(reps):
            rf1, rf3 = f"rf1-{label}-{k}", f"rf3-{label}-{k}"
            create(rf1, parts, 1)
            create(rf3, parts, 3, {"min.insync.replicas": "2"})
            runs1.append(kw.produce(bootstrap, rf1, n, size, acks=1))
            runs3.append(kw.produce(bootstrap, rf3, n, size, acks="all"))
        workload = f"replication {label}"
        kafka_peer = [] if rf3_name == KAFKA_RF3 else [KAFKA_RF3]
        results.append(_median_produce_row(rf1_name, workload, runs1))
        results.append(_median_produce_row(rf3_name, workload, runs3,
                                           peers=[rf1_name, *kafka_peer]))


def params_warmup(workloads: list[tuple[str, str, int, int, int]]) -> int:
    """Warm-up records: as many as the largest workload, at least 20,000, at most 200,000."""
    return max(20_000, min(200_000, max(n for _, _, _, n, _ in workloads)))


def assign_peers(results: list[Result]) -> None:
    """Strom's own-client rows compare with Apache Kafka first, then the secondary peers."""
    secondary = sorted({r.system for r in results if not r.system.startswith(("strom", "kafka"))})
    main = [KAFKA] if any(r.system == KAFKA for r in results) else []
    rf3 = [KAFKA_RF3] if any(r.system == KAFKA_RF3 for r in results) else []
    for r in results:
        if r.system == "strom":
            r.peers = main + secondary
        elif r.system == "strom RF=3 acks=all" and r.workload.startswith("replication"):
            r.peers = [p for p in r.peers if p != KAFKA_RF3] + rf3


def run_groups(params: dict[str, int | float], results: list[Result]) -> None:
    """Consumer groups: rebalance time by group size, group vs single-consumer throughput."""
    from benchmarks import groups

    groups.run_groups(params, results, _progress)


def run_peers(params: dict[str, int | float], results: list[Result]) -> None:
    """Run the same workloads on each installed peer; every Strom row then gets its ratios."""
    from benchmarks.peers import nats_jetstream, redis_streams

    rate, secs = int(params["latency_rate"]), float(params["latency_seconds"])
    workloads = [("1p-100B", "w1", 1, int(params["records_100b"]), 100, (rate, secs)),
                 ("8p-1KiB", "w2", 8, int(params["records_1k"]), 1024, (rate, secs))]
    for peer in (redis_streams, nats_jetstream):
        reason = peer.available()
        if reason is not None:
            _progress(f"skipping {peer.NAME}: {reason}")
            continue
        for label, name, parts, n, size, lat in workloads:
            # NATS JetStream acks every publish; at ~35k/s the full record counts would take
            # minutes, so it gets a tenth of them (a rate, not a total, is what is compared).
            count = n // 10 if peer is nats_jetstream and n > 50_000 else n
            _progress(f"{peer.NAME}: {label}, {count:,} records")
            out = peer.run(name, parts, count, size, lat, int(params["repeats"]))
            for metric in ("produce", "consume"):
                results.append(Result(peer.NAME, label, metric, float(out[metric]), "records/s"))
                results.append(Result(peer.NAME, label, f"{metric} MB/s",
                                      float(out[f"{metric} MB/s"]), "MB/s"))
            if label == "1p-100B" and "rss idle" in out:
                _memory_rows(results, peer.NAME, label, float(out["rss idle"]),
                             float(out["rss load"]))
            lats = out.get("latencies")
            if isinstance(lats, list):
                for q in (50, 99, 99.9):
                    results.append(Result(peer.NAME, label, f"e2e p{q:g} @{rate}/s",
                                          percentile(lats, q), "ms", higher_is_better=False))


#: Where the sections' own plots go: ``--out`` when given (a test's temp dir), else
#: ``results/`` beside the committed ones. A list so ``main`` can set it for the sections.
_plot_dir: list[Path] = [RESULTS_DIR]


PROFILES: dict[str, dict[str, Any]] = {
    "smoke": {"records_100b": 20_000, "records_1k": 5_000, "latency_rate": 1000,
              "latency_seconds": 2, "big_log_bytes": 20_000_000,
              "partition_counts": (1, 100, 1000), "records_partitions": 5_000,
              "scale_counts": (10, 100), "scale_records": 5_000, "scale_idle_seconds": 1.0,
              "rf3_counts": (100,), "rf3_records": 2_000, "rf3_max_seconds": 120.0,
              "records_replicated": 5_000, "records_replicated_1k": 5_000,
              "failovers": 1, "failover_faults": ("kill",), "repeats": 1,
              "group_sizes": (1, 10, 50), "group_records": 20_000, "group_members": 2,
              "warmup_latency_seconds": 1, "curve_rates": (500, 2000), "curve_seconds": 1,
              "e2e_tool_records": 200, "kafka_failovers": 1,
              "kafka_failover_faults": ("kill", "kill-controller"),
              "curve8_rates": (500, 2000), "curve_repeats": 1, "streams_lines": 1000,
              "listener_raw_read": 100_000},
    "full": {"records_100b": 1_000_000, "records_1k": 1_000_000, "latency_rate": 10_000,
             "latency_seconds": 10, "big_log_bytes": 2_000_000_000,
             "partition_counts": (1, 100, 1000), "records_partitions": 500_000,
             "scale_counts": (10, 100, 1000), "scale_records": 200_000,
             "rf3_counts": (1000,), "rf3_records": 100_000, "rf3_max_seconds": 900.0,
             "records_replicated": 300_000, "records_replicated_1k": 300_000,
             "failovers": 7, "failover_faults": ("kill", "kill-controller", "stop",
                                                 "partition"), "repeats": 3,
             "group_sizes": (1, 10, 50), "group_rebalance_repeats": 3,
             "group_records": 500_000, "group_members": 4, "warmup_latency_seconds": 3,
             "curve_rates": (1000, 5000, 10_000, 20_000, 40_000), "curve_seconds": 5,
             "e2e_tool_records": 5000, "kafka_failovers": 5,
             "kafka_failover_faults": ("kill", "kill-controller"),
             "curve8_rates": (1000, 5000, 10_000, 20_000), "curve_repeats": 3,
             "streams_lines": 20_000, "listener_raw_read": 2_000_000},
}
#: The full run's shape with a fifth of its records (the Kafka sections' rates are compared in
#: the same run, so fewer records change the figures' spread, not what they compare): what fits
#: in ~15 min on 2 shared cores. Repeats, rates and the latency curve are the full run's.
PROFILES["medium"] = {**PROFILES["full"], "records_100b": 200_000, "records_1k": 200_000,
                      "records_replicated": 100_000, "records_replicated_1k": 50_000,
                      "e2e_tool_records": 2000}


SECTIONS: dict[str, Callable[[dict[str, Any], list[Result]], None]] = {
    "single": run_strom, "partitions": run_strom_partitions,
    "partition-scale": run_partition_scale, "partition-scale-rf3": run_partition_scale_rf3,
    "replication": run_strom_replicated, "failover": run_failover, "groups": run_groups,
    "kafka-listener": run_kafka_listener,
    "kafka": run_kafka, "kafka-tools": run_kafka_tools, "kafka-replication": run_kafka_replicated,
    "kafka-failover": run_kafka_failover, "kafka-curve8": run_kafka_curve8,
    "kafka-streams": run_kafka_streams,
    "peers": run_peers,
}
"""Sections of a run, in order; ``--only`` picks some (the peers' rows only get ratios when
``peers`` runs too)."""


#: Sections that measure a peer (``--no-peers`` leaves them out).
PEER_SECTIONS = ("peers", "kafka", "kafka-tools", "kafka-replication", "kafka-failover",
                 "kafka-curve8", "kafka-streams")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="seconds-long run (what CI runs)")
    parser.add_argument("--medium", action="store_true",
                        help="the full run with a fifth of the records (see PROFILES)")
    parser.add_argument("--no-peers", action="store_true", help="measure Strom alone")
    parser.add_argument("--out", type=Path, default=None, help="directory for the JSON results")
    parser.add_argument("--only", choices=sorted(SECTIONS), action="append", default=None,
                        metavar="SECTION",
                        help=f"run only these sections (repeatable; {', '.join(SECTIONS)}); "
                             f"the JSON is then strom-<profile>-<sections>-*.json, so the full "
                             f"run's -latest file is left alone")
    args = parser.parse_args(argv)
    _plot_dir[0] = args.out or RESULTS_DIR
    try:  # now, not after the sections: their plots are written into it as each one ends
        _plot_dir[0].mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--out {_plot_dir[0]}: cannot create the directory ({exc.strerror}); "
                     f"name a directory this user can write")
    profile = "smoke" if args.smoke else "medium" if args.medium else "full"
    params = PROFILES[profile]
    results: list[Result] = []
    sections = args.only or list(SECTIONS)
    for name in sections:
        if name in PEER_SECTIONS and args.no_peers:
            continue
        SECTIONS[name](params, results)
    assign_peers(results)
    attach_ratios(results)
    print(format_table(results))
    kwargs = {"out_dir": args.out} if args.out else {}
    name = f"strom-{profile}" if args.only is None else f"strom-{profile}-{'-'.join(sections)}"
    path = write_json(name, results, {"profile": profile, "sections": sections, **params},
                      **kwargs)
    print(f"\nwrote {path}", file=sys.stderr)
    if profile != "smoke" and any(r.system.startswith("kafka") for r in results):
        from benchmarks import kafka_plots

        for png, draw in ((path.with_name("kafka-throughput.png"), kafka_plots.throughput_png),
                          (path.with_name("kafka-latency-curve.png"),
                           kafka_plots.latency_curve_png),
                          (path.with_name("kafka-latency-curve-8p.png"),
                           kafka_plots.latency_curve_8p_png),
                          (path.with_name("kafka-failover.png"), kafka_plots.failover_png)):
            if draw(results, png):
                print(f"wrote {png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
