"""ResponseTemplate: the answers to pipelined Produce requests made from one kio encoding are
byte for byte kio's own encoding of each answer, in every Produce version served."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from strom.broker.kafka import produce
from strom.broker.kafka.context import Context
from strom.broker.kafka.frames import Request, ResponseTemplate, encode_response
from strom.protocol.v1 import broker_pb2


def _context(version: int) -> Context:
    core: Any = None  # building a response needs no broker
    return Context(core, Request(produce.KEY, version, 1, "test", None), "PLAINTEXT", {})


@pytest.mark.parametrize("version", range(produce.VERSIONS[0], produce.VERSIONS[1] + 1))
@pytest.mark.parametrize("append_time", [-1, 1_700_000_000_123])
def test_templated_answers_are_kios_encoding(version: int, append_time: int) -> None:
    ctx = _context(version)
    slots = [produce._Slot("orders", uuid.UUID(int=7), 3)]
    part = broker_pb2.PartitionProduceResponse(topic="orders", partition=3, base_offset=0,
                                               log_append_time_ms=append_time,
                                               log_start_offset=42)
    results = {("orders", 3): part}

    def make(base: int) -> Any:
        return produce._response(ctx, slots, results, None, base_offset=base)

    template = ResponseTemplate(make)
    for correlation_id, base in [(1, 0), (7, 1), (2**31 - 1, 2**40 + 5), (-3, 2**63 - 1)]:
        assert template.encode(correlation_id, base) == encode_response(correlation_id,
                                                                        make(base))


def test_a_field_that_is_not_a_fixed_int64_is_refused() -> None:
    ctx = _context(9)
    slots = [produce._Slot("orders", None, 3)]

    def make(value: int) -> Any:  # the value moves the error message's length: not in place
        part = broker_pb2.PartitionProduceResponse(topic="orders", partition=3, error_code=1,
                                                   error_message="x" * (value + 2))
        return produce._response(ctx, slots, {("orders", 3): part}, None)

    with pytest.raises(ValueError, match="not one fixed-width int64"):
        ResponseTemplate(make)
