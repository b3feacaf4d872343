"""APIs no client in the test suite drives directly, exercised with raw kio requests:
OffsetForLeaderEpoch (KIP-320 position validation), DescribeTopicPartitions paging, DescribeConfigs
synonyms and fetch sessions (KIP-227) request by request."""

from __future__ import annotations

import datetime
import io
from typing import Any

import pytest
from confluent_kafka import Producer
from kio.schema.describe_configs.v4 import request as dc_req
from kio.schema.describe_configs.v4 import response as dc_resp
from kio.schema.describe_topic_partitions.v0 import request as dtp_req
from kio.schema.describe_topic_partitions.v0 import response as dtp_resp
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_req
from kio.schema.fetch.v12 import response as fetch_resp
from kio.schema.incremental_alter_configs.v1 import request as iac_req
from kio.schema.incremental_alter_configs.v1 import response as iac_resp
from kio.schema.offset_for_leader_epoch.v4 import request as ofle_req
from kio.schema.offset_for_leader_epoch.v4 import response as ofle_resp

from strom.testing import BrokerProcess

from .conftest import kafka_call, new_topic

pytestmark = pytest.mark.integration


def _call(broker: BrokerProcess, api_key: int, version: int, body: Any, response: Any) -> Any:
    return kafka_call(broker.kafka_port, api_key, version, body, response)


def test_offset_for_leader_epoch_answers_the_end_of_the_epoch(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    p = Producer({"bootstrap.servers": broker.kafka_bootstrap})
    for i in range(7):
        p.produce(topic, b"%d" % i)
    assert p.flush(20) == 0

    def ask(epoch: int, current: int = -1) -> Any:
        body = ofle_req.OffsetForLeaderEpochRequest(replica_id=-1, topics=(
            ofle_req.OffsetForLeaderTopic(topic=topic, partitions=(
                ofle_req.OffsetForLeaderPartition(partition=0, current_leader_epoch=current,
                                                  leader_epoch=epoch),)),))
        answer = _call(broker, 23, 4, body, ofle_resp.OffsetForLeaderEpochResponse)
        return answer.topics[0].partitions[0]

    now = ask(0)
    assert (int(now.error_code), now.leader_epoch, now.end_offset) == (0, 0, 7)
    fenced = ask(0, current=99)
    assert int(fenced.error_code) == 75  # UNKNOWN_LEADER_EPOCH: the client is ahead


def test_describe_topic_partitions_pages_with_a_cursor(broker: BrokerProcess) -> None:
    topic = new_topic(broker, partitions=5)

    def page(cursor: Any) -> Any:
        body = dtp_req.DescribeTopicPartitionsRequest(
            topics=(dtp_req.TopicRequest(name=topic),), response_partition_limit=2,
            cursor=cursor)
        return _call(broker, 75, 0, body, dtp_resp.DescribeTopicPartitionsResponse)

    seen: list[int] = []
    cursor = None
    for _ in range(5):
        answer = page(cursor)
        seen += [p.partition_index for t in answer.topics for p in t.partitions]
        # Kafka answers empty ELR lists (never null): Kafka 4's admin client streams over them
        assert all(p.eligible_leader_replicas == () and p.last_known_elr == ()
                   for t in answer.topics for p in t.partitions)
        if answer.next_cursor is None:
            break
        cursor = dtp_req.Cursor(topic_name=answer.next_cursor.topic_name,
                                partition_index=answer.next_cursor.partition_index)
    assert seen == [0, 1, 2, 3, 4]


def test_describe_configs_lists_synonyms_and_types_as_kafka(broker: BrokerProcess) -> None:
    """kafka-configs and Kafka UIs show where a value comes from through its synonyms."""
    topic = new_topic(broker)
    altered = _call(broker, 44, 1, iac_req.IncrementalAlterConfigsRequest(
        resources=(iac_req.AlterConfigsResource(resource_type=2, resource_name=topic, configs=(
            iac_req.AlterableConfig(name="retention.ms", config_operation=0, value="60000"),)),),
        validate_only=False), iac_resp.IncrementalAlterConfigsResponse)
    assert altered.responses[0].error_code == 0, altered

    def describe(resource_type: int, name: str, keys: tuple[str, ...]) -> dict[str, Any]:
        answer = _call(broker, 32, 4, dc_req.DescribeConfigsRequest(
            resources=(dc_req.DescribeConfigsResource(resource_type=resource_type,
                                                      resource_name=name,
                                                      configuration_keys=keys),),
            include_synonyms=True, include_documentation=False),
            dc_resp.DescribeConfigsResponse)
        assert (answer.results[0].error_code, answer.results[0].error_message) == (0, "")
        return {c.name: c for c in answer.results[0].configs}

    configs = describe(2, topic, ("retention.ms", "cleanup.policy"))
    retention = configs["retention.ms"]
    assert (retention.value, retention.config_source, retention.config_type) == ("60000", 1, 5)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("retention.ms", "60000", 1), ("log.retention.ms", "604800000", 5)]
    policy = configs["cleanup.policy"]
    assert (policy.config_source, policy.config_type) == (5, 7)
    assert [(s.name, s.source) for s in policy.synonyms] == [("log.cleanup.policy", 5)]
    delay = describe(4, "0", ("group.initial.rebalance.delay.ms",))[
        "group.initial.rebalance.delay.ms"]
    assert (delay.value, delay.config_source, delay.config_type) == ("0", 4, 3)
    assert [(s.value, s.source) for s in delay.synonyms] == [("0", 4), ("3000", 5)]


def test_fetch_sessions_answer_incremental_fetches_with_only_what_changed(
        broker: BrokerProcess) -> None:
    """KIP-227 as Kafka's Java consumer uses it, request by request."""
    topic = new_topic(broker, partitions=2)

    def fetch(session_id: int, epoch: int, partitions: tuple[tuple[int, int], ...],
              forgotten: tuple[int, ...] = ()) -> Any:
        return _call(broker, 1, 12, fetch_req.FetchRequest(
            cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=10),
            min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=session_id,
            session_epoch=epoch, topics=(fetch_req.FetchTopic(topic=topic, partitions=tuple(
                fetch_req.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=o,
                                         last_fetched_epoch=-1, log_start_offset=-1,
                                         partition_max_bytes=1 << 20)
                for p, o in partitions)),) if partitions else (),
            forgotten_topics_data=(fetch_req.ForgottenTopic(topic=topic, partitions=forgotten),)
            if forgotten else (), rack_id=""), fetch_resp.FetchResponse)

    def carried(answer: Any) -> dict[int, int]:
        return {p.partition_index: len(p.records or b"") for t in answer.responses
                for p in t.partitions}

    opened = fetch(0, 0, ((0, 0), (1, 0)))
    assert opened.error_code == 0 and opened.session_id > 0
    assert carried(opened) == {0: 0, 1: 0}
    sid = opened.session_id
    assert carried(fetch(sid, 1, ())) == {}  # nothing changed: nothing carried
    producer = Producer({"bootstrap.servers": broker.kafka_bootstrap})
    producer.produce(topic, value=b"news", partition=1)
    assert producer.flush(30) == 0
    del producer
    news = carried(fetch(sid, 2, ()))
    assert list(news) == [1] and news[1] > 0  # only the partition with records
    # the consumer moved past it (no news: the high watermark was sent already) and forgot 0
    assert carried(fetch(sid, 3, ((1, 1),), forgotten=(0,))) == {}
    producer = Producer({"bootstrap.servers": broker.kafka_bootstrap})
    producer.produce(topic, value=b"unwatched", partition=0)
    assert producer.flush(30) == 0
    del producer
    assert carried(fetch(sid, 4, ())) == {}  # partition 0 left the session
    assert fetch(sid, 4, ()).error_code == ErrorCode.invalid_fetch_session_epoch
    assert fetch(sid + 1, 1, ()).error_code == ErrorCode.fetch_session_id_not_found
    sessionless = fetch(0, -1, ((0, 0),))
    assert sessionless.session_id == 0 and list(carried(sessionless)) == [0]
def test_an_empty_topic_name_is_answered_not_a_closed_connection(broker: BrokerProcess) -> None:
    """Found by the Kafka-listener fuzz test: DeleteRecords and DescribeProducers naming the
    topic "" failed inside the broker (traceback, connection closed); Kafka answers with the
    error per partition."""
    import datetime

    from kio.schema.delete_records.v2 import request as dr_req
    from kio.schema.delete_records.v2 import response as dr_resp
    from kio.schema.describe_producers.v0 import request as dp_req
    from kio.schema.describe_producers.v0 import response as dp_resp

    deleted = _call(broker, 21, 2, dr_req.DeleteRecordsRequest(
        topics=(dr_req.DeleteRecordsTopic(name="", partitions=(  # type: ignore[arg-type]
            dr_req.DeleteRecordsPartition(partition_index=0, offset=-1),)),),  # type: ignore[arg-type]
        timeout=datetime.timedelta(seconds=1)), dr_resp.DeleteRecordsResponse)
    assert int(deleted.topics[0].partitions[0].error_code) == 17  # INVALID_TOPIC_EXCEPTION
    described = _call(broker, 61, 0, dp_req.DescribeProducersRequest(topics=(
        dp_req.TopicRequest(name="", partition_indexes=(0,)),)),  # type: ignore[arg-type]
        dp_resp.DescribeProducersResponse)
    assert int(described.topics[0].partitions[0].error_code) == 17


def test_describe_groups_v6_says_an_unknown_group_is_not_found(broker: BrokerProcess) -> None:
    """KIP-1043 (Kafka 4.x): from v6 an unknown group is GROUP_ID_NOT_FOUND with Kafka's
    message (and still Dead); v5 keeps the old answer; a group with only committed offsets is
    Empty in both (the same answers the reference Kafka gives: e2e/compat/test_admin.py)."""
    from confluent_kafka import Consumer, TopicPartition
    from kio.schema.describe_groups.v5 import request as dg5_req
    from kio.schema.describe_groups.v5 import response as dg5_resp
    from kio.schema.describe_groups.v6 import request as dg6_req
    from kio.schema.describe_groups.v6 import response as dg6_resp

    topic = new_topic(broker)
    group = f"{topic}-offsets-only"
    c = Consumer({"bootstrap.servers": broker.kafka_bootstrap, "group.id": group})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    finally:
        c.close()
    unknown = f"{topic}-nobody"
    v6 = _call(broker, 15, 6, dg6_req.DescribeGroupsRequest(
        groups=(unknown, group), include_authorized_operations=False),
        dg6_resp.DescribeGroupsResponse)
    assert [(g.group_id, int(g.error_code), g.error_message, g.group_state, g.members)
            for g in v6.groups] == [(unknown, 69, f"Group {unknown} not found.", "Dead", ()),
                                    (group, 0, None, "Empty", ())]
    v5 = _call(broker, 15, 5, dg5_req.DescribeGroupsRequest(
        groups=(unknown,), include_authorized_operations=False), dg5_resp.DescribeGroupsResponse)
    assert [(int(g.error_code), g.group_state) for g in v5.groups] == [(0, "Dead")]


def _topic_id(broker: BrokerProcess, topic: str) -> Any:
    """The topic's id as Metadata v12 answers it."""
    from kio.schema.metadata.v12 import request as md_req
    from kio.schema.metadata.v12 import response as md_resp
    answer = _call(broker, 3, 12, md_req.MetadataRequest(
        topics=(md_req.MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False),
        md_resp.MetadataResponse)
    return answer.topics[0].topic_id


def _produce(broker: BrokerProcess, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": broker.kafka_bootstrap})
    for i in range(count):
        producer.produce(topic, b"%d" % i, partition=0)
    assert producer.flush(30) == 0


def test_describe_log_dirs_v5_says_no_directory_is_cordoned(broker: BrokerProcess) -> None:
    """KIP-1066's ``is_cordoned`` (v5): Strom has no cordoned directories, so false, with every
    other field as v4 answers it."""
    from kio.schema.describe_log_dirs.v5 import request as dld_req
    from kio.schema.describe_log_dirs.v5 import response as dld_resp

    topic = new_topic(broker)
    _produce(broker, topic, 3)
    answer = _call(broker, 35, 5, dld_req.DescribeLogDirsRequest(topics=(
        dld_req.DescribableLogDirTopic(topic=topic, partitions=(0,)),)),
        dld_resp.DescribeLogDirsResponse)
    assert int(answer.error_code) == 0
    (result,) = answer.results
    assert (int(result.error_code), result.is_cordoned) == (0, False)
    assert result.log_dir and result.total_bytes >= result.usable_bytes > 0
    ((name, ((index, size, lag, future),)),) = [
        (t.name, [(p.partition_index, p.partition_size, p.offset_lag, p.is_future_key)
                  for p in t.partitions]) for t in result.topics]
    assert (name, index, lag, future) == (topic, 0, 0, False) and size > 0


def test_fetch_v18_reads_records_and_ignores_a_followers_high_watermark(
        broker: BrokerProcess) -> None:
    """v18 adds only the partition's tagged ``high_watermark`` (KIP-1166, for followers): a
    request that sets it is answered as v17 answers one without it."""
    from kio.schema.fetch.v18 import request as f18_req
    from kio.schema.fetch.v18 import response as f18_resp

    topic = new_topic(broker)
    _produce(broker, topic, 3)
    topic_id = _topic_id(broker, topic)
    answer = _call(broker, 1, 18, f18_req.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=10), min_bytes=1, session_epoch=-1,
        topics=(f18_req.FetchTopic(topic_id=topic_id, partitions=(f18_req.FetchPartition(
            partition=0, fetch_offset=1, partition_max_bytes=1 << 20, high_watermark=2),)),),
        forgotten_topics_data=()), f18_resp.FetchResponse)
    assert (int(answer.error_code), answer.session_id) == (0, 0)
    ((got_id, (p,)),) = [(t.topic_id, t.partitions) for t in answer.responses]
    assert got_id == topic_id
    assert (p.partition_index, int(p.error_code), p.high_watermark, p.last_stable_offset,
            p.log_start_offset, p.preferred_read_replica, p.aborted_transactions) == (
        0, 0, 3, 3, 0, -1, None)  # null for read_uncommitted, as Kafka
    assert p.records  # the batches holding offsets 1-2, as stored


def test_produce_v0_to_v2_are_advertised_and_the_connection_closed_as_kafka(
        broker: BrokerProcess) -> None:
    """KAFKA-18659 (Kafka 4.x, checked against 4.3.1): ApiVersions says Produce 0-13 so that
    librdkafka < 2.10 compresses; a v0-2 request closes the connection without an answer."""
    import socket
    import struct

    from kio.schema.api_versions.v3 import request as av_req
    from kio.schema.api_versions.v3 import response as av_resp
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_reader, entity_writer

    port = broker.kafka_port
    buffer = io.BytesIO()
    entity_writer(RequestHeader)(buffer, RequestHeader(
        request_api_key=18, request_api_version=3, correlation_id=1, client_id="raw"))
    entity_writer(av_req.ApiVersionsRequest)(buffer, av_req.ApiVersionsRequest(
        client_software_name="raw", client_software_version="1"))
    data = buffer.getvalue()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(struct.pack(">i", len(data)) + data)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        answer, _ = entity_reader(av_resp.ApiVersionsResponse)(
            s.recv(size, socket.MSG_WAITALL), 4)  # ApiVersions answers with header v0
    ranges = {int(k.api_key): (k.min_version, k.max_version) for k in answer.api_keys}
    assert ranges[0] == (0, 13)
    for version in (0, 1, 2):  # header v1; acks 1, timeout 1000, one topic, no partitions
        frame = (struct.pack(">hhih5shii", 0, version, 7, 5, b"probe", 1, 1000, 1)
                 + struct.pack(">h4si", 4, b"nope", 0))
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(struct.pack(">i", len(frame)) + frame)
            assert s.recv(4, socket.MSG_WAITALL) == b""  # closed, nothing answered


def _list_offsets(port: int, version: int, topic: str, timestamp: int) -> Any:
    """One partition's ListOffsets answer at ``version`` (kio's classes of that version)."""
    import importlib

    from strom.broker.kafka.frames import request_type, response_type
    module = importlib.import_module(request_type(2, version).__module__)
    fields = {"replica_id": -1, "isolation_level": 0, "topics": (module.ListOffsetsTopic(
        name=topic, partitions=(module.ListOffsetsPartition(
            partition_index=0, timestamp=timestamp),)),)}
    if version >= 10:
        fields["timeout"] = datetime.timedelta(seconds=5)
    answer = kafka_call(port, 2, version, module.ListOffsetsRequest(**fields),
                        response_type(2, version))
    p = answer.topics[0].partitions[0]
    return int(p.error_code), p.offset, p.timestamp, p.leader_epoch


#: (version, timestamp) -> (error, offset, timestamp, leader epoch) for a 3-record partition from
#: 0 written in epoch 0, as Kafka 4.3.1 answers (e2e/compat/test_admin.py compares them): -4 is
#: the log start offset without tiered storage, -5 / -6 find nothing; a special timestamp older
#: than its version and an unknown negative one are UNSUPPORTED_VERSION; the epoch is the found
#: offset's (KIP-320), -1 with offset -1.
LIST_OFFSETS_SPECIALS = {
    (11, -1): (0, 3, -1, 0), (11, -2): (0, 0, -1, 0), (11, -4): (0, 0, -1, 0),
    (11, -5): (0, -1, -1, -1), (11, -6): (0, -1, -1, -1), (11, -7): (35, -1, -1, -1),
    (10, -6): (35, -1, -1, -1), (8, -4): (0, 0, -1, 0), (7, -4): (35, -1, -1, -1),
    (9, -5): (0, -1, -1, -1), (8, -5): (35, -1, -1, -1), (6, -3): (35, -1, -1, -1)}


def test_list_offsets_v11_answers_the_special_timestamps_as_kafka(broker: BrokerProcess) -> None:
    """KIP-1023's -6 (earliest pending upload, v11) and the other tiered-storage timestamps."""
    topic = new_topic(broker)
    _produce(broker, topic, 3)
    got = {key: _list_offsets(broker.kafka_port, key[0], topic, key[1])
           for key in LIST_OFFSETS_SPECIALS}
    assert got == LIST_OFFSETS_SPECIALS


def test_list_offsets_answers_the_epoch_of_an_offset_found_by_time(broker: BrokerProcess) -> None:
    """A time and max timestamp (-3) answer the leader epoch of the record's batch, as Kafka's
    (issue 14: it was -1, so Java's consumer skipped validating a position reset by time)."""
    topic = new_topic(broker)
    _produce(broker, topic, 3)
    by_time = _list_offsets(broker.kafka_port, 11, topic, 0)
    newest = _list_offsets(broker.kafka_port, 11, topic, -3)
    assert (by_time[0], by_time[1], by_time[3]) == (0, 0, 0)
    assert (newest[0], newest[1] in (0, 1, 2), newest[3]) == (0, True, 0)
    assert _list_offsets(broker.kafka_port, 11, topic, 2**62)[1:] == (-1, -1, -1)


def test_offset_commit_and_fetch_v10_name_topics_by_id(broker: BrokerProcess) -> None:
    """v10 of both: topic ids instead of names; an unknown or zero id is UNKNOWN_TOPIC_ID per
    partition, the answers carry the ids asked (all of a group's commits: their topics' ids)."""
    topic = new_topic(broker)
    topic_id = _topic_id(broker, topic)
    group = f"{topic}-by-id"
    from strom.testing.compat import expected_offsets_by_topic_id, offsets_by_topic_id

    def call(key: int, version: int, body: Any, response: Any) -> Any:
        return kafka_call(broker.kafka_port, key, version, body, response)

    assert offsets_by_topic_id(call, topic_id, group) == \
        expected_offsets_by_topic_id(topic_id, group)
