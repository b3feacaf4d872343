"""The benchmark workloads through the Kafka protocol, with confluent-kafka (librdkafka) and with
Kafka's own Java ``ProducerPerformance``: the same code against Apache Kafka and against Strom's
Kafka listener, so a row pair differs only in the server.

Client settings mirror :mod:`benchmarks.strom_workloads` (Strom's own client) so that the rows
compare: throughput with acks=1, ``linger.ms=5``, ~1 MB batches, no compression; latency with
``linger.ms=0``. librdkafka's batches are capped at 1,000,000 bytes, below Kafka's default
``message.max.bytes`` (1,048,588), which a 1 MiB batch plus its header would exceed.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import struct
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from benchmarks.strom_workloads import Throughput, run_latency, send_paced, timed_catch_up
from strom.testing.compat import create_led_topic

if TYPE_CHECKING:
    import multiprocessing.synchronize

_TS = struct.Struct(">d")
#: The batch size every throughput row uses (bytes).
BATCH_BYTES = 1_000_000
LINGER_MS = 5


#: Topics of the Kafka-protocol rows: created and led before a run starts (one implementation).
create_topic = create_led_topic
def strom_beside_kafka(nodes: int, config: Mapping[str, str] | None = None) -> dict[str, str]:
    """The config of Strom brokers measured beside a reference Kafka of ``nodes`` nodes
    (:func:`strom.testing.kafka.running_kafka`): every setting the reference changes from
    Kafka's defaults that Strom has too, at the same value, then ``config``. Without it a fresh
    group waited Strom's default 3 s ``group.initial.rebalance.delay.ms`` against the
    reference's 0, and ConsumerPerformance (whose rate counts the group join) read Strom at
    0.2-0.3x of Kafka while Strom's fetch rate was on par."""
    from strom.broker.config import KEYS
    from strom.testing.kafka import reference_settings

    same = {k: v for k, v in reference_settings(min(nodes, 3)).items() if k in KEYS}
    return {**same, **(config or {})}


def _producer(bootstrap: str, **overrides: Any) -> Any:
    from confluent_kafka import Producer

    errors: list[str] = []
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "acks": 1, "linger.ms": LINGER_MS,
        "batch.size": BATCH_BYTES, "compression.type": "none",
        "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1 << 20,
        "error_cb": lambda err: errors.append(str(err)),
    }
    config.update(overrides)
    return Producer(config), errors


def produce(bootstrap: str, topic: str, records: int, value_size: int, *,
            acks: int | str = 1) -> Throughput:
    """Send ``records`` values as fast as librdkafka takes them; time includes the flush. No
    per-record delivery callback (Strom's client pays none either); a lost record shows as a
    short catch-up, which fails the run."""
    value = os.urandom(value_size)
    producer, errors = _producer(bootstrap, acks=acks)
    send = producer.produce
    start = time.perf_counter()
    for _ in range(records):
        try:
            send(topic, value)
        except BufferError:  # the local queue is full: let it drain, then send again
            _send_when_room(producer, topic, value)
    left = producer.flush(300)
    elapsed = time.perf_counter() - start
    if left or errors:
        raise RuntimeError(f"{left} record(s) undelivered after the flush; errors: {errors[:3]}")
    return Throughput(records, elapsed, records * value_size)


def _send_when_room(producer: Any, topic: str, value: bytes, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        producer.poll(0.05)
        try:
            producer.produce(topic, value)
            return
        except BufferError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"producer queue still full after {timeout_s}s") from None


def _consumer(bootstrap: str, **overrides: Any) -> Any:
    from confluent_kafka import Consumer

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "group.id": f"bench-{os.getpid()}-{time.time_ns()}",
        "enable.auto.commit": False, "fetch.max.bytes": 64 << 20,
        "max.partition.fetch.bytes": 8 << 20, "fetch.wait.max.ms": 100,
    }
    config.update(overrides)
    return Consumer(config)


def consume_arrived(consumer: Any, timeout_s: float) -> list[Any]:
    """What has arrived, as soon as anything has. librdkafka's ``consume(num_messages=N,
    timeout=T)`` returns only once N messages are queued or T has passed, so below N/T records
    per second every record waits for the timeout: a latency consumer built on it measured a
    floor of p50 ~100 ms / p99 ~200 ms at 1,000 records/s against Kafka and Strom alike
    (2026-11-26). Block in ``poll`` for the first message, then take what is queued behind it."""
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    return [first, *consumer.consume(num_messages=10_000, timeout=0)]


def consume_all(bootstrap: str, topic: str, partitions: int, records: int, value_size: int,
                timeout_s: float = 300.0,
                consumer_config: dict[str, Any] | None = None) -> Throughput:
    """Read ``records`` from the beginning of every partition (catch-up), counting what each
    ``consume`` call returns, as the other systems' loops do. ``consumer_config`` overrides the
    consumer's settings (default: 8 MiB per partition, 64 MiB per fetch)."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = _consumer(bootstrap, **(consumer_config or {}))
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])

        def poll() -> int:
            batch = consumer.consume(num_messages=10_000, timeout=1.0)
            return sum(1 for m in batch if m.error() is None)

        return timed_catch_up(poll, records, value_size, timeout_s)
    finally:
        consumer.close()


def _latency_consumer(bootstrap: str, topic: str, partitions: int, expected: int,
                      ready: multiprocessing.synchronize.Event,
                      out: mp.Queue[list[float]], timeout_s: float) -> None:
    from confluent_kafka import TopicPartition

    consumer = _consumer(bootstrap, **{"fetch.wait.max.ms": 10})
    ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)]
    consumer.assign([TopicPartition(topic, p, end) for p, end in enumerate(ends)])
    consumer.consume(num_messages=1, timeout=0.5)  # connected and fetching before "ready"
    ready.set()
    latencies: list[float] = []
    deadline = time.time() + timeout_s
    while len(latencies) < expected and time.time() < deadline:
        for msg in consume_arrived(consumer, 0.2):
            now = time.time()
            value = msg.value() if msg.error() is None else None
            if value is not None and len(value) >= 8:
                latencies.append((now - _TS.unpack_from(value)[0]) * 1000.0)
    consumer.close()
    out.put(latencies)


def end_to_end_latency(bootstrap: str, topic: str, partitions: int, rate: int, seconds: float,
                       value_size: int = 100, acks: int | str = 1,
                       producer_config: dict[str, Any] | None = None) -> list[float]:
    """Produce at a fixed ``rate`` for ``seconds`` (``linger.ms=0`` unless ``producer_config``
    says otherwise); return the sorted producer-to-consumer latencies in ms, read by a consumer
    in another process."""
    total = int(rate * seconds)

    def produce_paced() -> None:
        producer, _ = _producer(bootstrap, acks=acks,
                                **{"linger.ms": 0, **(producer_config or {})})

        def send(value: bytes) -> None:
            producer.produce(topic, value)
            producer.poll(0)

        send_paced(send, rate, total, value_size)
        producer.flush(60)

    return run_latency(_latency_consumer, (bootstrap, topic, partitions), total, seconds,
                       produce_paced)


_PERF_LINE = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), "
                        r"([\d.]+) ms avg latency, ([\d.]+) ms max latency")


def parse_producer_performance(output: str) -> dict[str, float]:
    """The summary line of Kafka's ProducerPerformance: records, records/s, MB/s, latencies."""
    matches = _PERF_LINE.findall(output)
    if not matches:
        raise RuntimeError(f"no ProducerPerformance summary in its output:\n{output[-2000:]}")
    records, rate, mbps, avg, peak = matches[-1]
    return {"records": float(records), "records/s": float(rate), "MB/s": float(mbps),
            "avg ms": float(avg), "max ms": float(peak)}


_PERF_PERCENTILES = re.compile(r"([\d.]+) ms 50th, ([\d.]+) ms 95th, ([\d.]+) ms 99th, "
                               r"([\d.]+) ms 99\.9th")


def parse_producer_percentiles(output: str) -> dict[str, float]:
    """The send-to-acknowledgement percentiles of ProducerPerformance's summary line (ms)."""
    matches = _PERF_PERCENTILES.findall(output)
    if not matches:
        raise RuntimeError(f"no ProducerPerformance percentiles in its output:\n"
                           f"{output[-2000:]}")
    p50, p95, p99, p999 = (float(v) for v in matches[-1])
    return {"p50 ms": p50, "p95 ms": p95, "p99 ms": p99, "p99.9 ms": p999}


def producer_performance(kafka: Any, bootstrap: str, topic: str, records: int,
                         value_size: int, *, acks: int | str = 1, throughput: int = -1,
                         linger_ms: int = LINGER_MS) -> dict[str, float]:
    """Kafka's own ``ProducerPerformance`` (Java client), at full speed or at ``throughput``
    records/s, same settings as the confluent-kafka rows; ``kafka`` is a
    :class:`strom.testing.kafka.KafkaCluster` (its jars). The percentiles of the send-to-ack
    latency are in the result too when the tool printed them."""
    result = kafka.run_tool(
        "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
        "--num-records", str(records), "--record-size", str(value_size),
        "--throughput", str(throughput),
        "--producer-props", f"bootstrap.servers={bootstrap}", f"acks={acks}",
        f"linger.ms={linger_ms}", f"batch.size={BATCH_BYTES}", "compression.type=none",
        timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"ProducerPerformance exited {result.returncode}:\n"
                           f"{(result.stdout + result.stderr)[-2000:]}")
    out = parse_producer_performance(result.stdout)
    if _PERF_PERCENTILES.search(result.stdout):
        out.update(parse_producer_percentiles(result.stdout))
    return out


def _tool_output(kafka: Any, name: str, *args: str, timeout: float = 600) -> str:
    result = kafka.run_tool(f"org.apache.kafka.tools.{name}", *args, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{name} exited {result.returncode}:\n"
                           f"{(result.stdout + result.stderr)[-2000:]}")
    return str(result.stdout)


def parse_consumer_performance(output: str) -> dict[str, float]:
    """ConsumerPerformance's header line and its one row of figures (comma-separated):
    MB/s and records/s over the whole run, and over the fetch time alone."""
    lines = [line.strip() for line in output.splitlines() if "," in line]
    for i, line in enumerate(lines[:-1]):
        if line.startswith("start.time"):
            names = [n.strip() for n in line.split(",")]
            # the figures: the next line with as many fields, starting with the start date
            # (the consumer's log lines come in between)
            data = next((d for d in lines[i + 1:] if d[:1].isdigit()
                         and len(d.split(",")) == len(names)), None)
            if data is None:
                break
            row = dict(zip(names, [v.strip() for v in data.split(",")], strict=True))
            try:
                return {"records": float(row["data.consumed.in.nMsg"]),
                        "records/s": float(row["nMsg.sec"]), "MB/s": float(row["MB.sec"]),
                        "fetch records/s": float(row["fetch.nMsg.sec"]),
                        "rebalance ms": float(row["rebalance.time.ms"])}
            except (KeyError, ValueError):
                break
    raise RuntimeError(f"no ConsumerPerformance figures in its output:\n{output[-2000:]}")


def consumer_performance(kafka: Any, bootstrap: str, topic: str, records: int
                         ) -> dict[str, float]:
    """Kafka's own ``ConsumerPerformance`` (Java consumer in a fresh group, from the earliest
    offset) reading ``records`` of ``topic``."""
    return parse_consumer_performance(_tool_output(
        kafka, "ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
        "--num-records", str(records), "--timeout", "60000",
        "--group", f"perf-{os.getpid()}-{time.time_ns()}",
        "--command-property", "fetch.max.bytes=67108864"))


_E2E_AVG = re.compile(r"Avg latency: ([\d.]+) ms")
_E2E_PCT = re.compile(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99.9th = ([\d.]+)")


def parse_end_to_end_latency(output: str) -> dict[str, float]:
    """EndToEndLatency's average and 50th / 99th / 99.9th percentiles (ms)."""
    avg, pct = _E2E_AVG.search(output), _E2E_PCT.search(output)
    if avg is None or pct is None:
        raise RuntimeError(f"no EndToEndLatency summary in its output:\n{output[-2000:]}")
    return {"avg ms": float(avg.group(1)), "p50 ms": float(pct.group(1)),
            "p99 ms": float(pct.group(2)), "p99.9 ms": float(pct.group(3))}


def end_to_end_latency_tool(kafka: Any, bootstrap: str, topic: str, records: int,
                            value_size: int, *, acks: int | str = 1) -> dict[str, float]:
    """Kafka's own ``EndToEndLatency``: one record at a time, sent (synchronously, with
    ``acks``) and then read back by a consumer before the next is sent: the round trip of a
    single record, not a rate. ``topic`` must have one partition."""
    return parse_end_to_end_latency(_tool_output(
        kafka, "EndToEndLatency", "--bootstrap-server", bootstrap, "--topic", topic,
        "--num-records", str(records), "--producer-acks", str(acks),
        "--record-size", str(value_size)))
