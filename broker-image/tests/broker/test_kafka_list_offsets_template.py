"""ListOffsets answers to one-partition requests come from a template (librdkafka asks one
partition per request: 1,000 requests for a consumer assigned 1,000 partitions from the
beginning), and are byte for byte kio's encoding of the answer the general path builds, in
every version, for every kind of timestamp; errors still take the general path."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import SimpleNamespace

import pytest

from strom.broker.core import BrokerCore
from strom.broker.kafka import list_offsets
from strom.broker.kafka.context import Context
from strom.broker.kafka.frames import Request, encode_response
from strom.protocol.records import encode_batch

CoreFactory = Callable[..., Awaitable[BrokerCore]]


def _context(core: BrokerCore, version: int, correlation_id: int, topic: str, partition: int,
             timestamp: int, leader_epoch: int = -1) -> Context:
    body = SimpleNamespace(topics=[SimpleNamespace(name=topic, partitions=[SimpleNamespace(
        partition_index=partition, timestamp=timestamp, current_leader_epoch=leader_epoch)])])
    return Context(core, Request(list_offsets.KEY, version, correlation_id, "t", body),
                   "PLAINTEXT", {})


async def test_templated_answers_are_the_general_paths_in_every_version(
        make_core: CoreFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    core = await make_core()
    await core.topics.create_topic("t", partitions=3)
    for partition in range(3):
        for i in range(partition * 2):
            core.replicas.append_now("t", partition, encode_batch(
                [(b"k", b"v")], timestamp_ms=1_700_000_000_000 + 1000 * i))
    asks = [(p, ts) for p in range(3) for ts in (-1, -2, -3, -4, -5, -6, 0,
                                                 1_700_000_001_500, 2**62)]
    asks += [(7, -1), (0, -7)]  # an unknown partition, an unknown special timestamp: errors
    list_offsets._TEMPLATES.clear()
    templated = []
    for version in range(list_offsets.VERSIONS[0], list_offsets.VERSIONS[1] + 1):
        for i, (partition, ts) in enumerate(asks):
            answer = await list_offsets.handle(_context(core, version, i, "t", partition, ts))
            templated.append((version, i, answer))
    assert 0 < len(list_offsets._TEMPLATES) <= 11  # one per version (and topic)
    monkeypatch.setattr(list_offsets, "_one_partition", lambda *_: None)
    kinds = set()
    for version, i, answer in templated:
        partition, ts = asks[i]
        general = await list_offsets.handle(_context(core, version, i, "t", partition, ts))
        expected = encode_response(i, general)
        if isinstance(answer, bytes):
            kinds.add("template")
            assert answer == expected, (version, partition, ts)
        else:
            kinds.add("general")
            assert encode_response(i, answer) == expected, (version, partition, ts)
            assert general.topics[0].partitions[0].error_code != 0
    assert kinds == {"template", "general"}
