"""The metrics of an in-process broker core after traffic: values and label sets as expected,
and deleted topics' series gone. The names a real broker exports are checked against
``strom.broker.metrics.EXPORTED`` (and by promtool) in ``test_metrics_export``."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from strom.broker import fetch, metrics, produce
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


async def test_a_scrape_is_the_registry_and_is_built_off_the_event_loop(
        core: BrokerCore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scrape (``exposition``) gives the same text as the live registry, and the families
    are built in a worker thread: at 10,000 partitions building and formatting them held the
    event loop 0.7-1.0 s. A log not opened yet is measured (a file-system read) there too."""
    await _traffic(core)
    loop_thread = threading.get_ident()
    threads: list[int] = []
    original = metrics.files_size

    def files_size(directory: Path) -> int:
        threads.append(threading.get_ident())
        return original(directory)

    monkeypatch.setattr(metrics, "files_size", files_size)
    plog = next(iter(core.metrics.logs()))
    monkeypatch.setattr(type(plog), "loaded", property(lambda self: False))
    scraped = await core.metrics.exposition()
    assert threads and loop_thread not in threads
    threads.clear()
    live = generate_latest(core.metrics.registry)

    def steady(text: bytes) -> list[str]:  # the file system's free bytes move meanwhile
        return [line for line in text.decode().splitlines()
                if not line.startswith("strom_log_dir_free_bytes{")]

    assert steady(scraped) == steady(live)
    assert 'strom_log_end_offset{partition="0",topic="t"} 1.0' in scraped.decode()
