"""Steps the differential compatibility suite (``e2e/compat/``) shares between its client
modules: creating a topic and waiting for its leaders, filling one, the record set with every
field a record can carry, reading a topic back as comparable tuples, and polling a
kafka-python consumer from its own thread (:func:`polled`), and raw OffsetCommit / OffsetFetch v10
calls by topic id (:func:`offsets_by_topic_id`, also run against Strom alone by the broker's
tests).

Each scenario of the suite runs once against Apache Kafka and once against Strom with one
client library (confluent-kafka, kafka-python, aiokafka, Kafka's Java tools); these steps use
confluent-kafka, so a scenario written with another client can check that what it stored reads
back the same through librdkafka. pytest's importlib mode keeps test modules from importing one
another, hence a module here. confluent-kafka is a test dependency: it is imported in the
functions, as in :mod:`strom.testing.kafka`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["BASE_TS", "create_topic", "polled", "read_all", "records_with_everything",
           "topic_with_records"]

#: ms: explicit create times (2023), so both servers store the same ones.
BASE_TS = 1_700_000_000_000


def create_topic(bootstrap: str, topic: str, partitions: int = 1, **configs: str) -> None:
    """Create ``topic`` and wait until every partition has a leader in the metadata.

    No time-based retention: the records carry create times of 2023, which the 7-day default
    would delete at the next retention check (Kafka: every 5 min)."""
    create_led_topic(bootstrap, topic, partitions, configs={"retention.ms": "-1", **configs},
                     timeout_s=30)


def create_led_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int = 1,
                     configs: dict[str, str] | None = None, timeout_s: float = 60.0) -> None:
    """Create ``topic`` through the Kafka protocol and wait until every partition has a leader
    in the metadata: a produce before that (acks=0 above all) can be lost on either server."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                  replication_factor=replication_factor,
                                  config=configs or {})])[topic].result(timeout_s)
    wait_for_led_topic(admin, topic, partitions, timeout_s)


def wait_for_led_topic(admin: Any, topic: str, partitions: int, timeout_s: float = 30.0,
                       failure: str | None = None) -> None:
    """Wait until ``admin``'s metadata shows ``topic`` with ``partitions`` partitions, each
    led; AssertionError (``failure``, or a default naming the topic) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=5).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions \
                and all(p.leader >= 0 for p in meta.partitions.values()):
            return
        time.sleep(0.1)
    raise AssertionError(failure or f"{topic}: no leader for every partition after "
                                    f"{timeout_s:g} s")


def topic_with_records(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    """A new topic whose partition ``p`` holds the values ``p-0``, ``p-1``, ... (no keys)."""
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, f"{p}-{i}".encode(), partition=p)
    assert producer.flush(30) == 0


def read_all(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple[Any, ...]]:
    """Every record of ``topic`` from the beginning, as (partition, offset, key, value,
    headers, timestamp type, timestamp), sorted by partition and offset."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            ts_type, ts = msg.timestamp()
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value(),
                        msg.headers(), ts_type, ts))
    finally:
        consumer.close()
    assert len(got) == count, f"read {len(got)} of {count} records"
    return sorted(got, key=lambda r: (r[0], r[1]))


def records_with_everything(n: int) -> list[dict[str, Any]]:
    """Keys (some null), values (one empty, one null), headers (none, one, repeated keys, a
    null value) and explicit timestamps, spread over three partitions by hand; as
    confluent-kafka's ``produce()`` keyword arguments."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        record: dict[str, Any] = {
            "partition": i % 3,
            "key": None if i % 4 == 0 else f"k{i}".encode(),
            "value": b"" if i == 5 else None if i == 7 else f"value-{i}".encode() * (1 + i % 3),
            "timestamp": BASE_TS + 1000 * i,
        }
        if i % 3 == 1:
            record["headers"] = [("h", f"{i}".encode()), ("h", b"again"), ("empty", None)]
        out.append(record)
    return out


@contextlib.contextmanager
def polled(consumer: Any, timeout_ms: int = 1000) -> Iterator[None]:
    """Poll a kafka-python ``KafkaConsumer`` from its own thread until the block ends, as an
    application's consumer loop does; an exception raised by ``poll()`` is raised at the end.

    kafka-python 3.0.12 takes part in its group only inside ``poll()``: a JoinGroup/SyncGroup
    round that completes while no ``poll()`` of that consumer is running is dropped
    (``join_group_async`` sees the finished task, starts a new JoinGroup and never reads the
    result). A leader that drops its round re-joins the Stable group, which starts another
    round on Kafka and Strom alike. Two consumers polled in turns from one thread made every
    round end inside the other consumer's ``poll()`` (the follower's rejoin completes it), and
    rounds followed one another until the leader's answers happened to come during its own
    (67 rounds in 29 s seen on Strom, 17 on Kafka; docs/decisions.md "Consumer groups in the
    compat suite"). A consumer polled without pause drops a round only in the gap between two
    calls, and each call is long (``timeout_ms``, 1 s) so that a round rarely spans two: a
    round that the leader re-joins for a metadata change (its first assignment was made
    without the topic's metadata) is lost outright when the call that started it returns
    first, since its own assignment already made ``need_rejoin()`` false (seen 2 of 15 times
    on Kafka with 100 ms calls). Ask for the topic's partitions before polling
    (``partitions_for_topic``) so a first assignment has them."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            while not stop.is_set():
                consumer.poll(timeout_ms=timeout_ms)
        except BaseException as exc:  # handed to the test at the end of the block
            failures.append(exc)

    thread = threading.Thread(target=run, name="polled-consumer", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)
    if thread.is_alive():
        raise AssertionError("a polled consumer's poll() did not return within 30 s")
    if failures:
        raise failures[0]


def offsets_by_topic_id(call: Callable[[int, int, Any, Any], Any], topic_id: Any,
                        group: str) -> dict[str, Any]:
    """OffsetCommit v10 and OffsetFetch v10 (topics named by id) through ``call(key, version,
    body, response type)``, a raw request to one server: commits of partitions 0 and 5 of a
    one-partition topic by its id, an unknown id and the zero id, then the group's offsets by
    id and all of them. Sorted, comparable results (Strom's in tests/kafka/test_raw_apis.py,
    both servers' in e2e/compat/test_admin.py)."""
    import importlib
    import uuid

    oc_req: Any = importlib.import_module("kio.schema.offset_commit.v10.request")
    oc_resp: Any = importlib.import_module("kio.schema.offset_commit.v10.response")
    of_req: Any = importlib.import_module("kio.schema.offset_fetch.v10.request")
    of_resp: Any = importlib.import_module("kio.schema.offset_fetch.v10.response")

    stranger = uuid.UUID("00000000-0000-4000-8000-00000000beef")  # no topic has it

    def commit(asked: Any) -> Any:
        return call(8, 10, oc_req.OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=-1, member_id="",
            topics=(oc_req.OffsetCommitRequestTopic(topic_id=asked, partitions=tuple(
                oc_req.OffsetCommitRequestPartition(
                    partition_index=p, committed_offset=2, committed_leader_epoch=-1,
                    committed_metadata="m") for p in (0, 5))),)), oc_resp.OffsetCommitResponse)

    fc_req: Any = importlib.import_module("kio.schema.find_coordinator.v4.request")
    fc_resp: Any = importlib.import_module("kio.schema.find_coordinator.v4.response")

    deadline = time.monotonic() + 60  # FindCoordinator makes the offsets topic (both servers)
    while True:
        found = call(10, 4, fc_req.FindCoordinatorRequest(
            key_type=0, coordinator_keys=(group,)), fc_resp.FindCoordinatorResponse)
        if int(found.coordinators[0].error_code) == 0 and \
                int(commit(topic_id).topics[0].partitions[0].error_code) not in (14, 15, 16):
            break
        assert time.monotonic() < deadline, found
        time.sleep(0.2)
    out: dict[str, Any] = {}
    for label, asked in (("known", topic_id), ("unknown", stranger), ("zero", None)):
        answer = commit(asked)
        out[f"commit {label}"] = [(t.topic_id, sorted((p.partition_index, int(p.error_code))
                                                      for p in t.partitions))
                                  for t in answer.topics]

    def fetch(topics: Any) -> Any:
        answer = call(9, 10, of_req.OffsetFetchRequest(groups=(
            of_req.OffsetFetchRequestGroup(group_id=group, topics=topics),)),
            of_resp.OffsetFetchResponse)
        (g,) = answer.groups
        return (g.group_id, int(g.error_code), sorted(
            (t.topic_id.int if t.topic_id else 0, sorted(
                (p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata,
                 int(p.error_code)) for p in t.partitions)) for t in g.topics))

    out["fetch named"] = fetch(tuple(of_req.OffsetFetchRequestTopics(
        topic_id=asked, partition_indexes=(0, 5)) for asked in (topic_id, stranger)))
    out["fetch all"] = fetch(None)
    return out


def expected_offsets_by_topic_id(topic_id: Any, group: str) -> dict[str, Any]:
    """What Kafka 4.3.1 answered to :func:`offsets_by_topic_id` (probed, and compared in
    e2e/compat): UNKNOWN_TOPIC_ID (100) for an unknown or zero id, partition 5 of a
    one-partition topic UNKNOWN_TOPIC_OR_PARTITION (3) in a commit and offset -1 in a fetch."""
    import uuid
    stranger = uuid.UUID("00000000-0000-4000-8000-00000000beef")
    return {
        "commit known": [(topic_id, [(0, 0), (5, 3)])],  # 5: UNKNOWN_TOPIC_OR_PARTITION
        "commit unknown": [(stranger, [(0, 100), (5, 100)])],  # UNKNOWN_TOPIC_ID
        "commit zero": [(None, [(0, 100), (5, 100)])],
        "fetch named": (group, 0, sorted([
            (topic_id.int, [(0, 2, -1, "m", 0), (5, -1, -1, "", 0)]),
            (stranger.int, [(0, -1, -1, "", 100), (5, -1, -1, "", 100)])])),
        "fetch all": (group, 0, [(topic_id.int, [(0, 2, -1, "m", 0)])]),
    }

