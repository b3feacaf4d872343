"""kill -9 of a broker that leads a third of many partitions (issue 21 item 7, at test scale).

Three real brokers on 127.0.0.1, 300 partitions at RF 3 (900 replicas), ``min.insync.replicas=2``,
the brokers' production liveness settings (session timeout, heartbeat, lag time: issue 12's
failover bounds were set for them). Keyed acks=all records go to every partition; a broker that
is not the active controller is killed with SIGKILL; every partition it led must show another
leader within issue 12's bound (5 s), acks=all writes to all partitions must work again, the
killed broker must come back into every ISR, and every acknowledged record must be read back
at the offset it was acknowledged at. Replication runs in fetch sessions (one per broker pair).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from strom.broker.config import KEYS
from strom.client import Consumer, Producer, RecordMetadata, TopicPartition
from strom.testing import Cluster, running_cluster

pytestmark = pytest.mark.integration

PARTITIONS = 300
TOPIC = "many"
#: Issue 12's bound for kill -9 (writes back within 2 s median, 5 s at most).
FAILOVER_BOUND_S = 5.0
LIVENESS = ("broker.session.timeout.ms", "broker.heartbeat.interval.ms",
            "controller.election.timeout.ms", "controller.heartbeat.interval.ms",
            "replica.lag.time.max.ms")


def _produce(bootstrap: str, start: int, count: int) -> dict[tuple[int, int], bytes]:
    """``count`` keyed records with acks=all; (partition, offset) -> value of each one
    acknowledged (every one must be)."""
    acked: dict[tuple[int, int], bytes] = {}
    with Producer(bootstrap, acks="all", delivery_timeout_ms=60_000) as producer:
        futures = [(b"v%d" % i, producer.send(TOPIC, b"v%d" % i, key=b"k%d" % i))
                   for i in range(start, start + count)]
        producer.flush(90)
        for value, future in futures:
            md: RecordMetadata = future.result(timeout=1)
            acked[(md.partition, md.offset)] = value
    return acked


def _leaders(cluster: Cluster, via: int) -> dict[int, int]:
    [topic] = [t for t in cluster.metadata([TOPIC], via=via).topics if t.name == TOPIC]
    return {p.partition: p.leader for p in topic.partitions}


def _read_all(bootstrap: str, wanted: set[tuple[int, int]]) -> dict[tuple[int, int], bytes | None]:
    """Every record from the start until each (partition, offset) in ``wanted`` was read (at
    most 60 s)."""
    seen: dict[tuple[int, int], bytes | None] = {}
    with Consumer(bootstrap) as consumer:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + 60
        while not wanted <= seen.keys() and time.monotonic() < deadline:
            for r in consumer.poll(500):
                seen[(r.partition, r.offset)] = r.value
    return seen


def test_kill_9_moves_every_led_partition_within_the_failover_bound(tmp_path: Path) -> None:
    config = {key: str(KEYS[key].default) for key in LIVENESS}
    with running_cluster(tmp_path, brokers=3, config=config) as cluster, \
            cluster.admin(request_timeout_ms=60_000) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3,
                           configs={"min.insync.replicas": "2"})

        def settled() -> bool:
            [t] = [t for t in cluster.metadata([TOPIC]).topics if t.name == TOPIC]
            return len(t.partitions) == PARTITIONS and all(
                p.leader >= 0 and len(p.isr) == 3 for p in t.partitions)

        cluster.wait_until(settled, timeout=60, interval=0.25,
                           what=f"all {PARTITIONS} partitions led with 3 in-sync replicas")
        # The preferred replicas lead, a third each: on a loaded machine a broker fenced for a
        # moment while the partitions were created hands its leaderships to the others until
        # the controller's next rebalance (every 30 s); a starved run found the broker to kill
        # leading none.
        admin.elect_leaders(raise_on_error=False)

        def preferred() -> bool:
            [t] = [t for t in cluster.metadata([TOPIC]).topics if t.name == TOPIC]
            return all(p.leader == p.replicas[0] for p in t.partitions)

        cluster.wait_until(preferred, timeout=60, interval=0.25,
                           what="every partition led by its preferred replica")
        acked = _produce(cluster.bootstrap, 0, 2 * PARTITIONS)
        controller = cluster.controller_id()
        leaders = _leaders(cluster, via=controller)
        victim = next(b for b in sorted(cluster.brokers) if b != controller)
        moved = {p for p, leader in leaders.items() if leader == victim}
        assert len(moved) >= PARTITIONS // 5, leaders  # it leads its share
        survivors = [b for b in cluster.brokers if b != victim]

        killed = time.monotonic()
        cluster.kill(victim)

        def all_moved() -> bool:
            for b in survivors:
                now = _leaders(cluster, via=b)
                if any(now[p] in (-1, victim) for p in moved):
                    return False
            return True

        cluster.wait_until(all_moved, timeout=30, interval=0.05,
                           what=f"a new leader for the {len(moved)} partitions broker "
                                f"{victim} led")
        took = time.monotonic() - killed
        assert took <= FAILOVER_BOUND_S, (
            f"{len(moved)} partitions got new leaders only after {took:.2f} s")

        acked |= _produce(cluster.bootstrap, 2 * PARTITIONS, 2 * PARTITIONS)
        cluster.start_broker(victim)

        def back_in_isr() -> bool:
            [t] = [t for t in cluster.metadata([TOPIC]).topics if t.name == TOPIC]
            return all(victim in p.isr for p in t.partitions)

        cluster.wait_until(back_in_isr, timeout=60, interval=0.25,
                           what=f"broker {victim} back in every ISR")
        seen = _read_all(cluster.bootstrap, set(acked))
        lost = {k: v for k, v in acked.items() if seen.get(k) != v}
        assert not lost, f"{len(lost)} acknowledged records not read back, e.g. " \
                         f"{sorted(lost.items())[:5]}"
