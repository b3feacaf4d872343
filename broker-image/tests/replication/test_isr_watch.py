"""The leader's periodic ISR check looks only at the partitions something happened to (issue 21
item 2): an idle partition whose in-sync followers are all at its log end offset cannot shrink,
so it is not looked at until an append, a follower's fetch, a new view or the end of an ISR
change puts it back. At 10,000 idle partitions the walk over every hosted partition every
``lag / 2`` was the largest part of an idle broker's Python work."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.protocol.records import encode_batch
from strom.replication.partition import Partition
from strom.replication.state import PartitionView
from strom.storage.config import LogConfig

from .harness import Cluster, wait_until

PARTITIONS = 20


async def test_the_isr_check_skips_idle_partitions_and_still_shrinks_a_lagging_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster(tmp_path, (0, 1), isr_check_interval_ms=60_000)  # checks run by hand
    looked: list[tuple[str, int]] = []
    shrink = Partition.isr_to_shrink

    def counted(self: Partition, now_ms: int, lag_max_ms: int) -> tuple[int, ...] | None:
        looked.append((self.view.topic, self.view.partition))
        return shrink(self, now_ms, lag_max_ms)

    monkeypatch.setattr(Partition, "isr_to_shrink", counted)
    try:
        await cluster.start(0)
        await cluster.start(1)
        for p in range(PARTITIONS):
            cluster.set_view(PartitionView("t", p, 0, 0, 0, (0, 1), (0, 1)))
        leader = cluster.nodes[0].m
        for p in (3, 7):
            await leader.append("t", p, encode_batch([(b"k", b"v")]), -1, LogConfig(), 5000)
        parts = [leader._partitions[("t", p)] for p in range(PARTITIONS)]
        await wait_until(lambda: all(part.isr_at_log_end() for part in parts),
                         what="the follower known at every log end")
        leader.check_isr()  # looks at what the views, appends and fetches put in, drops them
        assert looked, "the first check looks at the partitions"
        looked.clear()
        leader.check_isr()
        assert looked == []  # idle: nothing to look at (every led partition before)

        await cluster.stop(1)
        await leader.append("t", 7, encode_batch([(b"k", b"w")]), 1, LogConfig(), 5000)
        leader.check_isr()
        assert looked == [("t", 7)]  # the append put it back; not lagging long enough yet
        assert cluster.view("t", 7).isr == (0, 1)

        def shrunk() -> bool:
            leader.check_isr()
            return cluster.view("t", 7).isr == (0,)

        await wait_until(shrunk, timeout_s=5, what="t-7's ISR shrunk after the lag time")
        # the idle partitions keep their ISR: their follower is at their log end (as in Kafka,
        # where a follower at the leader's log end offset is in sync whatever its times)
        assert all(cluster.view("t", p).isr == (0, 1) for p in range(PARTITIONS) if p != 7)
    finally:
        await cluster.close()
