"""Redis Streams peer: XADD in pipelines, XREADGROUP in large COUNT batches, AOF everysec.

Fastest documented mode of redis-py: hiredis parser, non-transactional pipelines of 1000
commands (one round trip per 1000 writes). Partitions map to one stream key each.
"""

from __future__ import annotations

import os
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.peers._proc import RssSampler, find_binary, free_port, rss_bytes, server

NAME = "redis-streams"
_TS = struct.Struct(">d")
PIPELINE = 1000


def available() -> str | None:
    """None if usable, else the reason it is skipped."""
    if find_binary("redis-server") is None:
        return "redis-server not installed (run benchmarks/setup-peers)"
    return None


class RedisPeer:
    def __init__(self, tmp: Path) -> None:
        import redis

        self.port = free_port()
        self.cmd = [find_binary("redis-server") or "redis-server", "--port", str(self.port),
                    "--bind", "127.0.0.1", "--dir", str(tmp), "--appendonly", "yes",
                    "--appendfsync", "everysec", "--save", "", "--protected-mode", "yes"]
        self.log = tmp / "redis.log"
        self._redis = redis

    def client(self) -> Any:
        return self._redis.Redis(host="127.0.0.1", port=self.port)

    def ready(self) -> bool:
        try:
            return bool(self.client().ping())
        except Exception:
            return False

    def produce(self, streams: list[str], records: int, value_size: int) -> float:
        r = self.client()
        value = os.urandom(value_size)
        start = time.perf_counter()
        pipe = r.pipeline(transaction=False)
        n = len(streams)
        for i in range(records):
            pipe.xadd(streams[i % n], {"v": value})
            if (i + 1) % PIPELINE == 0:
                pipe.execute()
        pipe.execute()
        return time.perf_counter() - start

    def consume(self, streams: list[str], records: int, group: str = "bench") -> float:
        r = self.client()
        for s in streams:
            r.xgroup_create(s, group, id="0", mkstream=True)
        got = 0
        start = time.perf_counter()
        deadline = start + 600
        while got < records and time.perf_counter() < deadline:
            resp = r.xreadgroup(group, "c1", {s: ">" for s in streams}, count=10_000,
                                noack=True)
            for _stream, entries in resp or []:
                got += len(entries)
        if got < records:
            raise RuntimeError(f"redis consumed {got} of {records}")
        return time.perf_counter() - start

    def latency(self, stream: str, rate: int, seconds: float, value_size: int) -> list[float]:
        r = self.client()
        r.xgroup_create(stream, "lat", id="$", mkstream=True)
        total = int(rate * seconds)
        latencies: list[float] = []

        def consume() -> None:
            c = self.client()
            deadline = time.time() + seconds + 30
            while len(latencies) < total and time.time() < deadline:
                resp = c.xreadgroup("lat", "c", {stream: ">"}, count=1000, block=100, noack=True)
                now = time.time()
                for _s, entries in resp or []:
                    for _id, fields in entries:
                        latencies.append((now - _TS.unpack_from(fields[b"v"])[0]) * 1000)

        t = threading.Thread(target=consume, daemon=True)
        t.start()
        pad = b"\0" * max(0, value_size - 8)
        start = time.perf_counter()
        for i in range(total):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            r.xadd(stream, {"v": _TS.pack(time.time()) + pad})
        t.join(seconds + 40)
        return sorted(latencies)


def run(workload: str, partitions: int, records: int, value_size: int,
        latency: tuple[int, float] | None, consume_repeats: int = 1
        ) -> dict[str, float | list[float]]:
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as tmp:
        peer = RedisPeer(Path(tmp))
        with server(peer.cmd, peer.log, peer.ready) as proc:
            streams = [f"{workload}-{p}" for p in range(partitions)]
            out: dict[str, float | list[float]] = {"rss idle": float(rss_bytes(proc.pid))}
            with RssSampler(proc.pid) as rss:
                secs = peer.produce(streams, records, value_size)
                out["produce"] = records / secs
                out["produce MB/s"] = records * value_size / secs / 1e6
                # a fresh consumer group per run reads the whole stream again; median run
                runs = sorted(peer.consume(streams, records, f"bench{i}")
                              for i in range(consume_repeats))
                secs = runs[len(runs) // 2]
            out["rss load"] = float(rss.peak)
            out["consume"] = records / secs
            out["consume MB/s"] = records * value_size / secs / 1e6
            if latency is not None:
                out["latencies"] = peer.latency(f"{workload}-lat", latency[0], latency[1],
                                                value_size)
            return out
