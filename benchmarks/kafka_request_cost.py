"""The broker's CPU per one-partition Produce request on the Kafka listener, by how many requests
arrive together (issue 21 item 1).

Why it exists: librdkafka sends one partition per Produce request (its issue 1700), so keyed
produce over 1,000 partitions is ~2,000 small requests per 200,000 records, and with its
backpressure threshold of 1 most of them reach the broker alone. What bounds confluent-kafka's
rate there is the broker's CPU per lone request, which end-to-end runs on a shared 2-core machine
cannot resolve (single runs spread 2-5x); this driver measures it directly: one socket, Produce
v9 requests each carrying one batch of ``--batch`` 100 B records for one partition, rotating over
a ``--partitions`` topic, ``--window`` requests written at once and their answers read before
the next window; the broker's user and system CPU from ``/proc/PID/stat`` per request.

``--base-src DIR`` also starts a broker from another checkout's ``broker-image/src`` (the same
interpreter and packages, that source first on ``PYTHONPATH``) and alternates the two, round by
round, so before/after are measured under the same load: ``python -m
benchmarks.kafka_request_cost --base-src /tmp/base/broker-image/src --rounds 4``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import socket
import statistics
import struct
import tempfile
import time
from pathlib import Path

from kio.schema.produce.v9 import request as produce_req

from benchmarks import raw_records as rr
from benchmarks.partition_scale import create_topic, settle
from benchmarks.raw_kafka import PRODUCE, frame

PRODUCE_VERSION = 9
_SIZE = struct.Struct(">i")
_TICK = os.sysconf("SC_CLK_TCK")


def produce_frames(topic: str, partitions: int, batch: bytes) -> list[bytes]:
    """One acks=1 Produce v9 frame per partition, each with ``batch`` (correlation id 0)."""
    return [frame(PRODUCE, PRODUCE_VERSION, 0, produce_req.ProduceRequest(
        transactional_id=None, acks=1,  # type: ignore[arg-type]
        timeout=datetime.timedelta(seconds=30),  # type: ignore[arg-type]
        topic_data=(produce_req.TopicProduceData(name=topic, partition_data=(  # type: ignore[arg-type]
            produce_req.PartitionProduceData(index=p, records=batch),),),)))  # type: ignore[arg-type]
        for p in range(partitions)]


def cpu_ticks(pid: int) -> tuple[int, int]:
    """(user, system) clock ticks of ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def run(bootstrap: str, pid: int, frames: list[bytes], requests: int, window: int
        ) -> tuple[float, float, float]:
    """Send ``requests`` frames (rotating over ``frames``) ``window`` at a time; (user, system
    µs of broker CPU per request, wall s)."""
    host, _, port = bootstrap.rpartition(":")
    with contextlib.closing(socket.create_connection((host, int(port)), timeout=60)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stream = sock.makefile("rb")
        n = len(frames)
        sent = 0
        user0, sys0 = cpu_ticks(pid)
        start = time.perf_counter()
        while sent < requests:
            batch = [bytearray(frames[(sent + i) % n]) for i in range(min(window, requests - sent))]
            for i, f in enumerate(batch):
                _SIZE.pack_into(f, 8, sent + i)  # correlation id
            sock.sendall(b"".join(batch))
            for _ in batch:
                size = _SIZE.unpack(stream.read(4))[0]
                answer = stream.read(size)
                if len(answer) != size:
                    raise ConnectionError("the listener closed the connection")
            sent += len(batch)
        wall = time.perf_counter() - start
        user1, sys1 = cpu_ticks(pid)
    per = 1e6 / _TICK / requests
    return (user1 - user0) * per, (sys1 - sys0) * per, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=60, help="records per request")
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--windows", default="1,8")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base-src", type=Path, default=None,
                        help="also run a broker from this broker-image/src, alternated")
    args = parser.parse_args(argv)
    from strom.testing.broker import BrokerProcess

    windows = [int(w) for w in args.windows.split(",")]
    batch = rr.build_batch(args.batch, 100)
    variants: dict[str, dict[str, str]] = {"this": {}}
    if args.base_src is not None:
        variants = {"base": {"PYTHONPATH": str(args.base_src)}, "this": {}}
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="strom-request-cost-") as tmp, \
            contextlib.ExitStack() as stack:
        brokers = {}
        for name, env in variants.items():
            broker = BrokerProcess(Path(tmp) / name, env=env, startup_timeout=300)
            stack.enter_context(broker)
            create_topic(broker.bootstrap, "cost", args.partitions)
            settle(broker.pid)
            frames = produce_frames("cost", args.partitions, batch)
            run(broker.kafka_bootstrap, broker.pid, frames, args.partitions * 2, 8)  # warm
            brokers[name] = (broker, frames)
        for rnd in range(args.rounds):
            order = list(brokers) if rnd % 2 == 0 else list(reversed(brokers))
            for window in windows:
                for name in order:
                    broker, frames = brokers[name]
                    user, system, wall = run(broker.kafka_bootstrap, broker.pid, frames,
                                             args.requests, window)
                    results.setdefault((name, window), []).append((user, system))
                    print(f"round {rnd + 1} {name} W={window}: {user + system:.0f} µs/request "
                          f"(user {user:.0f}, sys {system:.0f}; {args.requests / wall:,.0f} "
                          f"req/s; load {os.getloadavg()[0]:.1f})", flush=True)
    for (name, window), rs in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(f"{name} W={window}: median {statistics.median(u + s for u, s in rs):.0f} µs/request "
              f"(user {statistics.median(u for u, _ in rs):.0f}, sys "
              f"{statistics.median(s for _, s in rs):.0f}; runs "
              f"{', '.join(f'{u + s:.0f}' for u, s in rs)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
