"""Slow data flushes depose no Raft leader and fence no broker (issue 21 items 3 and 7).

Three real brokers at the production liveness settings (Raft election timeout 1 s, heartbeats
every 250 ms, broker sessions of 3 s). While a flag file exists every fsync of topic
``slow``'s files takes ``SLOW_MS`` longer on every broker (``STROM_FAULT_FS=SLOW<ms>:fsync:
/slow-``, the storage seam's test hook), and the topic fsyncs after every message
(``flush.messages=1``), so each append, the leader's and each follower's, holds that broker's
event loop for a few such fsyncs, again and again, for ``PRODUCE_S`` seconds of acks=all
records. The metadata log (``__raft``) is not slowed: its persists run in the Raft driver's
own thread.

At 10,000 partitions RF 3 under an acks=all produce the Raft leader stepped down twice by
check-quorum, each time at the first tick after its loop had been 1.5-1.9 s late, the
followers' acknowledgements still on their way in. Here no broker may log a new Raft leader
or a fencing while the flushes are slow, and every record acknowledged must be readable.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from strom.broker.config_keys import KEYS
from strom.client import Consumer, Producer
from strom.client.models import TopicPartition
from strom.storage import fileops
from strom.testing import CLUSTER_TEST_DEFAULTS
from strom.testing.cluster import Cluster

pytestmark = pytest.mark.integration

SLOW_MS = 200
PRODUCE_S = 15.0
TOPIC = "slow"
LEADER_LINE = "is the leader in term"
FENCING_LINE = ": fencing broker"


def _lines(cluster: Cluster, needle: str) -> list[str]:
    return [line for b in cluster.brokers.values()
            for line in b.stderr_path.read_text(errors="replace").splitlines() if needle in line]


def _terms(cluster: Cluster) -> set[int]:
    """Every Raft term a broker logged a role in (leads, follows, follows nobody yet)."""
    return {int(t) for line in _lines(cluster, "strom controller")
            for t in re.findall(r" in term (\d+)$", line)}


def test_slow_data_flushes_keep_the_raft_leader_and_every_broker(tmp_path: Path) -> None:
    flag = tmp_path / "slow-disk"
    env = {fileops.ENV: f"SLOW{SLOW_MS}:fsync:/{TOPIC}-", fileops.WHEN_ENV: str(flag),
           "STROM_LOOP_WATCH_MS": "300"}  # what held the loops, in the logs if this fails
    production = {key: str(KEYS[key].default) for key in CLUSTER_TEST_DEFAULTS}
    cluster = Cluster(tmp_path / "cluster", 3, config=production, env={b: env for b in range(3)})
    try:
        cluster.start()
        with cluster.admin() as admin:
            admin.create_topic(TOPIC, partitions=1, replication_factor=3,
                               configs={"flush.messages": "1", "min.insync.replicas": "2"})
        cluster.wait_for_isr(TOPIC, 0, 3, timeout=30)
        leaders, fencings = _lines(cluster, LEADER_LINE), _lines(cluster, FENCING_LINE)
        terms = _terms(cluster)
        acked: list[bytes] = []
        flag.touch()
        try:
            with Producer(cluster.bootstrap, acks="all", linger_ms=0) as producer:
                started = time.monotonic()
                for k in range(100_000):
                    if time.monotonic() - started > PRODUCE_S:
                        break
                    value = b"v%d" % k
                    producer.send(TOPIC, value, partition=0).result(timeout=30)
                    acked.append(value)
        finally:
            flag.unlink()
        assert len(_lines(cluster, "storage fault injection is on")) == 3, "the hook is on"
        assert len(acked) >= 2, f"only {len(acked)} records acknowledged in {PRODUCE_S} s"
        print(f"{len(acked)} records acknowledged in {PRODUCE_S} s of slow flushes")
        assert _terms(cluster) == terms, "a new Raft term while flushes were slow"
        assert _lines(cluster, LEADER_LINE) == leaders, "a new Raft leader while flushes were slow"
        assert _lines(cluster, FENCING_LINE) == fencings, "a broker fenced while flushes were slow"
        with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(TOPIC, 0)])
            got: list[bytes] = []
            for _ in range(60):
                got += [r.value or b"" for r in consumer.poll(timeout_ms=500)]
                if len(got) >= len(acked):
                    break
        assert got == acked
    finally:
        cluster.stop()
