"""A topic's Metadata answer is built once per metadata image offset, not per request (on
the gRPC front and, in each request version's types, on the Kafka listener).

Issue 21: a Metadata answer for a 10,000-partition topic took ~35 ms of the broker's CPU to
build, and producers and consumers ask for the same topic again and again while nothing
changes; a copy of the built message costs a millisecond.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.metadata.v12.response import MetadataResponse
from kio.serial import entity_reader

from strom.broker import metadata_rpc
from strom.broker.core import BrokerCore
from strom.broker.kafka import metadata as kafka_metadata
from strom.broker.kafka.context import Context
from strom.broker.kafka.frames import Request
from strom.protocol.v1 import broker_pb2


async def test_an_answer_is_built_once_per_image_offset(
        core: BrokerCore, monkeypatch: pytest.MonkeyPatch) -> None:
    await core.topics.create_topic("t", 3)
    built: list[str] = []
    real = metadata_rpc._topic_answer

    def counting(*args: object) -> broker_pb2.TopicMetadata:
        built.append(args[1].name)  # type: ignore[attr-defined]
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(metadata_rpc, "_topic_answer", counting)
    request = broker_pb2.MetadataRequest(topics=["t"])
    first = await metadata_rpc.handle(core, request)
    second = await metadata_rpc.handle(core, request)
    assert built == ["t"] and first == second
    assert [p.leader for p in second.topics[0].partitions] == [core.config.broker_id] * 3
    await core.topics.create_topic("u", 1)  # the image moves on: built again, with the change
    everything = await metadata_rpc.handle(core, broker_pb2.MetadataRequest())
    assert built == ["t", "t", "u"]
    assert sorted(t.name for t in everything.topics) == ["t", "u"]
    assert [t.partitions for t in everything.topics if t.name == "t"] == [
        first.topics[0].partitions]


async def test_the_kafka_listener_builds_a_topic_s_partitions_once_per_offset(
        core: BrokerCore, monkeypatch: pytest.MonkeyPatch) -> None:
    await core.topics.create_topic("t", 3)
    built = _counted_builds(monkeypatch)

    async def ask(version: int) -> object:
        body = SimpleNamespace(topics=None, allow_auto_topic_creation=False)
        ctx = Context(core, Request(kafka_metadata.KEY, version, 1, "test", body),
                      "PLAINTEXT", {})
        return await kafka_metadata.handle(ctx)

    first = await ask(12)
    once = built.count("MetadataResponsePartition")
    second = await ask(12)
    assert once and built.count("MetadataResponsePartition") == once and first == second
    await ask(9)  # another version's types: built for it
    assert built.count("MetadataResponsePartition") > once
    twice = built.count("MetadataResponsePartition")
    await core.topics.create_topic("u", 1)
    framed = await ask(12)
    assert built.count("MetadataResponsePartition") > twice  # built again, with the change
    # the answer is the response frame, spliced from each topic's kept bytes (abbdcaf): read it
    # as a client does (size, correlation id, the flexible header's empty tagged fields)
    assert isinstance(framed, bytes)
    answer: Any = entity_reader(MetadataResponse)(framed[4:], 5)[0]
    assert {t.name: len(t.partitions) for t in answer.topics} == {"t": 3, "u": 1}


async def test_the_kafka_listener_writes_partitions_from_templates(
        core: BrokerCore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A topic's partitions are written from a template per shape (version and node counts),
    not built and written by kio one by one (~6-7 ms of CPU for 1,000 partitions in the first
    answer after a change, which librdkafka waits for: issue 21 item 1); the bytes are kio's
    (``tests/kafka/test_metadata_splice.py``)."""
    await core.topics.create_topic("t", 200)
    built = _counted_builds(monkeypatch)
    body = SimpleNamespace(topics=None, allow_auto_topic_creation=False)
    framed = await kafka_metadata.handle(
        Context(core, Request(kafka_metadata.KEY, 12, 1, "test", body), "PLAINTEXT", {}))
    assert built.count("MetadataResponsePartition") < 20  # 200 when built one by one
    answer: Any = entity_reader(MetadataResponse)(framed[4:], 5)[0]
    assert [int(p.partition_index) for p in answer.topics[0].partitions] == list(range(200))


def _counted_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The class names ``Context.build`` is asked for from now on, in order."""
    built: list[str] = []
    real_build = Context.build

    def counting(self: Context, class_name: str, /, **values: object) -> object:
        built.append(class_name)
        return real_build(self, class_name, **values)

    monkeypatch.setattr(Context, "build", counting)
    return built
