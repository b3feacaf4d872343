"""Partition counts are bounded per request (``max.partitions.per.request``, Kafka's 10,000
records per metadata operation): a CreateTopics or CreatePartitions asking for 10^9 or 2^31-1
partitions is refused at once with a message naming the limit, never worked on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from strom.broker import admin
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import admin_pb2
from strom.testing import running_broker
from strom.transport.v1 import admin_pb2_grpc

from ..broker.conftest import CoreFactory

HUGE = [10**9, 2**31 - 1]


@pytest.mark.integration
def test_huge_partition_counts_are_refused_at_once(tmp_path: Path) -> None:
    with running_broker(tmp_path) as broker, grpc.insecure_channel(broker.bootstrap) as channel:
        stub: Any = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        for count in HUGE:
            started = time.monotonic()
            response = stub.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[
                admin_pb2.NewTopic(name=f"huge{count}", num_partitions=count,
                                   replication_factor=1)]), timeout=10)
            assert time.monotonic() - started < 2.0
            result = response.results[0]
            assert result.error_code == ErrorCode.INVALID_PARTITIONS
            assert f"num_partitions={count}" in result.error_message
            assert "max.partitions.per.request" in result.error_message
        stub.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[
            admin_pb2.NewTopic(name="small", num_partitions=1, replication_factor=1)]),
            timeout=10)
        for count in HUGE:
            started = time.monotonic()
            grown = stub.CreatePartitions(admin_pb2.CreatePartitionsRequest(
                topic="small", new_total_count=count), timeout=10)
            assert time.monotonic() - started < 2.0
            assert grown.result.error_code == ErrorCode.INVALID_PARTITIONS
            assert "max.partitions.per.request" in grown.result.error_message
        assert broker.is_ready()


async def test_request_total_is_bounded_with_policy_violation(make_core: CoreFactory) -> None:
    core = await make_core(max_partitions_per_request=10)
    response = await admin.create_topics(core, admin_pb2.CreateTopicsRequest(topics=[
        admin_pb2.NewTopic(name="a", num_partitions=6, replication_factor=1),
        admin_pb2.NewTopic(name="b", num_partitions=6, replication_factor=1),
        admin_pb2.NewTopic(name="c", num_partitions=4, replication_factor=1),
        admin_pb2.NewTopic(name="d", num_partitions=11, replication_factor=1),
    ]))
    codes = {r.name: (r.error_code, r.error_message) for r in response.results}
    assert codes["a"][0] == 0
    assert codes["b"][0] == ErrorCode.POLICY_VIOLATION
    assert "12 partitions in all" in codes["b"][1]
    assert codes["c"][0] == 0  # 6 + 4 fits
    assert codes["d"][0] == ErrorCode.INVALID_PARTITIONS
    assert set(core.metadata.topics()) == {"a", "c"}
    grown = await admin.create_partitions(core, admin_pb2.CreatePartitionsRequest(
        topic="a", new_total_count=17))
    assert grown.result.error_code == ErrorCode.INVALID_PARTITIONS
    assert "would add 11 partitions" in grown.result.error_message
    grown = await admin.create_partitions(core, admin_pb2.CreatePartitionsRequest(
        topic="a", new_total_count=16))
    assert grown.result.error_code == 0
