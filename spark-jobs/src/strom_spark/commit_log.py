"""The marker topic's I/O: create it, record a committed micro-batch, find a query's last one.

The rules (what a marker means, when a batch counts as committed) are in
:mod:`strom_spark.markers`; this module only talks to the cluster, through ``strom.client``.

Finding a query's newest marker reads the topic backwards from its end in windows of
:data:`~strom_spark.markers.SCAN_STEP` records and stops at the first window holding one. While
a query is running its last marker is near the end (other queries' markers interleave), so a task
usually reads one window; only a query that never committed reads the whole topic, which
compaction keeps at about one record per query plus the newest 1 MiB segment.
"""

from __future__ import annotations

import logging
import time

from strom.client import Admin, Consumer, Producer
from strom.client import TopicPartition as ClientTP
from strom.protocol.errors import ErrorCode, StromError
from strom_spark.cluster import read_range
from strom_spark.errors import StromWriteError
from strom_spark.markers import COMMIT_TOPIC_CONFIGS, CommitMarker, latest_marker, scan_windows
from strom_spark.planning import OffsetRange

log = logging.getLogger("strom_spark")

#: Replication factor of the marker topic, capped at the number of brokers (as Kafka's
#: internal topics are); the markers are what make a replay safe, so they get the most copies.
COMMIT_TOPIC_RF = 3

#: (bootstrap, topic) pairs this process already created or found, so the driver's per-batch
#: commit does not ask the cluster again.
_ensured: set[tuple[str, str]] = set()


def ensure_commit_topic(bootstrap_servers: str, topic: str) -> None:
    """Create the (single-partition, compacted) marker topic unless it exists."""
    if (bootstrap_servers, topic) in _ensured:
        return
    with Admin(bootstrap_servers) as admin:
        if topic not in admin.list_topics(include_internal=True):
            brokers = len(admin.describe_cluster().brokers)
            rf = max(1, min(COMMIT_TOPIC_RF, brokers))
            try:
                admin.create_topic(topic, 1, rf, COMMIT_TOPIC_CONFIGS)
                log.info("created the strom commit-marker topic %s (rf=%d)", topic, rf)
            except StromError as exc:
                if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:  # another query won the race
                    raise StromWriteError(
                        f"cannot create the commit-marker topic {topic!r}: {exc}; create it "
                        "(1 partition, cleanup.policy=compact), set the option commitTopic to "
                        "an existing one, or set commitMarkers=false"
                    ) from exc
    _ensured.add((bootstrap_servers, topic))


def record_commit(bootstrap_servers: str, topic: str, marker: CommitMarker) -> None:
    """Write ``marker`` and wait until every in-sync replica has it (idempotent producer)."""
    ensure_commit_topic(bootstrap_servers, topic)
    with Producer(bootstrap_servers, acks="all", enable_idempotence=True, linger_ms=0) as producer:
        future = producer.send(topic, marker.value(), marker.key(), partition=0)
        producer.flush()
        exc = future.exception()
        if exc is not None:
            raise StromWriteError(
                f"recording micro-batch {marker.batch} of query {marker.query} in {topic!r} "
                f"failed: {exc}"
            ) from exc


def last_marker(bootstrap_servers: str, topic: str, query: str) -> CommitMarker | None:
    """The newest marker of ``query`` (None: the query never committed a batch)."""
    with Admin(bootstrap_servers) as admin:
        if topic not in admin.list_topics(include_internal=True):
            return None
    tp = ClientTP(topic, 0)
    with Consumer(bootstrap_servers, auto_offset_reset="earliest") as consumer:
        earliest = consumer.beginning_offsets([tp])[tp]
        end = consumer.end_offsets([tp])[tp]
    started = time.monotonic()
    scanned = 0
    for lo, hi in scan_windows(earliest, end):
        pairs = [
            (r.key, r.value)
            for chunk in read_range(
                bootstrap_servers, OffsetRange(topic, 0, lo, hi), fail_on_data_loss=False
            )
            for r in chunk
        ]
        scanned += len(pairs)
        found = latest_marker(pairs, query)
        if found is not None:
            log.debug("query %s: last committed batch %d (scanned %d markers in %.2fs)",
                      query, found.batch, scanned, time.monotonic() - started)
            return found
    return None
