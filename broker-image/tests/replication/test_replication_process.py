"""Replication between real broker processes: acks=all survives the leader's death (one kill).

The small, always-run version of ``e2e/test_cluster_failover.py``: 3 brokers, RF=3,
min.insync.replicas=2; records acknowledged with acks=all before and after a SIGKILL of the
leader are all read back, in order, once; the killed broker rejoins the ISR and ends with the
same batches as the new leader.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.client import Consumer, Producer, TopicPartition
from strom.testing import running_cluster

pytestmark = pytest.mark.integration

N = 200


def _produce(bootstrap: str, start: int) -> list[int]:
    offsets: list[int] = []
    with Producer(bootstrap, acks="all", request_timeout_ms=3_000, retry_backoff_ms=50,
                  delivery_timeout_ms=60_000) as producer:
        futures = [producer.send("t", b"%d" % i, partition=0) for i in range(start, start + N)]
        producer.flush(60)
        offsets = [f.result(timeout=60).offset for f in futures]
    return offsets


def test_acks_all_records_survive_killing_the_leader(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=3) as cluster, cluster.admin() as admin:
        admin.create_topic("t", partitions=1, replication_factor=3,
                           configs={"min.insync.replicas": "2"})
        cluster.wait_for_isr("t", 0, 3, timeout=30)
        first = _produce(cluster.bootstrap, 0)
        old = cluster.leader_of("t", 0)
        cluster.kill(old)
        new = cluster.wait_until(lambda: cluster.leader_of("t", 0) not in (-1, old),
                                 timeout=30, what="a new leader for t-0")
        second = _produce(cluster.bootstrap, N)
        assert first + second == list(range(2 * N))
        cluster.start_broker(old)
        cluster.wait_for_isr("t", 0, 3, timeout=30)
        with Consumer(cluster.bootstrap) as consumer:
            tp = TopicPartition("t", 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            values: list[int] = []
            for _ in range(100):
                values += [int(r.value or b"") for r in consumer.poll(500)]
                if len(values) >= 2 * N:
                    break
        assert values == list(range(2 * N)), new
