"""The metrics of an in-process broker core after traffic: values and label sets as expected,
and deleted topics' series gone. The names a real broker exports are checked against
``strom.broker.metrics.EXPORTED`` (and by promtool) in ``test_metrics_export``."""

from __future__ import annotations

from prometheus_client import generate_latest

from strom.broker import fetch, produce
from strom.broker.core import BrokerCore
from strom.protocol.records import encode_batch
from strom.protocol.v1 import broker_pb2


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


async def test_values_after_traffic(core: BrokerCore) -> None:
    text = (await _traffic(core)).decode()
    assert 'strom_log_end_offset{partition="0",topic="t"} 1.0' in text
    assert "strom_broker_partitions 2.0" in text
    assert "strom_broker_active_connections 1.0" in text
    assert 'strom_broker_messages_in_total{topic="t"} 1.0' in text
    assert 'strom_broker_messages_out_total{topic="t"} 1.0' in text
    assert 'strom_broker_bytes_in_total{topic="t"} 0.0' not in text


async def test_deleted_topics_disappear(core: BrokerCore) -> None:
    await _traffic(core)
    await core.topics.delete("t")
    core.metrics.forget_topic("t")
    text = generate_latest(core.metrics.registry).decode()
    assert 'topic="t"' not in text
    # a topic of the same name made again counts from zero in series of its own (the labelled
    # children the metrics keep per topic were forgotten with it)
    text = (await _traffic(core)).decode()
    assert 'strom_broker_messages_in_total{topic="t"} 1.0' in text
    assert 'strom_broker_messages_out_total{topic="t"} 1.0' in text
