"""The sync Producer against the fake cluster: delivery, routing to leaders, retries, errors."""

from __future__ import annotations

import concurrent.futures as cf

import pytest

from strom.client import ErrorCode, Producer, RecordMetadata, StromError
from strom.client.partitioner import murmur2, to_positive
from strom.protocol.records import decode_batches

from .conftest import FakeCluster


def _values(cluster: FakeCluster, topic: str, partition: int) -> list[bytes | None]:
    part = cluster.topics[topic][partition]
    return [r.value for _, data in part.batches for r in decode_batches(data, topic, partition)]


def test_send_and_offsets(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    with Producer(fake_cluster.bootstrap, linger_ms=1) as p:
        futures = [p.send("t", b"v%d" % i) for i in range(1000)]
        p.flush(10)
        offsets = [f.result(0).offset for f in futures]
    assert offsets == list(range(1000))
    assert _values(fake_cluster, "t", 0) == [b"v%d" % i for i in range(1000)]


def test_keyed_records_follow_murmur2(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("k", 5)
    with Producer(fake_cluster.bootstrap) as p:
        md = p.send("k", b"x", key=b"foobar").result(10)
        assert p.partitions_for("k") == [0, 1, 2, 3, 4]
    assert md.partition == to_positive(murmur2(b"foobar")) % 5


def test_null_keys_stick_to_one_partition_per_batch(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("s", 4)
    with Producer(fake_cluster.bootstrap, linger_ms=50) as p:
        futures = [p.send("s", b"x") for _ in range(50)]
        p.flush(10)
    assert len({f.result().partition for f in futures}) == 1


def test_on_delivery_and_explicit_partition(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 3)
    got: list[RecordMetadata | None] = []
    with Producer(fake_cluster.bootstrap) as p:
        p.send("t", b"a", partition=2, timestamp_ms=123, headers=[("h", b"1")],
               on_delivery=lambda md, err: got.append(md))
        p.flush(10)
        with pytest.raises(StromError) as info:
            p.send("t", b"a", partition=3)
        assert info.value.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert got == [RecordMetadata("t", 2, 0, 123, 0, 1)]


def test_retries_not_leader_once_then_succeeds(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    fake_cluster.faults[("Produce", "t", 0)] = [ErrorCode.NOT_LEADER_OR_FOLLOWER]
    with Producer(fake_cluster.bootstrap, retry_backoff_ms=10) as p:
        md = p.send("t", b"x").result(10)
    assert md.offset == 0
    produce_calls = [c for c in fake_cluster.calls if c[1] == "Produce"]
    assert len(produce_calls) == 2
    metadata_calls = [c for c in fake_cluster.calls if c[1] == "Metadata"]
    assert len(metadata_calls) >= 2  # refreshed after the routing error


def test_retries_whole_call_failure(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    fake_cluster.call_faults["Produce"] = [ErrorCode.LEADER_NOT_AVAILABLE] * 2
    with Producer(fake_cluster.bootstrap, retry_backoff_ms=5) as p:
        assert p.send("t", b"x").result(10).offset == 0


def test_non_retriable_error_fails_future(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    fake_cluster.faults[("Produce", "t", 0)] = [ErrorCode.INVALID_RECORD]
    with Producer(fake_cluster.bootstrap) as p:
        f = p.send("t", b"x")
        with pytest.raises(StromError) as info:
            f.result(10)
        assert info.value.code is ErrorCode.INVALID_RECORD
        assert p.send("t", b"y").result(10).offset == 0  # the producer keeps working


def test_delivery_timeout_bounds_retries(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    fake_cluster.faults[("Produce", "t", 0)] = [ErrorCode.NOT_ENOUGH_REPLICAS] * 1000
    with Producer(fake_cluster.bootstrap, retry_backoff_ms=10, retry_backoff_max_ms=20,
                  delivery_timeout_ms=300) as p, pytest.raises(StromError) as info:
        p.send("t", b"x").result(10)
    assert info.value.code is ErrorCode.NOT_ENOUGH_REPLICAS


def test_routes_to_leader_and_follows_leader_move(fake_cluster2: FakeCluster) -> None:
    fake_cluster2.create_topic("t", 2, leaders=[1, 2])
    with Producer(fake_cluster2.bootstrap, retry_backoff_ms=10, linger_ms=0) as p:
        p.send("t", b"a", partition=0).result(10)
        p.send("t", b"b", partition=1).result(10)
        produce = [(broker, req.partitions[0].partition) for broker, rpc, req
                   in fake_cluster2.calls if rpc == "Produce"]
        assert sorted(produce) == [(1, 0), (2, 1)]
        fake_cluster2.set_leader("t", 0, 2)  # leader moves: old leader says NOT_LEADER
        assert p.send("t", b"c", partition=0).result(10).offset == 1
    last = [broker for broker, rpc, req in fake_cluster2.calls if rpc == "Produce"][-1]
    assert last == 2


def test_unknown_topic_times_out_with_max_block(fake_cluster: FakeCluster) -> None:
    with (
        Producer(fake_cluster.bootstrap, max_block_ms=300, retry_backoff_ms=20) as p,
        pytest.raises(StromError) as info,
    ):
        p.send("missing", b"x")
    assert info.value.code is ErrorCode.REQUEST_TIMED_OUT
    assert "missing" in info.value.message


def test_acks_zero_resolves_with_offset_minus_one(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    with Producer(fake_cluster.bootstrap, acks=0) as p:
        assert p.send("t", b"x").result(10).offset == -1
        p.flush(10)
    assert fake_cluster.records_in("t", 0) == 1


def test_compression_end_to_end(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("z", 1)
    with Producer(fake_cluster.bootstrap, compression_type="zstd") as p:
        futures = [p.send("z", b"hello %d" % i) for i in range(100)]
        cf.wait(futures, timeout=10)
    assert _values(fake_cluster, "z", 0) == [b"hello %d" % i for i in range(100)]


def test_bad_config_fails_fast() -> None:
    for kwargs in ({"acks": 2}, {"compression_type": "brotli"}, {"batch_size": 0}):
        with pytest.raises(StromError) as info:
            Producer("127.0.0.1:1", **kwargs)
        assert info.value.code is ErrorCode.INVALID_CONFIG
    with pytest.raises(StromError):
        Producer("nonsense")


def test_record_too_large(fake_cluster: FakeCluster) -> None:
    with (
        Producer(fake_cluster.bootstrap, max_request_size=1000) as p,
        pytest.raises(StromError) as info,
    ):
        p.send("t", b"x" * 2000)
    assert info.value.code is ErrorCode.MESSAGE_TOO_LARGE


def test_buffer_memory_backpressure(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    with Producer(fake_cluster.bootstrap, batch_size=1024, buffer_memory=4096,
                  linger_ms=0) as p:
        futures = [p.send("t", b"x" * 100) for _ in range(2000)]
        p.flush(30)
    assert [f.result().offset for f in futures] == list(range(2000))
