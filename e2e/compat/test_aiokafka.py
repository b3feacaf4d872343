"""aiokafka (the asyncio client) against Apache Kafka and against Strom: each scenario is one
coroutine, run once against each server, and what aiokafka observes is compared.

Observed on both: the metadata a producer is told with acks 0, 1, all and idempotently; the
records read back (partition, offset, key, value, headers, timestamp and its type), also
through librdkafka (:func:`strom.testing.compat.read_all`), uncompressed and with each codec
aiokafka ships (gzip, snappy, lz4, zstd); a group's range assignment, generations, commits and
a restart from the committed offsets; static members coming back without a rebalance;
ListOffsets by time, earliest and latest, seeks, DeleteRecords; the errors aiokafka raises for
the same mistakes; its admin client (AIOKafkaAdminClient) on topics, configs, records and
groups; a pattern subscription following topics as they are created; read_committed reads
(every record, the last stable offset at the high watermark); pause() and resume(). A
transactional producer is the one deliberate difference (Strom has no transactions): the test
checks that it is refused at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.commit import OffsetCommitRequest

from strom.testing.compat import (
    BASE_TS,
    create_topic,
    read_all,
    records_with_everything,
    topic_with_records,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

T = TypeVar("T")

#: Rebalances within seconds: heartbeats every 300 ms, the smallest session Kafka allows.
FAST = {"heartbeat_interval_ms": 300, "session_timeout_ms": 6000}


def on_both(pair: Any, scenario: Callable[[str], Awaitable[T]]) -> tuple[T, T]:
    """Run ``scenario(bootstrap)`` against Kafka, then against Strom, each on a new loop."""
    kafka = asyncio.run(scenario(pair.kafka.bootstrap))  # type: ignore[arg-type]
    strom = asyncio.run(scenario(pair.strom.bootstrap))  # type: ignore[arg-type]
    return kafka, strom


def error_name(err: BaseException) -> str:
    """The Kafka error an aiokafka exception stands for (its class name for client errors)."""
    return type(err).__name__


async def outcome(call: Awaitable[Any]) -> str:
    """"ok", or the error aiokafka raises for the call."""
    try:
        await call
    except KafkaError as err:
        return error_name(err)
    return "ok"


def as_send(record: dict[str, Any]) -> dict[str, Any]:
    """confluent-kafka's produce() arguments as aiokafka's send() arguments."""
    out = {k: v for k, v in record.items() if k not in ("timestamp", "headers")}
    out["timestamp_ms"] = record["timestamp"]
    if "headers" in record:
        out["headers"] = record["headers"]
    return out


async def send_all(bootstrap: str, topic: str, records: list[dict[str, Any]],
                   **config: Any) -> list[tuple[Any, ...] | None]:
    """Send every record (aiokafka's send() arguments), then wait for all of them; what each
    RecordMetadata says: (partition, offset, timestamp type, log start offset), or None
    (aiokafka's answer with acks=0).

    Its ``timestamp`` is left out: with CreateTime aiokafka 0.14 gives every record of a batch
    the first record's timestamp (``ProducerBatch.done`` overwrites the broker's -1 in its
    loop), so it depends on how the client batched, on either server; the records read back
    carry the real ones."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **config)
    await producer.start()
    try:
        futures = [await producer.send(topic, **r) for r in records]
        metas = [await f for f in futures]
    finally:
        await producer.stop()
    return [None if m is None else (m.partition, m.offset, m.timestamp_type, m.log_start_offset)
            for m in metas]


async def leaders_answer(bootstrap: str, topic: str, partitions: int) -> None:
    """Wait until every partition's leader answers ListOffsets. Metadata may name a leader a
    moment before it serves the partition (seen on a fresh Kafka): acks=1 retries through
    that, acks=0 loses the records without a word."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
                return
            except KafkaError:
                assert time.monotonic() < deadline, f"{topic}: leaders not serving after 30 s"
                await asyncio.sleep(0.1)
    finally:
        await consumer.stop()


async def read_back(bootstrap: str, topic: str, partitions: int,
                    count: int) -> list[tuple[Any, ...]]:
    """Every record of ``topic`` from the beginning through aiokafka, in read_all's form
    (partition, offset, key, value, headers or None, timestamp type, timestamp): aiokafka's
    timestamp types are 0/1, confluent-kafka's 1/2."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    got: list[tuple[Any, ...]] = []
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                got.extend((r.partition, r.offset, r.key, r.value, list(r.headers) or None,
                            r.timestamp_type + 1, r.timestamp) for r in batch)
    finally:
        await consumer.stop()
    assert len(got) == count, f"{bootstrap}: read {len(got)} of {count} records"
    return sorted(got, key=lambda r: (r[0], r[1]))


@pytest.mark.parametrize("config", [{"acks": 0}, {"acks": 1}, {"acks": "all"},
                                    {"enable_idempotence": True}],
                         ids=["acks0", "acks1", "acks-all", "idempotent"])
def test_produce_with_each_acks_reads_back_identically(pair: Any, name: Callable[[str], str],
                                                       config: dict[str, Any]) -> None:
    """acks=0 is told nothing (aiokafka resolves the send with None); 1, all and the
    idempotent producer (InitProducerId, sequence numbers; acks=all) the same offsets,
    timestamp types and log start offsets. The records read back are the same through
    aiokafka and through librdkafka, on both servers."""
    acks = config.get("acks", "all")
    topic = name(f"aio-acks{acks}")
    records = records_with_everything(30)
    seen = {}
    for server in pair.both():
        create_topic(server.bootstrap, topic, 3)
        asyncio.run(leaders_answer(server.bootstrap, topic, 3))
        metas = asyncio.run(send_all(server.bootstrap, topic, [as_send(r) for r in records],
                                     linger_ms=5, **config))
        got = asyncio.run(read_back(server.bootstrap, topic, 3, len(records)))
        assert got == read_all(server.bootstrap, topic, 3, len(records)), server.name
        seen[server.name] = (metas, got)
    assert seen["strom"] == seen["kafka"]
    metas = seen["kafka"][0]
    if acks == 0:
        assert metas == [None] * len(records)
    else:
        assert [m[1] for m in metas if m is not None and m[0] == 0] == list(range(10))
    assert [r[4] for r in seen["kafka"][1] if r[1] == 0] == [  # the first of each partition
        None, [("h", b"1"), ("h", b"again"), ("empty", None)], None]


async def transaction(bootstrap: str, topic: str) -> str:
    """A transactional producer's start and one transaction: "ok" or what aiokafka raises."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-tx",
                                request_timeout_ms=5000)
    try:
        await producer.start()
        async with producer.transaction():
            await producer.send_and_wait(topic, b"x")
        return "ok"
    except KafkaError as err:
        return f"{error_name(err)}: {err}"
    finally:
        await producer.stop()


def test_transactional_producer_is_refused_at_start(pair: Any,
                                                   name: Callable[[str], str]) -> None:
    """Strom has no transactions (docs/kafka-protocol.md): aiokafka's transactional producer
    fails at start() with the INVALID_REQUEST its FindCoordinator(transaction) gets, at once,
    not after a timeout; on Kafka the transaction commits."""
    topic = name("aio-tx")
    for server in pair.both():
        create_topic(server.bootstrap, topic, 1)
    started = time.monotonic()
    kafka, strom = on_both(pair, lambda b: transaction(b, topic))
    assert kafka == "ok"
    assert strom == "KafkaError: KafkaError: InvalidRequestError()"
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_read_back_identically(pair: Any, name: Callable[[str], str],
                                                  codec: str) -> None:
    """Batches compressed by aiokafka (cramjam) are stored and served so that aiokafka and
    librdkafka read the same records at the same offsets on both servers."""
    topic = name(f"aio-{codec}")
    records = [{"partition": i % 2, "key": f"k{i % 7}".encode(),
                "value": f"{codec}-{i}-".encode() * (1 + i % 20),
                "timestamp_ms": BASE_TS + i, "headers": [("n", f"{i}".encode())]}
               for i in range(400)]
    seen = {}
    for server in pair.both():
        create_topic(server.bootstrap, topic, 2)
        metas = asyncio.run(send_all(server.bootstrap, topic, records, compression_type=codec,
                                     linger_ms=20, max_batch_size=4096))
        got = asyncio.run(read_back(server.bootstrap, topic, 2, len(records)))
        assert got == read_all(server.bootstrap, topic, 2, len(records)), server.name
        seen[server.name] = (metas, got)
    assert seen["strom"] == seen["kafka"]
    assert [r[1] for r in seen["kafka"][1] if r[0] == 1] == list(range(200))


async def raw_commit(admin: AIOKafkaAdminClient, group: str, generation: int, member_id: str,
                     topic: str) -> list[str]:
    """An OffsetCommit with the given generation and member (aiokafka's consumer would not
    send it), through the admin client's connection to the coordinator; the partition errors.
    Retried while the coordinator moves or loads (Kafka's first group creates its offsets
    topic)."""
    retriable = {"NotCoordinatorForGroupError", "GroupCoordinatorNotAvailableError",
                 "GroupLoadInProgressError"}
    deadline = time.monotonic() + 30
    while True:
        try:
            coordinator = await admin.find_coordinator(group)
            response = await admin._send_request(OffsetCommitRequest(
                group, generation, member_id, -1, [(topic, [(0, 1, "")])]), coordinator)
            errors = [for_code(code).__name__ for _, partitions in response.topics
                      for _, code in partitions]
        except KafkaError as err:
            errors = [error_name(err)]
        if not set(errors) & retriable or time.monotonic() > deadline:
            return errors
        await asyncio.sleep(0.2)


async def group_scenario(bootstrap: str, topic: str, group: str) -> dict[str, Any]:
    """Two range-assigned members of a group on 4 partitions of 5 records: assignments and
    generations as they join and leave, commits (read back by the members and the admin
    client), then a new member that restarts from the committed offsets."""
    seen: dict[str, Any] = {}

    def member() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                partition_assignment_strategy=(RangePartitionAssignor,),
                                **FAST)

    async def until(cond: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 40
        while not cond():
            assert time.monotonic() < deadline, f"not {what} after 40 s"
            await asyncio.sleep(0.05)

    def parts(c: AIOKafkaConsumer) -> list[int]:
        return sorted(tp.partition for tp in c.assignment())

    def gen(c: AIOKafkaConsumer) -> int:
        return int(c._coordinator.generation)  # aiokafka keeps it there

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    first, second = member(), member()
    try:
        await first.start()
        await until(lambda: len(first.assignment()) == 4, "first has 4 partitions")
        gens = [gen(first)]
        await second.start()
        await until(lambda: len(first.assignment()) == 2 and len(second.assignment()) == 2
                    and gen(first) == gen(second), "rebalanced to 2 + 2")
        gens.append(gen(first))
        seen["assignment"] = sorted([parts(first), parts(second)])
        for c in (first, second):  # each commits its own partitions at partition + 1
            await c.commit({tp: tp.partition + 1 for tp in c.assignment()})
        seen["committed by members"] = sorted([
            (tp.partition, await c.committed(tp)) for c in (first, second)
            for tp in c.assignment()])
        # the members may see their partitions a moment before the coordinator closes the
        # round (test_groups.py saw it once): describe until Stable, bounded
        deadline = time.monotonic() + 30
        while True:
            described = (await admin.describe_consumer_groups([group]))[0].to_object()["groups"]
            if described[0]["state"] == "Stable" or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        seen["described"] = [{"error": d["error_code"], "state": d["state"],
                              "protocol type": d["protocol_type"], "protocol": d["protocol"],
                              "members": len(d["members"])} for d in described]
        listed = await admin.list_consumer_groups()
        seen["listed"] = [g for g in listed if g[0] == group]
        await second.stop()
        await until(lambda: len(first.assignment()) == 4, "first has 4 partitions again")
        gens.append(gen(first))
        # a commit by a live member with the generation before the last rebalance
        seen["commit with a stale generation"] = await raw_commit(
            admin, group, gens[1], first._coordinator.member_id, topic)
        seen["generations rise"] = gens == sorted(set(gens))
    finally:
        await first.stop()
        await second.stop()
    offsets = await admin.list_consumer_group_offsets(group)
    seen["committed (admin)"] = sorted((tp.partition, o.offset) for tp, o in offsets.items())
    restarted = member()
    await restarted.start()
    try:  # it reads from the committed offsets on: partition p from p + 1 to 4
        read: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + 40
        while len(read) < 10 and time.monotonic() < deadline:
            for batch in (await restarted.getmany(timeout_ms=300)).values():
                read.extend((r.partition, r.offset, r.value) for r in batch)
        seen["read after restart"] = sorted(read)
    finally:
        await restarted.stop()
    described = (await admin.describe_consumer_groups([group]))[0].to_object()["groups"]
    seen["state after all left"] = [d["state"] for d in described]
    await admin.close()
    return seen


def test_group_assignment_commits_and_restart(pair: Any, name: Callable[[str], str]) -> None:
    topic, group = name("aio-grp"), name("aio-g")
    for server in pair.both():
        topic_with_records(server.bootstrap, topic, 4, 5)
    kafka, strom = on_both(pair, lambda bootstrap: group_scenario(bootstrap, topic, group))
    assert strom == kafka
    assert kafka["assignment"] == [[0, 1], [2, 3]]
    assert kafka["committed by members"] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert kafka["committed (admin)"] == kafka["committed by members"]
    assert kafka["described"] == [{"error": 0, "state": "Stable", "protocol type": "consumer",
                                   "protocol": "range", "members": 2}]
    assert kafka["read after restart"] == [(p, o, f"{p}-{o}".encode())
                                           for p in range(4) for o in range(p + 1, 5)]
    assert kafka["generations rise"] is True
    assert kafka["state after all left"] == ["Empty"]


async def static_scenario(bootstrap: str, topic: str, group: str) -> dict[str, Any]:
    """Two static members (group.instance.id, KIP-345): one stops (a static member sends no
    LeaveGroup) and comes back within its session; no rebalance happens on the way."""
    seen: dict[str, Any] = {}

    def member(instance: str) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                group_instance_id=instance, enable_auto_commit=False,
                                partition_assignment_strategy=(RangePartitionAssignor,),
                                **FAST)

    def parts(c: AIOKafkaConsumer) -> list[int]:
        return sorted(tp.partition for tp in c.assignment())

    async def until(cond: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 40
        while not cond():
            assert time.monotonic() < deadline, f"not {what} after 40 s"
            await asyncio.sleep(0.05)

    a, b = member("a"), member("b")
    again = member("b")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        await a.start()
        await b.start()
        await until(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2
                    and a._coordinator.generation == b._coordinator.generation, "2 + 2")
        generation, held_by_b = a._coordinator.generation, parts(b)
        await b.stop()
        await asyncio.sleep(1)  # a keeps heartbeating: no rebalance may start
        seen["a while b is away"] = (len(a.assignment()),
                                     a._coordinator.generation - generation)
        await again.start()
        await until(lambda: len(again.assignment()) == 2, "b back with 2 partitions")
        seen["b back"] = (parts(again) == held_by_b, again._coordinator.generation - generation,
                          a._coordinator.generation - generation)
        await admin.start()
        described = (await admin.describe_consumer_groups([group]))[0].to_object()["groups"]
        seen["described"] = [(d["state"], len(d["members"])) for d in described]
    finally:
        for c in (a, b, again):
            await c.stop()
        await admin.close()
    return seen


def test_static_members_come_back_without_a_rebalance(pair: Any,
                                                     name: Callable[[str], str]) -> None:
    topic, group = name("aio-static"), name("aio-sg")
    for server in pair.both():
        topic_with_records(server.bootstrap, topic, 4, 1)
    kafka, strom = on_both(pair, lambda bootstrap: static_scenario(bootstrap, topic, group))
    assert strom == kafka
    assert kafka == {"a while b is away": (2, 0), "b back": (True, 0, 0),
                     "described": [("Stable", 2)]}


async def offsets_scenario(bootstrap: str, topic: str) -> dict[str, Any]:
    """offsets_for_times before, between, on and after non-monotonic create times; earliest and
    latest; a seek and what getone() then returns; the same after DeleteRecords."""
    times = [BASE_TS + t for t in (0, 10, 5, 20, 20, 30, 25)]
    asked = [BASE_TS - 1, BASE_TS, BASE_TS + 4, BASE_TS + 6, BASE_TS + 20, BASE_TS + 26,
             BASE_TS + 30, BASE_TS + 31]
    await send_all(bootstrap, topic, [{"value": f"{i}".encode(), "timestamp_ms": t}
                                      for i, t in enumerate(times)])
    tp = TopicPartition(topic, 0)
    seen: dict[str, Any] = {}
    # offsets are asked by a consumer with nothing assigned: with a partition assigned, aiokafka
    # took ~0.5 s per ListOffsets (on both servers)
    looker = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await looker.start()
    await reader.start()
    await admin.start()

    async def for_times() -> list[Any]:
        return [(await looker.offsets_for_times({tp: t}))[tp] for t in asked]

    try:
        seen["for times"] = [None if f is None else (f.offset, f.timestamp)
                             for f in await for_times()]
        seen["earliest, latest"] = ((await looker.beginning_offsets([tp]))[tp],
                                    (await looker.end_offsets([tp]))[tp])
        reader.assign([tp])
        reader.seek(tp, 3)
        record = await reader.getone()
        seen["after seek to 3"] = (record.offset, record.value, record.timestamp,
                                   await reader.position(tp), reader.highwater(tp))
        seen["delete records"] = {p.partition: low for p, low in (await admin.delete_records(
            {tp: RecordsToDelete(before_offset=4)})).items()}
        seen["earliest after delete"] = (await looker.beginning_offsets([tp]))[tp]
        seen["for times after delete"] = [None if f is None else f.offset
                                          for f in await for_times()]
    finally:
        await looker.stop()
        await reader.stop()
        await admin.close()
    return seen


def test_offsets_by_time_seek_and_delete_records(pair: Any, name: Callable[[str], str]) -> None:
    topic = name("aio-times")
    for server in pair.both():
        create_topic(server.bootstrap, topic, 1)
    kafka, strom = on_both(pair, lambda bootstrap: offsets_scenario(bootstrap, topic))
    assert strom == kafka
    assert [f and f[0] for f in kafka["for times"]] == [0, 0, 1, 1, 3, 5, 5, None]
    assert kafka["earliest, latest"] == (0, 7)
    assert kafka["after seek to 3"] == (3, b"3", BASE_TS + 20, 4, 7)
    assert kafka["earliest after delete"] == 4
    assert kafka["for times after delete"] == [4, 4, 4, 4, 4, 5, 5, None]


async def mistakes_scenario(bootstrap: str, topic: str, missing: str) -> dict[str, Any]:
    """The same mistakes on both servers; what aiokafka raises or is answered for each."""
    seen: dict[str, Any] = {}
    small, compacted, dated = (f"{topic}-{suffix}" for suffix in ("small", "compact", "dated"))
    lost = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=2000)
    await lost.start()
    try:  # aiokafka asks for the topic's metadata until request_timeout_ms has passed
        seen["send to an unknown topic"] = await outcome(lost.send_and_wait(missing, b"x"))
    finally:
        await lost.stop()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        seen["record above the topic's max.message.bytes"] = await outcome(
            producer.send_and_wait(small, b"x" * 3000))
        seen["a record without a key to a compacted topic"] = await outcome(
            producer.send_and_wait(compacted, b"x"))
        seen["a create time older than message.timestamp.before.max.ms"] = await outcome(
            producer.send_and_wait(dated, b"x", timestamp_ms=BASE_TS))
        await producer.send_and_wait(topic, b"0", partition=0)
    finally:
        await producer.stop()

    refused = f"{topic}-refused"
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=refused,
                                session_timeout_ms=1000, heartbeat_interval_ms=300)
    try:  # below the brokers' group.min.session.timeout.ms (6 s): start() waits for the join
        await consumer.start()
        seen["join with a session timeout below the minimum"] = "ok"
    except KafkaError as err:
        seen["join with a session timeout below the minimum"] = error_name(err)
    finally:
        await consumer.stop()

    for reset in ("none", "earliest", "latest"):
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    auto_offset_reset=reset)
        await consumer.start()
        tp = TopicPartition(topic, 0)
        try:
            consumer.assign([tp])
            consumer.seek(tp, 100)
            try:  # earliest: until the record comes; latest: 1 s in which none may come
                deadline = time.monotonic() + (20 if reset == "earliest" else 1)
                offsets: list[int] = []
                while not offsets and time.monotonic() < deadline:
                    got = await consumer.getmany(timeout_ms=300)
                    offsets = [r.offset for rs in got.values() for r in rs]
                seen[f"fetch past the end, reset={reset}"] = (offsets,
                                                              await consumer.position(tp))
            except KafkaError as err:
                seen[f"fetch past the end, reset={reset}"] = error_name(err)
        finally:
            await consumer.stop()

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        # the refused join left no group behind: it is not listed, and a commit with a
        # generation is answered as for a group that does not exist
        seen["groups listed after the refused join"] = [
            g for g in await admin.list_consumer_groups() if g[0] == refused]
        seen["commit with a generation to a group that does not exist"] = await raw_commit(
            admin, refused, 7, "no-such-member", topic)
    finally:
        await admin.close()
    return seen


def test_mistakes_get_the_same_errors(pair: Any, name: Callable[[str], str]) -> None:
    topic, missing = name("aio-err"), name("aio-missing")
    for server in pair.both():
        create_topic(server.bootstrap, topic, 1)
        create_topic(server.bootstrap, f"{topic}-small", 1, **{"max.message.bytes": "1024"})
        create_topic(server.bootstrap, f"{topic}-compact", 1, **{"cleanup.policy": "compact"})
        create_topic(server.bootstrap, f"{topic}-dated", 1,
                     **{"message.timestamp.before.max.ms": "3600000"})
    kafka, strom = on_both(pair, lambda b: mistakes_scenario(b, topic, missing))
    assert strom == kafka
    assert kafka["send to an unknown topic"] == "UnknownTopicOrPartitionError"
    assert kafka["fetch past the end, reset=none"] == "OffsetOutOfRangeError"
    assert kafka["join with a session timeout below the minimum"] == \
        "InvalidSessionTimeoutError"
    assert kafka["groups listed after the refused join"] == []
    assert kafka["commit with a generation to a group that does not exist"] == [
        "IllegalGenerationError"]


def topic_summary(described: dict[str, Any]) -> dict[str, Any]:
    """What a Metadata answer says about a topic, without what must differ (ids)."""
    return {"error": described["error_code"], "topic": described["topic"],
            "internal": described["is_internal"],
            "partitions": sorted((p["partition"], p["error_code"], len(p["replicas"]),
                                  len(p["isr"])) for p in described["partitions"])}


async def configs(admin: AIOKafkaAdminClient, topic: str, missing: str,
                  keys: dict[str, None]) -> list[dict[str, Any]]:
    """DescribeConfigs of ``keys`` of a topic and of a missing one, as aiokafka decodes it; the
    message of a refused resource is left out (Kafka sends "", Strom says what is wrong)."""
    answers = await admin.describe_configs([
        ConfigResource(ConfigResourceType.TOPIC, topic, keys),
        ConfigResource(ConfigResourceType.TOPIC, missing, keys)])
    resources = [r for a in answers for r in a.to_object()["resources"]]
    for r in resources:
        r["config_entries"].sort(key=lambda e: e["config_names"])
        if r["error_code"] != 0:
            del r["error_message"]
    return resources


async def admin_scenario(bootstrap: str, topic: str, taken: str, missing: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        created = await admin.create_topics([NewTopic(taken, 1, 1)])
        seen["create"] = [e[1] for e in created.topic_errors]
        mistakes = {
            "an existing topic": NewTopic(taken, 1, 1),
            "replication factor above the broker count": NewTopic(topic + "-rf", 1, 3),
            "zero partitions": NewTopic(topic + "-zero", 0, 1),
            "an unknown config": NewTopic(topic + "-cfg", 1, 1,
                                          topic_configs={"no.such.config": "1"}),
            "a config value that does not parse": NewTopic(
                topic + "-cfg", 1, 1, topic_configs={"retention.ms": "soon"}),
        }
        for what, new in mistakes.items():
            answer = await admin.create_topics([new])
            seen[what] = [for_code(e[1]).__name__ for e in answer.topic_errors]
        answer = await admin.create_topics([NewTopic(
            topic, 2, 1, topic_configs={"retention.ms": "3600000",
                                        "cleanup.policy": "compact"})])
        seen["create with configs"] = [e[1] for e in answer.topic_errors]
        deadline = time.monotonic() + 30
        while True:
            described = await admin.describe_topics([topic])
            if described[0]["error_code"] == 0 and all(
                    p["leader"] >= 0 for p in described[0]["partitions"]):
                break
            assert time.monotonic() < deadline, f"{topic} has no leaders after 30 s"
            await asyncio.sleep(0.1)
        seen["describe"] = [topic_summary(d) for d in described]
        seen["describe unknown"] = [topic_summary(d)
                                    for d in await admin.describe_topics([missing])]
        seen["listed"] = topic in await admin.list_topics()
        keys = {"retention.ms": None, "cleanup.policy": None, "segment.bytes": None}
        seen["describe configs"] = await configs(admin, topic, missing, keys)
        # AlterConfigs (not incremental) replaces every override of the topic
        altered = await admin.alter_configs([
            ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "60000"}),
            ConfigResource(ConfigResourceType.TOPIC, missing, {"retention.ms": "60000"})])
        seen["alter configs"] = [(r["resource_name"], for_code(r["error_code"]).__name__)
                                 for a in altered for r in a.to_object()["resources"]]
        bad = await admin.alter_configs([
            ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "soon"})])
        seen["alter configs to a bad value"] = [
            for_code(r["error_code"]).__name__ for a in bad for r in a.to_object()["resources"]]
        # Kafka applies an AlterConfigs through its metadata log: a describe right after may
        # still show the old values (seen under load), so wait for the new one, bounded
        deadline = time.monotonic() + 30
        while True:
            after = await configs(admin, topic, missing, keys)
            if {e["config_names"]: e["config_value"] for e in after[0]["config_entries"]}[
                    "retention.ms"] == "60000" or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        seen["describe configs after alter"] = after
        try:
            await admin.create_partitions({topic: NewPartitions(1)})
            seen["shrink"] = "ok"
        except KafkaError as err:
            seen["shrink"] = error_name(err)
        await admin.create_partitions({topic: NewPartitions(3)})
        deadline = time.monotonic() + 30
        while len((await admin.describe_topics([topic]))[0]["partitions"]) != 3:
            assert time.monotonic() < deadline, f"{topic} not at 3 partitions after 30 s"
            await asyncio.sleep(0.1)
        deleted = await admin.delete_topics([topic, missing])
        seen["delete"] = sorted((t, for_code(code).__name__)
                                for t, code, *_ in deleted.topic_error_codes)
        deadline = time.monotonic() + 30
        while topic in await admin.list_topics():
            assert time.monotonic() < deadline, f"{topic} still listed 30 s after delete"
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
    return seen


def test_admin_client_topics_and_configs(pair: Any, name: Callable[[str], str]) -> None:
    topic, taken, missing = name("aio-adm"), name("aio-taken"), name("aio-missing")
    kafka, strom = on_both(pair, lambda b: admin_scenario(b, topic, taken, missing))
    assert strom == kafka
    assert kafka["an existing topic"] == ["TopicAlreadyExistsError"]
    assert kafka["replication factor above the broker count"] == [
        "InvalidReplicationFactorError"]
    assert kafka["shrink"] == "InvalidPartitionsError"
    after = {e["config_names"]: (e["config_value"], e["config_source"])
             for e in kafka["describe configs after alter"][0]["config_entries"]}
    assert after["retention.ms"] == ("60000", 1)
    assert after["cleanup.policy"] == ("delete", 5)  # the override AlterConfigs left out


async def getmany_until(consumer: AIOKafkaConsumer, count: int, what: str,
                        timeout: float = 30) -> list[tuple[str, int, int, bytes]]:
    """At least ``count`` records through getmany(), as (topic, partition, offset, value),
    sorted; AssertionError naming ``what`` after ``timeout`` s."""
    got: list[tuple[str, int, int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"{what}: {len(got)} of {count} after {timeout} s"
        for batch in (await consumer.getmany(timeout_ms=300)).values():
            got.extend((r.topic, r.partition, r.offset, r.value) for r in batch)
    return sorted(got)


async def nothing_for(consumer: AIOKafkaConsumer, seconds: float) -> list[tuple[int, int]]:
    """What getmany() returns in ``seconds`` (partition, offset): [] when nothing may come."""
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for batch in (await consumer.getmany(timeout_ms=200)).values():
            got.extend((r.partition, r.offset) for r in batch)
    return got


async def pattern_scenario(bootstrap: str, prefix: str, group: str) -> dict[str, Any]:
    """A member subscribed by pattern: the matching topics' partitions and records, not the
    topic that does not match; then a matching topic created while it runs joins its
    assignment (its metadata refresh sees it; the leader rejoins) and, the others' positions
    committed, only its record is read after the rebalance."""
    seen: dict[str, Any] = {}
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                metadata_max_age_ms=500, **FAST)
    consumer.subscribe(pattern=f"^{prefix}-(a|b|c)$")

    def assigned() -> list[tuple[str, int]]:
        return sorted((tp.topic.removeprefix(prefix), tp.partition)
                      for tp in consumer.assignment())

    async def until(cond: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 40
        while not cond():
            assert time.monotonic() < deadline, f"not {what} after 40 s: {assigned()}"
            await asyncio.sleep(0.05)

    await consumer.start()
    try:
        await until(lambda: len(consumer.assignment()) == 3, "3 partitions of -a and -b")
        seen["assigned"] = assigned()
        seen["subscribed"] = sorted(t.removeprefix(prefix) for t in consumer.subscription())
        seen["read"] = [(t.removeprefix(prefix), *rest) for t, *rest in
                        await getmany_until(consumer, 3, "records of -a and -b")]
        await consumer.commit()  # the rebalance to come restarts from here, not from earliest
        topic_with_records(bootstrap, f"{prefix}-c", 1, 1)
        await until(lambda: len(consumer.assignment()) == 4, "-c assigned")
        seen["assigned after -c was created"] = assigned()
        seen["read from -c"] = [(t.removeprefix(prefix), *rest) for t, *rest in
                                await getmany_until(consumer, 1, "the record of -c")]
    finally:
        await consumer.stop()
    return seen


def test_pattern_subscription_follows_matching_topics(pair: Any,
                                                      name: Callable[[str], str]) -> None:
    prefix, group = name("aio-pat"), name("aio-pg")
    for server in pair.both():
        topic_with_records(server.bootstrap, f"{prefix}-a", 2, 1)
        topic_with_records(server.bootstrap, f"{prefix}-b", 1, 1)
        topic_with_records(server.bootstrap, f"{prefix}-x", 1, 1)  # does not match
    kafka, strom = on_both(pair, lambda b: pattern_scenario(b, prefix, group))
    assert strom == kafka
    assert kafka == {
        "assigned": [("-a", 0), ("-a", 1), ("-b", 0)],
        "subscribed": ["-a", "-b"],
        "read": [("-a", 0, 0, b"0-0"), ("-a", 1, 0, b"1-0"), ("-b", 0, 0, b"0-0")],
        "assigned after -c was created": [("-a", 0), ("-a", 1), ("-b", 0), ("-c", 0)],
        "read from -c": [("-c", 0, 0, b"0-0")],
    }


async def read_committed_scenario(bootstrap: str, topic: str) -> dict[str, Any]:
    """read_committed and read_uncommitted consumers on records of an idempotent and a plain
    producer (no transactions: Strom has none, docs/kafka-protocol.md): both read every
    record, and the last stable offset a read_committed fetch reports is the high watermark,
    also for records produced while it long-polls at the end of the log."""
    seen: dict[str, Any] = {}
    tps = [TopicPartition(topic, p) for p in range(2)]
    await send_all(bootstrap, topic, [{"value": f"i{i}".encode(), "partition": i % 2}
                                      for i in range(6)], enable_idempotence=True)
    committed = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                 isolation_level="read_committed")
    uncommitted = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await committed.start()
    await uncommitted.start()
    try:
        for c in (committed, uncommitted):
            c.assign(tps)
            await c.seek_to_beginning(*tps)
        seen["read committed"] = await getmany_until(committed, 6, "read_committed")
        seen["read uncommitted"] = await getmany_until(uncommitted, 6, "read_uncommitted")
        seen["stable, high watermark"] = [(committed.last_stable_offset(tp),
                                           committed.highwater(tp)) for tp in tps]
        seen["end offsets"] = sorted((await committed.end_offsets(tps)).values())
        waiting = asyncio.ensure_future(getmany_until(committed, 2, "records sent later"))
        await asyncio.sleep(0.5)  # the read_committed fetch is long-polling at the end
        await send_all(bootstrap, topic, [{"value": b"p0", "partition": 0},
                                          {"value": b"p1", "partition": 1}], acks=1)
        seen["read committed later"] = await waiting
        seen["stable, high watermark later"] = [(committed.last_stable_offset(tp),
                                                 committed.highwater(tp)) for tp in tps]
    finally:
        await committed.stop()
        await uncommitted.stop()
    return seen


def test_read_committed_reads_non_transactional_records(pair: Any,
                                                        name: Callable[[str], str]) -> None:
    topic = name("aio-rc")
    for server in pair.both():
        create_topic(server.bootstrap, topic, 2)
        asyncio.run(leaders_answer(server.bootstrap, topic, 2))
    kafka, strom = on_both(pair, lambda b: read_committed_scenario(b, topic))
    assert strom == kafka
    assert kafka["read committed"] == kafka["read uncommitted"] == [
        (topic, i % 2, i // 2, f"i{i}".encode()) for i in (0, 2, 4, 1, 3, 5)]
    assert kafka["stable, high watermark"] == [(3, 3), (3, 3)]
    assert kafka["end offsets"] == [3, 3]
    assert kafka["read committed later"] == [(topic, 0, 3, b"p0"), (topic, 1, 3, b"p1")]
    assert kafka["stable, high watermark later"] == [(4, 4), (4, 4)]


async def pause_scenario(bootstrap: str, topic: str) -> dict[str, Any]:
    """pause() one of two assigned partitions (positioned at offset 1): fetches return only
    the other, also for records produced while it is paused; resume() returns what it held
    back, from its position on."""
    seen: dict[str, Any] = {}
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp0, tp1])
        await consumer.seek_to_beginning(tp0)
        consumer.seek(tp1, 1)
        consumer.pause(tp1)
        seen["paused"] = sorted(tp.partition for tp in consumer.paused())
        seen["while paused"] = [(p, o) for _, p, o, _ in
                                await getmany_until(consumer, 3, "partition 0")]
        seen["nothing more while paused"] = await nothing_for(consumer, 1.0)
        await send_all(bootstrap, topic, [{"value": f"{p}-later".encode(), "partition": p}
                                          for p in (0, 1)], acks=1)
        seen["sent while paused"] = [(p, o) for _, p, o, _ in
                                     await getmany_until(consumer, 1, "partition 0's new one")]
        seen["nothing of partition 1 while paused"] = await nothing_for(consumer, 0.5)
        seen["partition 1 position while paused"] = await consumer.position(tp1)
        consumer.resume(tp1)
        seen["paused after resume"] = sorted(tp.partition for tp in consumer.paused())
        seen["after resume"] = [(p, o, v) for _, p, o, v in
                                await getmany_until(consumer, 3, "partition 1 after resume")]
    finally:
        await consumer.stop()
    return seen


def test_pause_and_resume(pair: Any, name: Callable[[str], str]) -> None:
    topic = name("aio-pause")
    for server in pair.both():
        topic_with_records(server.bootstrap, topic, 2, 3)
    kafka, strom = on_both(pair, lambda b: pause_scenario(b, topic))
    assert strom == kafka
    assert kafka == {
        "paused": [1], "while paused": [(0, 0), (0, 1), (0, 2)],
        "nothing more while paused": [], "sent while paused": [(0, 3)],
        "nothing of partition 1 while paused": [], "partition 1 position while paused": 1,
        "paused after resume": [],
        "after resume": [(1, 1, b"1-1"), (1, 2, b"1-2"), (1, 3, b"1-later")]}
