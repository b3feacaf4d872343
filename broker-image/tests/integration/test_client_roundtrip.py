"""The client against a real broker process: admin, produce, consume, offsets, sync and asyncio.

Uses ``strom.testing.running_broker`` (one broker per module, real process on 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.client import (
    Admin,
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    ErrorCode,
    NewTopic,
    Producer,
    StromError,
    TopicPartition,
)
from strom.client.partitioner import murmur2, to_positive
from strom.testing import running_broker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path: Path = tmp_path_factory.mktemp("client-broker")
    with running_broker(path) as b:
        yield b


def _consume(bootstrap: str, tps: list[TopicPartition], n: int, timeout: float = 30
             ) -> list[Any]:
    out: list[Any] = []
    with Consumer(bootstrap, auto_offset_reset="earliest") as c:
        c.assign(tps)
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            out += c.poll(500)
    return out


def test_admin_topic_lifecycle(broker: Any) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("lifecycle", partitions=2, configs={"retention.ms": "3600000"})
        assert "lifecycle" in admin.list_topics()
        with pytest.raises(StromError) as info:
            admin.create_topic("lifecycle", partitions=2)
        assert info.value.code is ErrorCode.TOPIC_ALREADY_EXISTS
        [desc] = admin.describe_topics(["lifecycle"])
        assert [p.partition for p in desc.partitions] == [0, 1]
        admin.create_partitions("lifecycle", 3)
        assert len(admin.describe_topics(["lifecycle"])[0].partitions) == 3
        admin.alter_configs("lifecycle", set={"retention.ms": "7200000"})
        values = {e.name: e.value for e in admin.describe_configs(topic="lifecycle")}
        assert values.get("retention.ms") == "7200000"
        cluster = admin.describe_cluster()
        assert cluster.brokers
        admin.delete_topics(["lifecycle"])
        deadline = time.monotonic() + 10
        while "lifecycle" in admin.list_topics() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "lifecycle" not in admin.list_topics()


def test_produce_consume_round_trip(broker: Any) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics([NewTopic("rt", 3, 1)])
    n = 20_000
    with Producer(broker.bootstrap, linger_ms=2) as p:
        futures = [p.send("rt", b"value-%d" % i, key=b"key-%d" % (i % 100),
                          headers=[("i", b"%d" % i)]) for i in range(n)]
        p.flush(60)
        metas = [f.result() for f in futures]
    for i in (0, 1, 99):
        expected = to_positive(murmur2(b"key-%d" % i)) % 3
        assert metas[i].partition == expected
    records = _consume(broker.bootstrap, [TopicPartition("rt", p) for p in range(3)], n)
    assert len(records) == n
    by_value = {r.value: r for r in records}
    for i, md in enumerate(metas):
        r = by_value[b"value-%d" % i]
        assert (r.partition, r.offset) == (md.partition, md.offset)
        assert r.key == b"key-%d" % (i % 100)
        assert r.headers == (("i", b"%d" % i),)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_round_trip(broker: Any, codec: str) -> None:
    topic = f"codec-{codec}"
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(topic)
    with Producer(broker.bootstrap, compression_type=codec) as p:
        for i in range(1000):
            p.send(topic, b"compressible %d " % i * 10)
    records = _consume(broker.bootstrap, [TopicPartition(topic, 0)], 1000)
    assert [r.value for r in records] == [b"compressible %d " % i * 10 for i in range(1000)]


def test_offsets_and_seeks(broker: Any) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("offs")
    tp = TopicPartition("offs", 0)
    with Producer(broker.bootstrap) as p:
        for i in range(100):
            p.send("offs", b"%d" % i, timestamp_ms=1_600_000_000_000 + i * 1000)
    with Admin(broker.bootstrap) as admin:
        assert admin.list_offsets({tp: "earliest"}) == {tp: 0}
        assert admin.list_offsets({tp: "latest"}) == {tp: 100}
        assert admin.list_offsets({tp: 1_600_000_000_000 + 42_000}) == {tp: 42}
    with Consumer(broker.bootstrap) as c:
        c.assign([tp])
        assert c.position(tp) == 100  # auto_offset_reset=latest
        c.seek(tp, 90)
        got: list[int] = []
        while len(got) < 10:
            got += [r.offset for r in c.poll(1000)]
        assert got == list(range(90, 100))
        found = c.offsets_for_times({tp: 1_600_000_000_000 + 10_500})
        hit = found[tp]
        assert hit is not None and hit[0] == 11
        assert c.end_offsets([tp]) == {tp: 100}


def test_unknown_topic_errors(broker: Any) -> None:
    with Producer(broker.bootstrap, max_block_ms=1000) as p, pytest.raises(StromError):
        p.send("does-not-exist", b"x").result(10)


def test_async_round_trip(broker: Any) -> None:
    async def main() -> None:
        with Admin(broker.bootstrap) as admin:
            admin.create_topic("aio")
        async with AsyncProducer(broker.bootstrap) as p:
            futures = [p.send("aio", b"%d" % i) for i in range(500)]
            metas = await asyncio.gather(*futures)
            assert [m.offset for m in metas] == list(range(500))
        async with AsyncConsumer(broker.bootstrap, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition("aio", 0)])
            values: list[bytes | None] = []
            while len(values) < 500:
                values += [r.value for r in await c.poll(1000)]
            assert values == [b"%d" % i for i in range(500)]

    asyncio.run(main())


def test_a_consumer_fetches_in_a_session(broker: Any) -> None:
    """The consumer's Fetches run in a fetch session (KIP-227): after the first, full, one a
    Fetch names only partitions whose offset moved and its answer carries only partitions
    with news (issue 21: over 1,000 partitions every Fetch of a catch-up named and answered
    all of them)."""
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("in-session", partitions=20)
    tps = [TopicPartition("in-session", p) for p in range(20)]
    with Producer(broker.bootstrap, linger_ms=0) as p:
        for i in range(100):
            p.send("in-session", b"v%d" % i, partition=i % 20)
        p.flush(10)
    seen: list[tuple[bool, int, int, list[int]]] = []
    with Consumer(broker.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=5000) as c:
        conns = c._core.conns
        real = conns.broker_stub

        class Recording:
            def __init__(self, stub: Any) -> None:
                self.stub = stub

            async def Fetch(self, request: Any, **kwargs: Any) -> Any:
                response = await self.stub.Fetch(request, **kwargs)
                seen.append((request.HasField("session_epoch"), request.session_epoch,
                             len(request.partitions), [a.partition for a in response.partitions]))
                return response

            def __getattr__(self, name: str) -> Any:
                return getattr(self.stub, name)

        conns.broker_stub = lambda node: Recording(real(node))  # type: ignore[method-assign]
        c.assign(tps)
        got = _drain_values(c, 100)
        assert sorted(got) == sorted(b"v%d" % i for i in range(100))
        with Producer(broker.bootstrap, linger_ms=0) as p:
            p.send("in-session", b"late", partition=7)
            p.flush(10)
        assert _drain_values(c, 1) == [b"late"]
        with Producer(broker.bootstrap, linger_ms=0) as p:
            p.send("in-session", b"later", partition=3)
            p.flush(10)
        assert _drain_values(c, 1) == [b"later"]
    assert seen[0][:3] == (True, 0, 20)  # a full fetch opens the session
    # every offset moved: all named; the long-poll's answer carries the one partition with news
    assert seen[1] == (True, 1, 20, [7])
    assert seen[2] == (True, 2, 1, [3])  # only partition 7 moved since


def test_closing_a_consumer_ends_its_fetch_sessions(broker: Any) -> None:
    """On close the consumer tells the broker its fetch session ends (Kafka's consumer does):
    a later incremental Fetch in it is FETCH_SESSION_ID_NOT_FOUND. Before, the session kept
    every partition's position on the broker until the cache evicted it."""
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("closed-session", partitions=3)
    with Producer(broker.bootstrap, linger_ms=0) as p:
        for i in range(30):
            p.send("closed-session", b"v%d" % i, partition=i % 3)
        p.flush(10)
    c = Consumer(broker.bootstrap, auto_offset_reset="earliest")
    c.assign([TopicPartition("closed-session", p) for p in range(3)])
    assert len(_drain_values(c, 30)) == 30
    [session] = c._core._sessions.values()
    assert session.session_id != 0
    c.close()
    import grpc

    from strom.protocol.v1 import broker_pb2
    from strom.transport.status import from_rpc_error
    from strom.transport.v1 import broker_pb2_grpc

    with grpc.insecure_channel(broker.bootstrap) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as info:
            stub.Fetch(broker_pb2.FetchRequest(session_id=session.session_id,
                                               session_epoch=max(session.epoch, 1)), timeout=10)
    assert from_rpc_error(info.value).code is ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def _drain_values(c: Consumer, n: int, timeout: float = 30) -> list[bytes | None]:
    out: list[bytes | None] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out += [r.value for r in c.poll(500)]
    return out
