"""A topic's Metadata answer is built once per metadata image offset, not per request.

Issue 21: a Metadata answer for a 10,000-partition topic took ~35 ms of the broker's CPU to
build, and producers and consumers ask for the same topic again and again while nothing
changes; a copy of the built message costs a millisecond.
"""

from __future__ import annotations

import pytest

from strom.broker import metadata_rpc
from strom.broker.core import BrokerCore
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
