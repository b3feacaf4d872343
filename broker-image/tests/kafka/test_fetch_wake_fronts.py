"""A Kafka Fetch waiting in its long poll is answered as soon as a record is appended, whichever
front the record came through (the Kafka listener or gRPC): both fronts append through the same
core, whose append wakes every fetch waiting on the partition. Issue 14's end-to-end latency
(librdkafka's consumer with ``fetch.wait.max.ms``) depends on it: a fetch that woke only at its
timer would add up to ``max_wait`` to every record read."""

from __future__ import annotations

import concurrent.futures
import datetime
import time
import urllib.request

import pytest
from confluent_kafka import Producer as KafkaProducer
from kio.schema.fetch.v12 import request as fetch_req
from kio.schema.fetch.v12 import response as fetch_resp
from prometheus_client.parser import text_string_to_metric_families

from strom.client import Producer
from strom.protocol.records import decode_batches
from strom.testing import BrokerProcess
from strom.testing.waits import wait_until

from .conftest import kafka_call, new_topic

pytestmark = pytest.mark.integration

#: The fetch's long poll: far longer than any wake-up may take, even on a loaded machine.
MAX_WAIT_S = 30.0
#: How soon after the append the answer must come.
WOKEN_WITHIN_S = 10.0


def _inflight(broker: BrokerProcess) -> float:
    """``strom_broker_inflight_requests``: requests being served now, by either front."""
    with urllib.request.urlopen(broker.metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "strom_broker_inflight_requests")


def _fetch(broker: BrokerProcess, topic: str) -> list[bytes | None]:
    """A sessionless Kafka Fetch v12 of partition 0 from offset 0, waiting up to
    ``MAX_WAIT_S`` for one byte: the values it answers."""
    answer = kafka_call(broker.kafka_port, 1, 12, fetch_req.FetchRequest(  # type: ignore[call-arg]
        replica_id=-1, max_wait=datetime.timedelta(seconds=MAX_WAIT_S),  # type: ignore[arg-type]
        min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,  # type: ignore[arg-type]
        session_epoch=-1, topics=(fetch_req.FetchTopic(  # type: ignore[arg-type]
            topic=topic, partitions=(fetch_req.FetchPartition(  # type: ignore[arg-type]
                partition=0, current_leader_epoch=-1, fetch_offset=0,  # type: ignore[arg-type]
                log_start_offset=-1, partition_max_bytes=1 << 20),)),),  # type: ignore[arg-type]
        forgotten_topics_data=(), rack_id=""), fetch_resp.FetchResponse)  # type: ignore[arg-type]
    ((partition,),) = [t.partitions for t in answer.responses]
    assert int(partition.error_code) == 0
    return [r.value for r in decode_batches(partition.records or b"")]


def _produce_kafka(broker: BrokerProcess, topic: str, value: bytes) -> None:
    producer = KafkaProducer({"bootstrap.servers": broker.kafka_bootstrap, "linger.ms": 0})
    producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0


def _produce_grpc(broker: BrokerProcess, topic: str, value: bytes) -> None:
    with Producer(broker.bootstrap, linger_ms=0) as producer:
        producer.send(topic, value, partition=0)
        producer.flush(30)


@pytest.mark.parametrize("front", ["kafka", "grpc"])
def test_a_waiting_kafka_fetch_is_woken_by_an_append_through_either_front(
        broker: BrokerProcess, front: str) -> None:
    topic = new_topic(broker)
    produce = _produce_kafka if front == "kafka" else _produce_grpc
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        before = _inflight(broker)
        future = pool.submit(_fetch, broker, topic)
        wait_until(lambda: _inflight(broker) > before, 20,
                   what="the Kafka fetch to be in its long poll")
        assert not future.done()
        appended = time.monotonic()
        produce(broker, topic, b"wake")
        values = future.result(timeout=MAX_WAIT_S + 10)
        took = time.monotonic() - appended
    assert values == [b"wake"]
    assert took < WOKEN_WITHIN_S, f"answered {took:.1f}s after the append"
