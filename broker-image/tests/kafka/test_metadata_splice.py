"""Metadata answers spliced from kept topic encodings are kio's encoding of the whole response.

librdkafka asks for a topic's metadata two or three times while a keyed produce starts; kio's
writing of a 1,000-partition topic cost ~7.8 ms of the broker's CPU an answer, so each
error-free topic's bytes are kept per metadata image (issue 21 item 1).
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from strom.broker.kafka import metadata
from strom.broker.kafka.context import Context
from strom.broker.kafka.frames import Request, encode_response
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import broker_pb2


def _context(version: int, correlation_id: int, cache: dict[object, object]) -> Context:
    core: Any = SimpleNamespace(metadata=SimpleNamespace(answers=lambda: cache))
    return Context(core, Request(metadata.KEY, version, correlation_id, "test", None),
                   "PLAINTEXT", {})


def _answer(partitions: int) -> broker_pb2.MetadataResponse:
    answer = broker_pb2.MetadataResponse(cluster_id="strom-test", controller_id=1)
    for b in range(3):
        answer.brokers.add(broker_id=b, host=f"broker-{b}.local", port=9092 + b,
                           rack="r1" if b else "")
    orders = answer.topics.add(name="orders", topic_id=str(uuid.UUID(int=7)))
    for p in range(partitions):  # replica lists of 1-3, some offline, varied epochs, some
        # without a leader (LEADER_NOT_AVAILABLE): partitions are written from templates
        replicas = [(p + i) % 3 for i in range(1 + p % 3)]
        orders.partitions.add(partition=p, error_code=5 if p % 7 == 3 else 0,
                              leader=replicas[0] if p % 7 != 3 else -1,
                              leader_epoch=p * 131, replicas=replicas,
                              isr=replicas[:1 + p % 2], offline_replicas=replicas[2:])
    answer.topics.add(name="__consumer_offsets", internal=True, topic_id="not-a-uuid",
                      partitions=[broker_pb2.PartitionMetadata(
                          partition=0, leader=2, leader_epoch=3, replicas=[2], isr=[2])])
    answer.topics.add(name="missing", error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    answer.topics.add(name="empty")
    return answer


@pytest.mark.parametrize("version", range(metadata.VERSIONS[0], metadata.VERSIONS[1] + 1))
def test_spliced_answers_are_kios_encoding(version: int) -> None:
    """For every version: topics with partitions (kept), an internal one, an error and an
    empty one (encoded each time), unknown ids (v10+), several answers from one cache, each
    byte for byte kio's encoding of the response the handler's builder makes (versions 8-10
    and 13 have a field after the topics array)."""
    cache: dict[object, object] = {}
    unknown = [uuid.UUID(int=99)] if version >= 10 else []
    for i, partitions in enumerate((1, 300, 300, 1000, 1000)):
        answer = _answer(partitions)
        ctx = _context(version, 40 + i, cache)
        spliced = metadata._encoded(ctx, answer, unknown, 2)
        expected = encode_response(40 + i, metadata._response(
            ctx, answer, unknown, 2, metadata._topics(ctx, answer, unknown)))
        assert spliced == expected, (version, partitions)
    kept = [k for k in cache if isinstance(k, tuple) and k[0] == "kafka-metadata-topic"]
    assert len(kept) == 4  # orders at 3 sizes, __consumer_offsets


def test_a_kept_topic_is_reused_and_a_new_image_starts_empty() -> None:
    """The second answer from the same image copies the kept bytes (no struct is built); the
    cache is the image's (``MetadataView.answers``), emptied when the image moves."""
    cache: dict[object, object] = {}
    answer = _answer(50)
    first = metadata._encoded(_context(12, 1, cache), answer, [], 0)
    key = ("kafka-metadata-topic", "PLAINTEXT", 12, "orders", 50)
    kept = cache[key]
    assert isinstance(kept, bytes) and first is not None and kept in first
    cache[key] = b"MARK"  # what the next answer copies
    again = metadata._encoded(_context(12, 2, cache), answer, [], 0)
    assert again is not None and b"MARK" in again and kept not in again
