"""Consumer-group benchmarks: rebalance time by group size, group throughput vs one consumer.

Rebalance time: N members subscribe to one topic; the clock starts when the last member has
subscribed and stops when every member holds a stable assignment (the coordinator says Stable with
N members, and the members' assignments cover every partition exactly once). Members are
AsyncConsumers on one loop in this process, so 50 of them stay cheap. The broker's
``group.initial.rebalance.delay.ms`` is 0 here, so the figure is the protocol's cost, not
Kafka's deliberate 3 s wait for more members to arrive.

Throughput: the same records read by N group members (one process each, as groups are deployed)
and by a single manually assigned consumer; ratio = group / single. On a 2-core machine the group
cannot scale much: the row says what this machine gives, not what a cluster would.
"""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing as mp
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import strom_workloads as sw
from benchmarks.harness import Result, percentile

#: Broker settings for group benchmarks: no initial rebalance delay (see the module docstring).
GROUP_BENCH_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "4",
    "offsets.topic.replication.factor": "1",
}

Progress = Callable[[str], None]


def group_label(members: int) -> str:
    return f"strom group ({members} member{'s' if members != 1 else ''})"


# --- rebalance time ------------------------------------------------------------------------------

def _stable(admin: Any, group: str, members: int, partitions: int,
            assignments: Sequence[set[Any]]) -> bool:
    owned = [tp for a in assignments for tp in a]
    if len(owned) != partitions or len(set(owned)) != partitions:
        return False
    desc = admin.describe_group(group)
    return bool(desc.state == "Stable" and len(desc.members) == members)


async def _async_rebalance(bootstrap: str, topic: str, group: str, members: int,
                           partitions: int, timeout_s: float) -> float:
    from strom.client import Admin, AsyncConsumer

    consumers: list[Any] = [AsyncConsumer(bootstrap, group_id=group, client_id=f"bench-{i}",
                                          enable_auto_commit=False,
                                          auto_offset_reset="earliest",
                                          session_timeout_ms=10_000,
                                          heartbeat_interval_ms=1000)
                            for i in range(members)]
    stop = asyncio.Event()

    async def run(c: Any) -> None:
        while not stop.is_set():
            await c.poll(timeout_ms=50)

    admin = Admin(bootstrap)
    tasks: list[asyncio.Task[None]] = []
    try:
        for c in consumers:
            await c.start()
            done = c.subscribe([topic])
            if inspect.isawaitable(done):
                await done
        start = time.perf_counter()
        tasks = [asyncio.create_task(run(c)) for c in consumers]
        deadline = start + timeout_s
        while True:
            assignments = [c.assignment() for c in consumers]
            if await asyncio.to_thread(_stable, admin, group, members, partitions, assignments):
                return time.perf_counter() - start
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{members} members not stable within {timeout_s} s")
            await asyncio.sleep(0.01)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(c.close() for c in consumers), return_exceptions=True)
        admin.close()


def rebalance_seconds(bootstrap: str, topic: str, group: str, members: int, partitions: int,
                      timeout_s: float = 120.0) -> float:
    return asyncio.run(_async_rebalance(bootstrap, topic, group, members, partitions, timeout_s))


# --- throughput ----------------------------------------------------------------------------------

def _reader(bootstrap: str, topic: str, partitions: int, group: str | None,
            go: Any, counts: Any, index: int, stop: Any, ready: Any) -> None:
    """One reader process: a group member (``group``) or the single assigned consumer."""
    from strom.client import Consumer, TopicPartition

    options: dict[str, Any] = {"max_poll_records": 100_000, "fetch_max_bytes": 64 << 20,
                               "max_partition_fetch_bytes": 8 << 20}
    if group is not None:
        options.update(group_id=group, enable_auto_commit=False,
                       auto_offset_reset="earliest", session_timeout_ms=10_000,
                       heartbeat_interval_ms=1000)
    consumer = Consumer(bootstrap, **options)
    try:
        ready.set()
        go.wait(60)
        if group is None:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
        else:
            consumer.subscribe([topic])
        got = 0
        while not stop.is_set():
            got += len(consumer.poll(timeout_ms=100))
            counts[index] = got
    finally:
        consumer.close()


def read_seconds(bootstrap: str, topic: str, partitions: int, records: int, members: int,
                 group: str | None, timeout_s: float = 300.0) -> float:
    """Seconds from the readers' start to ``records`` read in total (reader start-up excluded)."""
    ctx = mp.get_context("spawn")
    go, stop = ctx.Event(), ctx.Event()
    counts = ctx.Array("q", members)
    readies = [ctx.Event() for _ in range(members)]
    procs = [ctx.Process(target=_reader, args=(bootstrap, topic, partitions, group, go, counts,
                                                i, stop, readies[i]), daemon=True)
             for i in range(members)]
    for p in procs:
        p.start()
    try:
        for r in readies:
            if not r.wait(60):
                raise RuntimeError("a reader process did not start within 60 s")
        go.set()
        start = time.perf_counter()
        deadline = start + timeout_s
        while sum(counts[:]) < records:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"read {sum(counts[:])} of {records} in {timeout_s} s")
            time.sleep(0.005)
        return time.perf_counter() - start
    finally:
        stop.set()
        for p in procs:
            p.join(15)
            if p.is_alive():
                p.kill()
                p.join(5)


# --- the step run by `python -m benchmarks` ------------------------------------------------------

def run_groups(params: dict[str, Any], results: list[Result],
               progress: Progress = lambda msg: None) -> None:
    from pathlib import Path
    from tempfile import TemporaryDirectory

    from strom.testing import running_broker

    sizes = [int(n) for n in params["group_sizes"]]
    repeats = int(params.get("group_rebalance_repeats", 1))
    n = int(params["group_records"])
    members = int(params["group_members"])
    with TemporaryDirectory(prefix="strom-bench-groups-") as tmp, \
            running_broker(Path(tmp), config=GROUP_BENCH_CONFIG) as broker:
        bs = broker.bootstrap
        parts = max(max(sizes), 8)
        sw.create_topic(bs, "rebalance", parts)
        # the first group creates __consumer_offsets and loads its coordinators: not measured
        rebalance_seconds(bs, "rebalance", "warm-up", 1, parts)
        for size in sizes:
            samples = []
            for k in range(repeats):
                progress(f"groups: rebalance of {size} member(s) ({k + 1}/{repeats})")
                samples.append(1000 * rebalance_seconds(bs, "rebalance", f"rb-{size}-{k}", size,
                                                        parts))
            samples.sort()
            results.append(Result(group_label(size), "groups",
                                  "rebalance p50", percentile(samples, 50), "ms",
                                  higher_is_better=False,
                                  peers=[] if size == min(sizes) else [group_label(min(sizes))],
                                  extra={"samples_ms": samples, "partitions": parts,
                                         "initial_rebalance_delay_ms": 0}))
        sw.create_topic(bs, "group-tput", 8)
        progress(f"groups: producing {n:,} x 100 B over 8 partitions")
        sw.produce(bs, "group-tput", n, 100)
        progress("groups: one assigned consumer reads them")
        single = read_seconds(bs, "group-tput", 8, n, 1, None)
        progress(f"groups: a group of {members} members reads them")
        grouped = read_seconds(bs, "group-tput", 8, n, members, "tput")
        base = "strom single consumer"
        results.append(Result(base, "group 8p-100B", "consume", n / single, "records/s"))
        results.append(Result(group_label(members), "group 8p-100B", "consume",
                              n / grouped, "records/s", peers=[base],
                              extra={"includes": "join and first assignment"}))
