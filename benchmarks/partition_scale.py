"""Partition scale (issue 21): what one broker and Strom's own client cost as partitions grow.

For each N (10, 100, 1,000 by default; 10,000 with ``--counts``) on one fresh broker (RF 1,
acks=1): the time to create a topic of N partitions in one request (wall and the broker's CPU
seconds), the cost of one more metadata change with N partitions hosted (median wall time of
creating a one-partition topic, 5 times), the broker's idle CPU with N partitions (over 5 s),
keyed produce of 100 B records spread over all N with a default ``Producer`` (what a new user
writes), catch-up consume of them, the broker's open file handles idle and after the produce
(``/proc/PID/fd``), the time from a clean restart (SIGTERM, start) to the first
acknowledged write, and the same after kill -9 (recovery of every log past its recovery
point), with the open files after it. From 1,000 partitions on, a second fresh broker creates N
partitions in 100 requests (100 topics). Keyed produce is the case that used to collapse: the
sender scanned every partition on each wake-up; creation was quadratic and fenced the broker
(issue 21).

Run alone: ``uv run --all-packages python -m benchmarks.partition_scale [--records N]
[--counts 10,100,1000] [--png PATH] [--json PATH]``; ``python -m benchmarks --only
partition-scale`` runs it as a section of the suite (table + JSON). ``--keyed-only
--counts 10,1000`` measures item 1 alone: keyed produce and consume with Strom's client and with
confluent-kafka on the Kafka listener, one broker, median of ``--repeats`` (5); with ``--kafka``
the same confluent-kafka rows against one Apache Kafka node beside it (the reference launcher),
and each Strom row's ratio to Kafka's at the same N.

``--brokers 3 --counts 1000,10000 [--max-seconds S]``: three brokers, RF 3, N partitions in all
(issue 21 item 7: create until all led with full ISRs, idle CPU / RSS / open files per broker,
keyed produce with acks=all, kill -9 of a broker to new leaders and to the first write, the
restart back into every ISR): :mod:`benchmarks.partition_scale_rf3`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks import strom_workloads as sw
from benchmarks.harness import machine_info
from benchmarks.kafka_listener import produce_requests
from benchmarks.peers._proc import rss_bytes
from benchmarks.raw_compare import cpu_seconds
from strom.client import Admin, Producer


@dataclass
class ScalePoint:
    partitions: int
    create_s: float
    produce_rps: float
    consume_rps: float
    fds_idle: int
    fds_after_produce: int
    create_cpu_s: float = 0.0
    """The broker's CPU seconds (user + system) while it created the N partitions."""
    change_ms: float = 0.0
    """Median wall time of one more metadata change (a one-partition topic) with N hosted."""
    idle_cpu_pct: float = 0.0
    create_100_s: float | None = None
    """N partitions created in 100 requests on another fresh broker (N >= 1,000 only)."""
    restart_s: float | None = None
    """Clean restart (SIGTERM, start) to the first acknowledged write, with N partitions."""
    stop_s: float | None = None
    """SIGTERM to exit (closing N logs: a flush and a checkpoint each)."""
    kill9_s: float | None = None
    """kill -9, start, to the first acknowledged write."""
    fds_restarted: int | None = None
    """Open files after the kill -9 restart and one write."""
    load_avg: float | None = None
    """The machine's 1-minute load average when the point finished (shared machine)."""
    metadata_ms: float | None = None
    """Median wall ms of one Metadata request (every topic) with N hosted, Strom's client."""
    rss_mib_idle: float | None = None
    """The broker's resident memory with N partitions created, before any record."""
    rss_mib_after: float | None = None
    """The same after the keyed produce and the consume."""
    create_settled_cpu_s: float | None = None
    """The broker's CPU seconds from the request until every segment file exists and it is
    quiet (the files are created in background slices after the answer)."""


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def system_cpu_seconds(pid: int) -> float:
    """System (kernel) CPU seconds of process ``pid`` so far: creating files and directories."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[12]) / os.sysconf("SC_CLK_TCK")


def settle(pid: int, quiet_pct: float = 20.0, timeout_s: float = 120.0) -> float:
    """Wait (at least 0.5 s) until process ``pid`` uses under ``quiet_pct`` % of a core over
    half a second, at most ``timeout_s``; return the seconds waited."""
    start = time.perf_counter()
    while True:
        before = cpu_seconds(pid)
        time.sleep(0.5)
        waited = time.perf_counter() - start
        if (cpu_seconds(pid) - before) / 0.5 * 100 < quiet_pct or waited >= timeout_s:
            return waited


def wait_segment_files(log_dir: Path, topic: str, partitions: int,
                       timeout_s: float = 120.0) -> float:
    """Wait until every partition of ``topic`` in Strom's ``log_dir`` has its first segment
    file; the seconds waited. A creation is answered before the files exist (the broker
    creates them in short background slices, ~0.3-0.6 ms of CPU each), and ``settle`` can
    pass between two slices on a loaded machine: 766 of 1,000 files existed after it once, and
    the rest were created inside the produce's window, charging the creation's tail to
    1,000 partitions and not to 10."""
    start = time.perf_counter()
    while True:
        made = sum(1 for _ in log_dir.glob(f"{topic}-*/*.log"))
        waited = time.perf_counter() - start
        if made >= partitions:
            return waited
        if waited >= timeout_s:
            raise TimeoutError(f"{made} of {partitions} segment files of {topic} after "
                               f"{timeout_s:.0f} s")
        time.sleep(0.05)


def idle_cpu_pct(pid: int, seconds: float = 5.0) -> float:
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / seconds * 100


def median_wall_ms(call: Callable[[int], object], runs: int) -> float:
    """Median wall ms of ``call(i)`` for i in 0..runs-1."""
    times = []
    for i in range(runs):
        start = time.perf_counter()
        call(i)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def change_cost_ms(bootstrap: str, runs: int = 5) -> float:
    """Median wall ms of creating a one-partition topic (one metadata change)."""
    with Admin(bootstrap, request_timeout_ms=120_000) as admin:
        return median_wall_ms(lambda i: admin.create_topic(
            f"change-{i}", partitions=1, replication_factor=1), runs)


def metadata_ms(bootstrap: str, runs: int = 20) -> float:
    """Median wall ms of one Metadata request for every topic (what a client's refresh asks;
    the issue's "metadata p50")."""
    with Admin(bootstrap, request_timeout_ms=120_000) as admin:
        admin.list_topics()  # the channel is open before the first timed request
        return median_wall_ms(lambda _: admin.list_topics(), runs)


def rss_mib(pid: int) -> float:
    return rss_bytes(pid) / (1 << 20)


def create_in_requests(bootstrap: str, partitions: int, requests: int = 100) -> float:
    """Seconds to create ``partitions`` as ``requests`` topics, one request each."""
    admin = Admin(bootstrap, request_timeout_ms=300_000)
    try:
        start = time.perf_counter()
        for i in range(requests):
            admin.create_topic(f"batch-{i}", partitions=partitions // requests,
                               replication_factor=1)
        return time.perf_counter() - start
    finally:
        admin.close()


def first_write_s(bootstrap: str, topic: str, timeout_s: float = 120.0) -> float:
    """Seconds until one record written to ``topic`` is acknowledged."""
    start = time.perf_counter()
    producer = Producer(bootstrap, acks=1, delivery_timeout_ms=int(timeout_s * 1000))
    try:
        producer.send(topic, b"x", partition=0).result(timeout_s)
        return time.perf_counter() - start
    finally:
        producer.close()


def produce_keyed(bootstrap: str, topic: str, records: int, value_size: int = 100,
                  acks: int = 1) -> sw.Throughput:
    """``records`` values with distinct keys (so they spread over every partition), default
    producer settings apart from ``acks``; the time includes the final flush."""
    value = os.urandom(value_size)
    keys = [b"key-%d" % i for i in range(records)]
    producer = Producer(bootstrap, acks=acks)
    try:
        send = producer.send
        start = time.perf_counter()
        for key in keys:
            send(topic, value, key=key)
        producer.flush()
        elapsed = time.perf_counter() - start
    finally:
        producer.close()
    return sw.Throughput(records, elapsed, records * value_size)


def produce_keyed_kafka(bootstrap: str, topic: str, records: int, value_size: int = 100,
                        acks: int = 1) -> sw.Throughput:
    """As ``produce_keyed`` with confluent-kafka (librdkafka) against the broker's Kafka
    listener, librdkafka's defaults apart from ``acks`` (its default partitioner hashes the
    key, so distinct keys spread over every partition)."""
    from confluent_kafka import Producer as KafkaProducer

    value = os.urandom(value_size)
    keys = [b"key-%d" % i for i in range(records)]
    errors: list[str] = []
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": acks,
                              "error_cb": lambda err: errors.append(str(err))})
    send = producer.produce
    start = time.perf_counter()
    for key in keys:
        while True:
            try:
                send(topic, value, key)
                break
            except BufferError:  # librdkafka's local queue is full: let it drain
                producer.poll(0.01)
    left = producer.flush(300)
    elapsed = time.perf_counter() - start
    if left or errors:
        raise RuntimeError(f"{left} record(s) undelivered after the flush; errors: {errors[:3]}")
    return sw.Throughput(records, elapsed, records * value_size)


@dataclass
class KeyedRow:
    """Keyed produce and catch-up consume of the same records over N partitions, one client."""

    client: str
    partitions: int
    produce_rps: float
    consume_rps: float
    produce_client_cpu_s: float = 0.0
    """The client process's CPU seconds (user + system, every thread) during the produce."""
    produce_broker_cpu_s: float = 0.0
    """The broker's CPU seconds during the produce: with the client's, what the produce costs
    whatever else runs on the machine (rates on a shared machine follow the load)."""
    produce_client_caller_cpu_s: float = 0.0
    """The part of ``produce_client_cpu_s`` spent in the thread that calls ``send``/``produce``
    (the rest is the client's own threads: librdkafka's broker thread, Strom's sender)."""
    produce_requests: float = 0.0
    """Produce requests the broker served during the produce (Strom's broker, from its
    ``/metrics``; 0 for Apache Kafka): records per request is what a keyed producer over N
    partitions can batch, and each request costs both sides CPU (issue 21 item 1)."""


#: The keyed rows: Strom's client on gRPC, confluent-kafka on Strom's Kafka listener, and the
#: same confluent-kafka code against one Apache Kafka node (``--kafka``).
KAFKA_ROW = "apache-kafka"


def measure_keyed(counts: list[int], records: int, repeats: int = 3,
                  progress: object = print, kafka: bool = False,
                  only: list[str] | None = None) -> list[KeyedRow]:
    """Item 1 alone: on ONE broker, keyed produce then consume of ``records`` over topics of
    each N, with Strom's client on the gRPC port and confluent-kafka on the Kafka listener,
    alternating N within each repeat so every N sees the same load; median of ``repeats``
    (each on a fresh topic). With ``kafka`` the same confluent-kafka produce and consume (same
    settings: librdkafka's defaults and acks=1) also run against one Apache Kafka node started
    by the project's reference launcher (:func:`strom.testing.kafka.running_kafka`), alternated
    with the Strom rows, its broker CPU measured the same way (issue 21 item 8). ``only``: just
    these clients (``strom``, ``confluent-kafka``, ``apache-kafka``)."""
    from benchmarks import kafka_workloads as kw
    from strom.testing import running_broker

    say = progress if callable(progress) else print
    runs: dict[tuple[str, int], list[tuple[float, float, float, float, float, float]]] = {}
    clients = ["strom", "confluent-kafka"] + ([KAFKA_ROW] if kafka else [])
    if only:
        clients = [c for c in clients if c in only]
    with tempfile.TemporaryDirectory(prefix="strom-bench-keyed-") as tmp, \
            contextlib.ExitStack() as stack:
        broker = stack.enter_context(running_broker(Path(tmp) / "strom", startup_timeout=600))
        ref = None
        if kafka:
            from strom.testing.kafka import running_kafka

            say("keyed: starting one Apache Kafka node")
            ref = stack.enter_context(running_kafka(1, root=tmp))
            assert ref.nodes[0].process is not None
            say("keyed: warming Apache Kafka's JIT (20,000 records, not measured)")
            kw.create_topic(ref.bootstrap, "keyed-warm-up", 10)
            settle(ref.nodes[0].process.pid)
            produce_keyed_kafka(ref.bootstrap, "keyed-warm-up", 20_000)
        for rep in range(repeats):
            for n in counts:
                for client in clients:
                    topic = f"keyed-{client}-{n}-{rep}"
                    if client == KAFKA_ROW:
                        assert ref is not None and ref.nodes[0].process is not None
                        bootstrap, pid = ref.bootstrap, ref.nodes[0].process.pid
                        kw.create_topic(bootstrap, topic, n)
                    else:
                        bootstrap, pid = broker.kafka_bootstrap, broker.pid
                        create_topic(broker.bootstrap, topic, n)
                        wait_segment_files(broker.log_dir, topic, n)
                    settle(pid)  # every partition's log open (Kafka opens them after
                    # CreateTopics answers: otherwise its produce window holds the creation)
                    served = 0.0 if client == KAFKA_ROW else produce_requests(broker.metrics_url)
                    own, caller, theirs = time.process_time(), time.thread_time(), cpu_seconds(pid)
                    if client == "strom":
                        p = produce_keyed(broker.bootstrap, topic, records)
                    else:
                        p = produce_keyed_kafka(bootstrap, topic, records)
                    own, caller, theirs = (time.process_time() - own, time.thread_time() - caller,
                                           cpu_seconds(pid) - theirs)
                    if client != KAFKA_ROW:
                        served = produce_requests(broker.metrics_url) - served
                    if client == "strom":
                        c = sw.consume_all(broker.bootstrap, topic, n, records, 100)
                    else:
                        c = kw.consume_all(bootstrap, topic, n, records, 100)
                    runs.setdefault((client, n), []).append(
                        (p.records_per_s, c.records_per_s, own, theirs, caller, served))
                    say(f"keyed: {client} {n:,} partitions run {rep + 1}: produce "
                        f"{p.records_per_s:,.0f} rec/s (CPU client {own:.2f} s of which the "
                        f"calling thread {caller:.2f} s, broker {theirs:.2f} s; "
                        f"{served:,.0f} Produce requests), consume {c.records_per_s:,.0f} rec/s "
                        f"(load {os.getloadavg()[0]:.1f})")
    return [KeyedRow(client, n, *(statistics.median(r[i] for r in rs) for i in range(6)))
            for (client, n), rs in runs.items()]


def format_keyed(rows: list[KeyedRow]) -> str:
    lines = ["| client | partitions | keyed produce rec/s | x first | produce CPU s client "
             "(calling thread) + broker | Produce requests | consume rec/s | x first |",
             "|---|---|---|---|---|---|---|---|"]
    base: dict[str, KeyedRow] = {}
    for r in sorted(rows, key=lambda r: (r.client, r.partitions)):
        b = base.setdefault(r.client, r)
        lines.append(f"| {r.client} | {r.partitions:,} | {r.produce_rps:,.0f} | "
                     f"{r.produce_rps / b.produce_rps:.2f} | {r.produce_client_cpu_s:.2f} "
                     f"({r.produce_client_caller_cpu_s:.2f}) + {r.produce_broker_cpu_s:.2f} | "
                     f"{r.produce_requests:,.0f} | {r.consume_rps:,.0f} | "
                     f"{r.consume_rps / b.consume_rps:.2f} |")
    ref = {r.partitions: r for r in rows if r.client == KAFKA_ROW}
    if ref:
        lines += ["", "| client | partitions | produce / Apache Kafka's | consume / Apache "
                  "Kafka's |", "|---|---|---|---|"]
        for r in sorted(rows, key=lambda r: (r.client, r.partitions)):
            k = ref.get(r.partitions)
            if r.client != KAFKA_ROW and k is not None:
                lines.append(f"| {r.client} | {r.partitions:,} | "
                             f"{r.produce_rps / k.produce_rps:.2f} | "
                             f"{r.consume_rps / k.consume_rps:.2f} |")
    return "\n".join(lines)


def create_topic(bootstrap: str, topic: str, partitions: int) -> float:
    """Seconds to create ``topic`` (the broker answers once its partitions exist); a long
    timeout: at thousands of partitions creation is slow (issue 21 item 2)."""
    admin = Admin(bootstrap, request_timeout_ms=300_000)
    try:
        start = time.perf_counter()
        admin.create_topic(topic, partitions=partitions, replication_factor=1)
        return time.perf_counter() - start
    finally:
        admin.close()


@dataclass
class CreatePoint:
    """N partitions created on one fresh broker (RF 1), in one request or in 100 (issue 21
    item 2: under 20 s to all led, per-partition cost at 10,000 at most 2x that at 1,000)."""

    partitions: int
    requests: int
    call_s: float
    """Until the last CreateTopics answered."""
    led_s: float
    """Until Metadata shows every partition with a leader."""
    cpu_s: float
    """The broker's CPU seconds (user + system) from the first request to the last answer
    (the answer comes once this broker has published the partitions: the Metadata check of
    all led after it is not counted, at 10,000 partitions a DescribeTopics costs ~0.3 s)."""
    load_avg: float
    settled_cpu_s: float = 0.0
    """The broker's CPU seconds from the first request until it is quiet again (under 20 %
    of a core over 0.5 s) after all led: with the segment files created after the answers
    (which in 100 requests fall partly inside ``cpu_s``) and one Metadata check."""
    settled_sys_s: float = 0.0
    """The kernel's part of ``settled_cpu_s`` (a directory and two files per partition)."""


def led_partitions(admin: Admin, topics: list[str]) -> int:
    """How many partitions of ``topics`` Metadata shows with a leader."""
    return sum(1 for t in admin.describe_topics(topics) for p in t.partitions if p.leader >= 0)


def measure_create(counts: list[int], modes: list[int], repeats: int = 1,
                   progress: object = print, timeout_s: float = 600.0) -> list[CreatePoint]:
    """Creation alone: for each N and each request count in ``modes`` (1 or 100), a fresh
    broker creates N partitions and the wall time to all led and its CPU are taken; the modes
    and counts alternate within each repeat so each sees the same load."""
    from strom.testing import running_broker

    say = progress if callable(progress) else print
    points: list[CreatePoint] = []
    for _ in range(repeats):
        for n in counts:
            for requests in modes:
                if requests > n:
                    continue
                with tempfile.TemporaryDirectory(prefix="strom-bench-create-") as tmp, \
                        running_broker(Path(tmp), startup_timeout=600) as broker, \
                        Admin(broker.bootstrap, request_timeout_ms=int(timeout_s * 1000)) as admin:
                    topics = [f"create-{i}" for i in range(requests)]
                    settle(broker.pid)  # the start's own work done
                    cpu, sys_cpu = cpu_seconds(broker.pid), system_cpu_seconds(broker.pid)
                    start = time.perf_counter()
                    for topic in topics:
                        admin.create_topic(topic, partitions=n // requests, replication_factor=1)
                    call = time.perf_counter() - start
                    answered_cpu = cpu_seconds(broker.pid) - cpu
                    while led_partitions(admin, topics) < n:
                        if time.perf_counter() - start > timeout_s:
                            raise TimeoutError(f"{n:,} partitions not all led in {timeout_s} s")
                        time.sleep(0.1)
                    led = time.perf_counter() - start
                    settle(broker.pid)
                    point = CreatePoint(n, requests, call, led, answered_cpu,
                                        os.getloadavg()[0], cpu_seconds(broker.pid) - cpu,
                                        system_cpu_seconds(broker.pid) - sys_cpu)
                points.append(point)
                say(f"create: {n:,} partitions in {requests} request(s): all led after "
                    f"{point.led_s:.1f} s (answered {point.call_s:.1f} s), broker CPU "
                    f"{point.cpu_s:.2f} s = {point.cpu_s / n * 1000:.2f} ms/partition to "
                    f"the answer, {point.settled_cpu_s / n * 1000:.2f} ms until quiet "
                    f"({point.settled_sys_s / n * 1000:.2f} in the kernel), "
                    f"load {point.load_avg:.1f}")
    return points


def format_create(points: list[CreatePoint]) -> str:
    """Median per (N, requests), and each one's CPU per partition against the smallest N's
    in the same mode (issue 21 item 2 allows at most 2x from 1,000 to 10,000)."""
    runs: dict[tuple[int, int], list[CreatePoint]] = {}
    for p in points:
        runs.setdefault((p.requests, p.partitions), []).append(p)
    lines = ["| partitions | requests | runs | all led s | answered s | broker CPU s to the "
             "answer | CPU s until quiet (kernel) | ms/partition until quiet | x smallest N "
             "| load |", "|---|---|---|---|---|---|---|---|---|---|"]
    base: dict[int, float] = {}
    for (requests, n), ps in sorted(runs.items()):
        per = statistics.median(p.settled_cpu_s for p in ps) / n * 1000
        first = base.setdefault(requests, per)  # 0.0 at a few partitions (CPU in ticks)
        lines.append(f"| {n:,} | {requests} | {len(ps)} | "
                     f"{statistics.median(p.led_s for p in ps):.1f} | "
                     f"{statistics.median(p.call_s for p in ps):.1f} | "
                     f"{statistics.median(p.cpu_s for p in ps):.2f} | "
                     f"{statistics.median(p.settled_cpu_s for p in ps):.2f} "
                     f"({statistics.median(p.settled_sys_s for p in ps):.2f}) | {per:.2f} | "
                     f"{f'{per / first:.2f}' if first else '-'} | "
                     f"{min(p.load_avg for p in ps):.1f}-{max(p.load_avg for p in ps):.1f} |")
    return "\n".join(lines)


def measure(counts: list[int], records: int, progress: object = print,
            idle_seconds: float = 5.0, create_100: bool = True,
            logs_dir: Path | None = None) -> list[ScalePoint]:
    """``create_100``: also create N partitions in 100 requests on another fresh broker (N >=
    1,000); ``logs_dir``: keep the broker's log there (after its clean stop, and at the end)."""
    import shutil

    from strom.testing import BrokerProcess, running_broker

    def keep_log(broker: BrokerProcess, name: str) -> None:
        if logs_dir is not None:
            logs_dir.mkdir(parents=True, exist_ok=True)
            shutil.copy(broker.stderr_path, logs_dir / name)

    say = progress if callable(progress) else print
    points: list[ScalePoint] = []
    for n in counts:
        with tempfile.TemporaryDirectory(prefix="strom-bench-scale-") as tmp, \
                running_broker(Path(tmp), startup_timeout=600) as broker:
            bs = broker.bootstrap
            say(f"partition scale: creating {n:,} partitions in one request")
            cpu = cpu_seconds(broker.pid)
            create_s = create_topic(bs, "scale", n)
            create_cpu = cpu_seconds(broker.pid) - cpu
            # idle means after the creation's background work: at 10,000 partitions the
            # segment files took ~2 s after the answer, and a fixed 0.5 s wait measured 25.6%
            # "idle" CPU that was file creation (1% once they exist)
            wait_segment_files(broker.log_dir, "scale", n, timeout_s=600)
            settle(broker.pid)
            settled_cpu = cpu_seconds(broker.pid) - cpu
            change = change_cost_ms(bs)
            metadata = metadata_ms(bs)
            idle_cpu = idle_cpu_pct(broker.pid, idle_seconds)
            idle = open_fds(broker.pid)
            rss_idle = rss_mib(broker.pid)
            say(f"partition scale: keyed produce of {records:,} x 100 B over {n:,} partitions")
            p = produce_keyed(bs, "scale", records)
            after = open_fds(broker.pid)
            c = sw.consume_all(bs, "scale", n, records, 100)
            rss_after = rss_mib(broker.pid)
            say(f"partition scale: clean restart with {n:,} partitions")
            started = time.perf_counter()
            broker.terminate(timeout=300)  # closing N logs flushes each one
            stop = time.perf_counter() - started
            keep_log(broker, f"broker-{n}-stopped.log")
            started = time.perf_counter()
            broker.start()  # until it answers Metadata (its logs are loaded by then)
            restart = time.perf_counter() - started + first_write_s(bs, "scale")
            say(f"partition scale: kill -9 and restart with {n:,} partitions")
            broker.kill()
            started = time.perf_counter()
            broker.start()
            kill9 = time.perf_counter() - started + first_write_s(bs, "scale")
            point = ScalePoint(n, create_s, p.records_per_s, c.records_per_s, idle, after,
                               create_cpu, change, idle_cpu, restart_s=restart, stop_s=stop,
                               kill9_s=kill9, fds_restarted=open_fds(broker.pid),
                               load_avg=os.getloadavg()[0], metadata_ms=metadata,
                               rss_mib_idle=rss_idle, rss_mib_after=rss_after,
                               create_settled_cpu_s=settled_cpu)
            keep_log(broker, f"broker-{n}.log")
        if n >= 1000 and create_100:
            with tempfile.TemporaryDirectory(prefix="strom-bench-scale-") as tmp, \
                    running_broker(Path(tmp)) as broker:
                say(f"partition scale: creating {n:,} partitions in 100 requests")
                point.create_100_s = create_in_requests(broker.bootstrap, n)
        points.append(point)
        say(f"partition scale: {point}")
    return points


def format_points(points: list[ScalePoint]) -> str:
    base = points[0]
    lines = ["| partitions | create s (broker CPU s to the answer / until quiet, ms CPU/partition "
             "until quiet) | in 100 requests s "
             "| one more change ms | idle CPU | keyed produce rec/s | x first | consume rec/s "
             "| x first | fds idle / after produce / after kill -9 restart | stop s "
             "| clean restart -> write s | kill -9 -> write s | metadata ms "
             "| RSS MiB idle / after | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        batched = "-" if p.create_100_s is None else f"{p.create_100_s:.2f}"
        restart = "-" if p.restart_s is None else f"{p.restart_s:.1f}"
        kill9 = "-" if p.kill9_s is None else f"{p.kill9_s:.1f}"
        stop = "-" if p.stop_s is None else f"{p.stop_s:.1f}"
        load = "-" if p.load_avg is None else f"{p.load_avg:.0f}"
        fds = "-" if p.fds_restarted is None else str(p.fds_restarted)
        metadata = "-" if p.metadata_ms is None else f"{p.metadata_ms:.1f}"
        rss = ("-" if p.rss_mib_idle is None or p.rss_mib_after is None
               else f"{p.rss_mib_idle:.0f} / {p.rss_mib_after:.0f}")
        settled = p.create_cpu_s if p.create_settled_cpu_s is None else p.create_settled_cpu_s
        lines.append(f"| {p.partitions:,} | {p.create_s:.2f} ({p.create_cpu_s:.2f} / "
                     f"{settled:.2f}, {settled / p.partitions * 1000:.2f}) | {batched} | "
                     f"{p.change_ms:.0f} | {p.idle_cpu_pct:.1f}% | {p.produce_rps:,.0f} | "
                     f"{p.produce_rps / base.produce_rps:.2f} | {p.consume_rps:,.0f} | "
                     f"{p.consume_rps / base.consume_rps:.2f} | {p.fds_idle} / "
                     f"{p.fds_after_produce} / {fds} | {stop} | {restart} | {kill9} | {metadata} "
                     f"| {rss} | {load} |")
    return "\n".join(lines)


def plot(points: list[ScalePoint], path: Path) -> bool:
    """A PNG of the rates against the partition count, if matplotlib is installed (it is not
    a dependency of Strom; the table and JSON do not need it)."""
    try:
        import matplotlib  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [p.partitions for p in points]
    ax.plot(xs, [p.produce_rps for p in points], marker="o", label="keyed produce")
    ax.plot(xs, [p.consume_rps for p in points], marker="o", label="consume")
    ax.set_xscale("log")
    ax.set_xlabel("partitions (one broker, RF 1)")
    ax.set_ylabel("records/s")
    ax.legend()
    for label, values in (("create (one request)", [p.create_s for p in points]),
                          ("clean stop", [p.stop_s for p in points]),
                          ("clean restart -> first write", [p.restart_s for p in points]),
                          ("kill -9 -> first write", [p.kill9_s for p in points])):
        if all(v is not None for v in values):
            bx.plot(xs, values, marker="o", label=label)
    bx.set_xscale("log")
    bx.set_xlabel("partitions (one broker, RF 1)")
    bx.set_ylabel("seconds")
    loads = [p.load_avg for p in points if p.load_avg is not None]
    if loads:
        fig.suptitle(f"2 cores shared, load average {min(loads):.0f}-{max(loads):.0f}")
    bx.legend()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    return True


def _write_json(path: Path, fields: dict[str, object]) -> None:
    """``fields`` with what every partition-scale JSON carries (cores, machine info with the
    data directory's filesystem, the load average at the end) as JSON at ``path``."""
    path.write_text(json.dumps({"cores": os.cpu_count(), "machine": machine_info(),
                                "load_avg_end": os.getloadavg(), **fields}, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--counts", default="10,100,1000")
    parser.add_argument("--png", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None,
                        help="write the points (and the load average) as JSON here")
    parser.add_argument("--keyed-only", action="store_true",
                        help="only keyed produce and consume over each N, Strom's client and "
                             "confluent-kafka on the Kafka listener, one broker, median of "
                             "--repeats")
    parser.add_argument("--repeats", type=int, default=None,
                        help="runs per N (median): 5 with --keyed-only (a 10-partition keyed "
                             "produce of 200,000 records lasts ~0.15 s and single runs spread "
                             "1.05-1.69M rec/s on a quiet machine), else 3")
    parser.add_argument("--clients", default=None,
                        help="with --keyed-only: only these rows, comma-separated (strom, "
                             "confluent-kafka; apache-kafka with --kafka)")
    parser.add_argument("--brokers", type=int, choices=(1, 3), default=1,
                        help="3: three brokers, RF 3, N partitions in all, with a kill -9 "
                             "failover (benchmarks/partition_scale_rf3.py)")
    parser.add_argument("--max-seconds", type=float, default=900.0,
                        help="with --brokers 3: the bound of every wait and of the produce")
    parser.add_argument("--logs", type=Path, default=None,
                        help="copy the brokers' logs into this directory")
    parser.add_argument("--create-100", action=argparse.BooleanOptionalAction, default=True,
                        help="from 1,000 partitions on, also create N partitions in 100 "
                             "requests on a second fresh broker")
    parser.add_argument("--create-only", action="store_true",
                        help="only creation: N partitions in one request and in 100 (from "
                             "1,000 on) on fresh brokers, wall time to all led and the "
                             "broker's CPU per partition, --repeats runs alternated")
    parser.add_argument("--kafka", action="store_true",
                        help="with --keyed-only: also run the confluent-kafka rows against one "
                             "Apache Kafka node (needs Java and the jars kafka-ref/fetch gets)")
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 5 if args.keyed_only else 3
    if args.brokers == 3:
        return _main_rf3(args)
    if args.create_only:
        counts = [int(c) for c in args.counts.split(",")]
        created = measure_create(counts, [1, 100], args.repeats,
                                 progress=lambda m: print(m, flush=True))
        print(format_create(created))
        if args.json is not None:
            _write_json(args.json, {"repeats": args.repeats,
                                    "points": [asdict(p) for p in created]})
        return 0
    if args.keyed_only:
        rows = measure_keyed([int(c) for c in args.counts.split(",")], args.records,
                             args.repeats, kafka=args.kafka,
                             only=args.clients.split(",") if args.clients else None)
        print(format_keyed(rows))
        if args.json is not None:
            _write_json(args.json, {"records": args.records, "repeats": args.repeats,
                                    "rows": [asdict(r) for r in rows]})
        return 0
    points = measure([int(c) for c in args.counts.split(",")], args.records,
                     create_100=args.create_100, logs_dir=args.logs)
    print(format_points(points))
    if args.json is not None:
        _write_json(args.json, {"records": args.records,
                                "points": [asdict(p) for p in points]})
    if args.png is not None and not plot(points, args.png):
        print("matplotlib is not installed: no PNG")
    return 0


def _main_rf3(args: argparse.Namespace) -> int:
    from benchmarks import partition_scale_rf3 as rf3

    counts = [int(c) for c in args.counts.split(",")]
    points = rf3.measure(counts, args.records, args.max_seconds,
                         progress=lambda m: print(m, flush=True), logs_dir=args.logs)
    print(rf3.format_points(points))
    if args.json is not None:
        _write_json(args.json, {"brokers": 3, "replication_factor": 3, "records": args.records,
                                "max_seconds": args.max_seconds,
                                "points": [asdict(p) for p in points]})
    if args.png is not None and not rf3.plot(points, args.png):
        print("matplotlib is not installed: no PNG")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
