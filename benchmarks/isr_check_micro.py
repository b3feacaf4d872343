"""Micro-benchmark of the leader's periodic ISR shrink check at N idle partitions, no network.

A ``ReplicaManager`` over N real logs in a temp dir (a third led, RF 3, as one of 3 brokers
holds them), every follower recorded at its log end offset: an idle cluster. Times one
``check_isr`` (``time.thread_time``, median of ``--repeat``) with the watch set (issue 21 item
2, helper idle21) and with the walk over every hosted partition it replaced (the same
decisions), alternated ``--rounds`` times. The check runs every ``replica.lag.time.max.ms / 2``
(5 s at the defaults), so ms per check / 50 is % of a core.
Not a test; run ``uv run python -m benchmarks.isr_check_micro [--partitions 3000,10000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from strom.replication.manager import ReplicaManager
from strom.replication.settings import ReplicationSettings
from strom.replication.state import PartitionView
from strom.storage.config import LogConfig
from strom.storage.manager import LogManager


def walk(manager: ReplicaManager) -> None:
    """The check before the watch set: every hosted partition, every time."""
    now = manager._clock_ms()
    lag = manager.settings.replica_lag_time_max_ms
    for part in list(manager._partitions.values()):
        if part.is_leader and part.isr_to_shrink(now, lag) is not None:
            raise AssertionError("an idle partition should not shrink")


async def _alter(topic: str, partition: int, isr: tuple[int, ...], epoch: int) -> None:
    raise AssertionError("an idle partition should not shrink")


def _median_ms(fn: Callable[[], None], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.thread_time()
        fn()
        times.append(time.thread_time() - started)
    return statistics.median(times) * 1000


def measure(partitions: int, rounds: int, repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="strom-bench-isr-") as tmp:
        logs = LogManager([Path(tmp)], LogConfig())
        try:
            manager = ReplicaManager(ReplicationSettings(broker_id=0), logs, _alter,
                                     lambda broker: None)
            for p in range(partitions):
                view = PartitionView("idle", p, p % 3, 0, 0, (0, 1, 2), (0, 1, 2))
                manager.apply_partition(view, LogConfig())
            now = manager._clock_ms()
            for part in manager._partitions.values():
                if part.is_leader:
                    end = part.log.log_end_offset
                    for replica in (1, 2):
                        manager._record_follower(part, replica, end, end, now)
            manager.check_isr()  # the views and fetches put every led partition in the set
            out: dict[str, list[float]] = {"walk": [], "watch set": []}
            for _ in range(rounds):
                out["walk"].append(_median_ms(lambda: walk(manager), repeat))
                out["watch set"].append(_median_ms(manager.check_isr, repeat))
            return {k: statistics.median(v) for k, v in out.items()}
        finally:
            logs.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default="3000,10000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    for n in (int(x) for x in args.partitions.split(",")):
        figures = asyncio.run(_in_loop(n, args.rounds, args.repeat))
        print(f"{n:,} partitions: " + ", ".join(f"{k} {v:.3f} ms" for k, v in figures.items())
              + f" per check (load {os.getloadavg()[0]:.1f})")


async def _in_loop(partitions: int, rounds: int, repeat: int) -> dict[str, float]:
    return measure(partitions, rounds, repeat)  # the manager wants a running loop


if __name__ == "__main__":
    main()
