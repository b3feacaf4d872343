"""Metric names follow Prometheus conventions (checked by promtool when it is installed)."""

from __future__ import annotations

import re
import subprocess

from prometheus_client import generate_latest

from strom.broker import fetch, produce
from strom.broker.core import BrokerCore
from strom.protocol.records import encode_batch
from strom.protocol.v1 import broker_pb2
from strom.testing.tools import require_tool

EXPECTED = [
    "strom_broker_bytes_in_total",
    "strom_broker_bytes_out_total",
    "strom_broker_messages_in_total",
    "strom_broker_messages_out_total",
    "strom_broker_requests_total",
    "strom_broker_request_duration_seconds_bucket",
    "strom_log_size_bytes",
    "strom_log_end_offset",
    "strom_log_start_offset",
    "strom_broker_active_connections",
    "strom_broker_partitions",
    "strom_broker_up",
    "strom_broker_info",
]


async def _traffic(core: BrokerCore) -> bytes:
    await core.topics.create_topic("t", 2)
    await produce.handle(core, broker_pb2.ProduceRequest(acks=1, partitions=[
        broker_pb2.PartitionProduceData(topic="t", partition=0,
                                        records=encode_batch([(None, b"v")]))]))
    await fetch.handle(core, broker_pb2.FetchRequest(min_bytes=1, partitions=[
        broker_pb2.FetchPartition(topic="t", partition=0)]))
    core.metrics.requests.labels("Produce", "ok", "grpc").inc()
    core.metrics.request_duration.labels("Produce", "grpc").observe(0.001)
    core.metrics.peer_seen("ipv4:127.0.0.1:5555")
    return bytes(generate_latest(core.metrics.registry))


async def test_names_after_traffic(core: BrokerCore) -> None:
    text = (await _traffic(core)).decode()
    names = {m.group(1) for m in re.finditer(r"^([a-z_:][a-z0-9_:]*)[{ ]", text, re.M)}
    for name in EXPECTED:
        assert name in names, name
    assert 'strom_log_end_offset{partition="0",topic="t"} 1.0' in text
    assert "strom_broker_partitions 2.0" in text
    assert "strom_broker_active_connections 1.0" in text


async def test_promtool_accepts_the_scrape(core: BrokerCore) -> None:
    promtool = require_tool("promtool", "Debian package prometheus")
    scrape = await _traffic(core)
    result = subprocess.run([promtool, "check", "metrics"], input=scrape,
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


async def test_deleted_topics_disappear(core: BrokerCore) -> None:
    await _traffic(core)
    await core.topics.delete("t")
    core.metrics.forget_topic("t")
    text = generate_latest(core.metrics.registry).decode()
    assert 'topic="t"' not in text
