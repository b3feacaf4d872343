"""Kafka request frames decoded as Kafka's SocketServer decodes them (no sockets)."""

from __future__ import annotations

import io
import struct

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer

from strom.broker.kafka.apis import SUPPORTED
from strom.broker.kafka.context import code
from strom.broker.kafka.frames import (
    BIG_WRITE,
    ApiVersionsFallback,
    Reject,
    Request,
    api_versions_fallback,
    encode_response,
    encode_response_chunks,
    parse_request,
    read_size,
)


def _frame(api_key: int, version: int, body: object, correlation_id: int = 7) -> bytes:
    buffer = io.BytesIO()
    header = RequestHeader(request_api_key=api_key, request_api_version=version,  # type: ignore[arg-type]
                           correlation_id=correlation_id, client_id="test")  # type: ignore[arg-type]
    entity_writer(RequestHeader)(buffer, header)
    entity_writer(type(body))(buffer, body)  # type: ignore[arg-type]
    return buffer.getvalue()


def test_a_request_of_a_served_version_parses_to_its_kio_entity() -> None:
    body = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="t"),),  # type: ignore[arg-type]
                           allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)
    parsed = parse_request(_frame(3, 12, body, correlation_id=42), SUPPORTED)
    assert isinstance(parsed, Request)
    assert (parsed.api_key, parsed.api_version, parsed.correlation_id) == (3, 12, 42)
    assert parsed.client_id == "test"
    assert parsed.body == body


def test_frames_kafka_closes_the_connection_for_are_rejected() -> None:
    body = ApiVersionsRequest(client_software_name="x", client_software_version="1")
    too_short = b"\x00\x03\x00"
    unknown_key = struct.pack(">hhih", 9999, 0, 1, -1)
    old_produce = struct.pack(">hhih", 0, 2, 1, -1)  # Kafka 4 dropped Produce v0-2
    truncated = _frame(18, 3, body)[:-3]
    for frame in (too_short, unknown_key, old_produce, truncated):
        assert isinstance(parse_request(frame, SUPPORTED), Reject), frame


def test_a_null_where_the_schema_forbids_one_is_rejected() -> None:
    """kio reads a -1 length as None anywhere; Kafka's readers refuse a null non-nullable field
    (found by the Kafka-listener fuzz test: the handler then failed on None)."""
    from kio.schema.offset_commit.v8.request import OffsetCommitRequest, OffsetCommitRequestTopic

    null_partitions = OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=1, member_id="m",  # type: ignore[arg-type]
        group_instance_id=None,
        topics=(OffsetCommitRequestTopic(name="t", partitions=None),))  # type: ignore[arg-type]
    parsed = parse_request(_frame(8, 8, null_partitions), SUPPORTED)
    assert isinstance(parsed, Reject)
    assert "non-nullable field topics.partitions was serialized as null" in parsed.reason
    allowed = OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=1, member_id="m",  # type: ignore[arg-type]
        group_instance_id=None, topics=())
    assert isinstance(parse_request(_frame(8, 8, allowed), SUPPORTED), Request)


def test_an_api_not_implemented_is_rejected_even_if_kafka_has_it() -> None:
    # 57 = UpdateFeatures: real in Kafka, not served here, so never advertised either
    assert 57 not in SUPPORTED
    assert isinstance(parse_request(struct.pack(">hhih", 57, 0, 1, -1), SUPPORTED), Reject)


def test_a_newer_api_versions_request_gets_the_kip_511_answer() -> None:
    frame = struct.pack(">hhih", 18, 99, 5, -1) + b"\x00" * 8
    parsed = parse_request(frame, SUPPORTED)
    assert parsed == ApiVersionsFallback(correlation_id=5, api_version=99)
    data = api_versions_fallback(parsed, SUPPORTED)
    assert read_size(data[:4]) == len(data) - 4
    (correlation_id,) = struct.unpack_from(">i", data, 4)
    (error_code,) = struct.unpack_from(">h", data, 8)
    assert (correlation_id, error_code) == (5, 35)  # UNSUPPORTED_VERSION
    (count,) = struct.unpack_from(">i", data, 10)
    assert count == len(SUPPORTED)


def test_responses_carry_the_size_and_correlation_id() -> None:
    from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
    from kio.schema.errors import ErrorCode

    response = ApiVersionsResponse(error_code=ErrorCode.none, api_keys=(  # type: ignore[call-arg]
        ApiVersion(api_key=18, min_version=0, max_version=4),),  # type: ignore[arg-type]
        throttle_time=__import__("datetime").timedelta(0))
    data = encode_response(1234, response)
    assert read_size(data[:4]) == len(data) - 4
    assert struct.unpack_from(">i", data, 4) == (1234,)
    decoded, _ = entity_reader(ApiVersionsResponse)(data, 8)  # ApiVersions: header v0
    assert decoded == response


def test_served_versions_cover_what_kafka_4_0_advertises() -> None:
    # key: (min, max) in Apache Kafka 4.0's ApiVersions answer, for every API served here
    kafka_4_0 = {0: (3, 12), 1: (4, 17), 2: (1, 9), 3: (0, 12), 8: (2, 9), 9: (1, 9),
                 10: (0, 6), 11: (2, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 5),
                 16: (0, 5), 18: (0, 4), 19: (2, 7), 20: (1, 6), 22: (0, 5), 23: (2, 4),
                 32: (1, 4), 33: (0, 2), 37: (0, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1),
                 45: (0, 0), 46: (0, 0), 60: (0, 1), 75: (0, 0),
                 21: (0, 2), 35: (1, 4), 47: (0, 0), 61: (0, 0)}
    assert set(SUPPORTED) == set(kafka_4_0)
    for key, (low, high) in kafka_4_0.items():
        served_low, served_high = SUPPORTED[key]
        assert served_low <= low and served_high >= high, key


def _kio_frame(correlation_id: int, response: object) -> bytes:
    """The whole frame as kio writes it into one buffer (how responses were encoded before)."""
    buffer = io.BytesIO()
    header_type = type(response).__header_schema__  # type: ignore[attr-defined]
    entity_writer(header_type)(buffer, header_type(correlation_id=correlation_id))
    entity_writer(type(response))(buffer, response)  # type: ignore[arg-type]
    data = buffer.getvalue()
    return struct.pack(">i", len(data)) + data


@pytest.mark.parametrize("version", range(SUPPORTED[1][0], SUPPORTED[1][1] + 1))
def test_fetch_responses_are_kios_bytes_with_the_record_sets_not_copied(version: int) -> None:
    import datetime
    import uuid

    from strom.broker.kafka.context import Context

    ctx = Context(None, Request(1, version, 0, "", None), "kafka", SUPPORTED)  # type: ignore[arg-type]
    big = bytes(range(256)) * (BIG_WRITE // 256 + 3)  # stands for a record set read from a log
    other = b"\x01" * (3 * BIG_WRITE)
    small = b"\x02" * 100

    def part(index: int, records: bytes | None) -> object:
        return ctx.build("PartitionData", partition_index=index, error_code=code(0),
                         high_watermark=9, last_stable_offset=9, log_start_offset=0,
                         aborted_transactions=None, preferred_read_replica=-1, records=records)

    topics = (ctx.build("FetchableTopicResponse", topic="a", topic_id=uuid.UUID(int=7),
                        partitions=(part(0, big), part(1, small), part(2, b""))),
              ctx.build("FetchableTopicResponse", topic="b", topic_id=uuid.UUID(int=8),
                        partitions=(part(0, other),)))
    response = ctx.build("FetchResponse", throttle_time=datetime.timedelta(0),
                         error_code=code(0), session_id=5, responses=topics)
    chunks = encode_response_chunks(99, response)
    assert b"".join(chunks) == _kio_frame(99, response)
    assert sum(c is big for c in chunks) == 1 and sum(c is other for c in chunks) == 1
    assert not any(c is small for c in chunks)  # small writes are gathered, not kept apart


def test_produce_is_advertised_from_v0_but_v0_to_v2_are_refused() -> None:
    """KAFKA-18659: Kafka 4.x advertises Produce 0-13 (old librdkafka enables compression only
    then) and closes the connection on a v0-2 request; so does this listener."""
    from strom.broker.kafka.apis import ADVERTISED

    assert ADVERTISED[0] == (0, SUPPORTED[0][1]) and SUPPORTED[0][0] == 3
    assert {k: v for k, v in ADVERTISED.items() if k != 0} == {
        k: v for k, v in SUPPORTED.items() if k != 0}
    for version in (0, 1, 2):  # acks, timeout, no topics: a well-formed v0-2 body
        frame = struct.pack(">hhih5shii", 0, version, 9, 5, b"probe", 1, 1000, 0)
        parsed = parse_request(frame, SUPPORTED)
        assert isinstance(parsed, Reject) and "version" in parsed.reason, parsed
