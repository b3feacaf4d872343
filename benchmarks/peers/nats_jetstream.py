"""NATS JetStream peer: file storage, async publish with acks awaited in windows, pull consumer
fetching large batches — nats-py's fastest documented modes. One subject per partition."""

from __future__ import annotations

import asyncio
import os
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.peers._proc import RssSampler, find_binary, free_port, rss_bytes, server

NAME = "nats-jetstream"
_TS = struct.Struct(">d")
WINDOW = 2000  # publishes in flight before awaiting their acks


def available() -> str | None:
    if find_binary("nats-server") is None:
        return "nats-server not installed (run benchmarks/setup-peers)"
    return None


def _port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


async def _produce(url: str, subjects: list[str], records: int, value_size: int) -> float:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    value = os.urandom(value_size)
    n = len(subjects)
    start = time.perf_counter()
    pending: list[asyncio.Future[Any]] = []
    for i in range(records):
        pending.append(await js.publish_async(subjects[i % n], value))
        if len(pending) >= WINDOW:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)
    secs = time.perf_counter() - start
    await nc.close()
    return secs


async def _consume(url: str, stream: str, records: int, durable: str) -> float:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    sub = await js.pull_subscribe("", durable=durable, stream=stream)
    got = 0
    start = time.perf_counter()
    deadline = start + 600
    while got < records and time.perf_counter() < deadline:
        try:
            msgs = await sub.fetch(5000, timeout=1)
        except nats.errors.TimeoutError:
            continue
        got += len(msgs)
        if msgs:
            await msgs[-1].ack()  # AckAll policy below: one ack covers the batch
    secs = time.perf_counter() - start
    await nc.close()
    if got < records:
        raise RuntimeError(f"nats consumed {got} of {records}")
    return secs


async def _latency(url: str, subject: str, rate: int, seconds: float, value_size: int
                   ) -> list[float]:
    import nats
    from nats.js.api import DeliverPolicy

    nc = await nats.connect(url)
    js = nc.jetstream()
    latencies: list[float] = []

    async def on_msg(msg: object) -> None:
        data = msg.data  # type: ignore[attr-defined]
        latencies.append((time.time() - _TS.unpack_from(data)[0]) * 1000)

    await js.subscribe(subject, cb=on_msg, manual_ack=False,
                       deliver_policy=DeliverPolicy.NEW)
    total = int(rate * seconds)
    pad = b"\0" * max(0, value_size - 8)
    start = time.perf_counter()
    for i in range(total):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await js.publish_async(subject, _TS.pack(time.time()) + pad)
    deadline = time.perf_counter() + 30
    while len(latencies) < total and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    await nc.close()
    return sorted(latencies)


async def _setup(url: str, stream: str, subjects: list[str], durables: list[str]) -> None:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType

    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=subjects, storage=StorageType.FILE)
    for durable in durables:
        await js.add_consumer(stream, ConsumerConfig(durable_name=durable,
                                                     ack_policy=AckPolicy.ALL,
                                                     max_ack_pending=-1))
    await nc.close()


def run(workload: str, partitions: int, records: int, value_size: int,
        latency: tuple[int, float] | None, consume_repeats: int = 1
        ) -> dict[str, float | list[float]]:
    with tempfile.TemporaryDirectory(prefix="bench-nats-") as tmp:
        port = free_port()
        cmd = [find_binary("nats-server") or "nats-server", "-a", "127.0.0.1", "-p", str(port),
               "-js", "-sd", str(Path(tmp) / "js")]
        url = f"nats://127.0.0.1:{port}"
        with server(cmd, Path(tmp) / "nats.log", lambda: _port_open(port)) as proc:
            stream = workload.replace("-", "_").upper()
            subjects = [f"{workload}.{p}" for p in range(partitions)]
            out: dict[str, float | list[float]] = {"rss idle": float(rss_bytes(proc.pid))}
            durables = [f"bench{i}" for i in range(consume_repeats)]
            asyncio.run(_setup(url, stream, [*subjects, f"{workload}.lat"], durables))
            with RssSampler(proc.pid) as rss:
                secs = asyncio.run(_produce(url, subjects, records, value_size))
                out["produce"] = records / secs
                out["produce MB/s"] = records * value_size / secs / 1e6
                # a fresh durable consumer per run reads the whole stream again; median run
                runs = sorted(asyncio.run(_consume(url, stream, records, f"bench{i}"))
                              for i in range(consume_repeats))
                secs = runs[len(runs) // 2]
            out["rss load"] = float(rss.peak)
            out["consume"] = records / secs
            out["consume MB/s"] = records * value_size / secs / 1e6
            if latency is not None:
                out["latencies"] = asyncio.run(
                    _latency(url, f"{workload}.lat", latency[0], latency[1], value_size))
            return out
