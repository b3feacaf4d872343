"""Admin operations and their mistakes, compared between Apache Kafka and Strom.

The same confluent-kafka AdminClient calls go to both servers; what is compared is what a
client can see: the error code of each refused request (unknown topic, bad config, replication
factor above the broker count, bad partition counts, bad names, a topic that exists), the
topics' descriptions, the values DescribeConfigs returns for the topic configs Strom supports,
and the ApiVersions ranges of every API both serve.
"""

from __future__ import annotations

import io
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer

from strom.testing.compat import wait_for_led_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

#: Topic configs whose defaults both servers must describe alike (the rest differ on purpose:
#: see docs/kafka-protocol.md and test_topic_config_defaults).
SAME_DEFAULTS = ("cleanup.policy", "retention.ms", "retention.bytes", "delete.retention.ms",
                 "min.compaction.lag.ms", "max.compaction.lag.ms", "message.timestamp.type",
                 "min.insync.replicas", "unclean.leader.election.enable", "flush.messages",
                 "flush.ms", "index.interval.bytes", "segment.ms",
                 "message.timestamp.before.max.ms", "message.timestamp.after.max.ms",
                 "segment.bytes", "max.message.bytes", "segment.index.bytes")


def admin(bootstrap: str) -> Any:
    return AdminClient({"bootstrap.servers": bootstrap})


def outcome(future: Any, timeout: float = 30) -> str:
    """"ok" or the Kafka error name a request's future ends with."""
    try:
        future.result(timeout)
    except KafkaException as err:
        return str(err.args[0].name())
    return "ok"


def wait_for_topic(client: Any, topic: str, partitions: int) -> None:
    wait_for_led_topic(client, topic, partitions, 30,
                       f"{topic}: not ready with {partitions} partitions after 30 s")


def on_both(pair: Any, scenario: Callable[[Any], Any]) -> tuple[Any, Any]:
    """Run ``scenario(admin client)`` against Kafka, then Strom."""
    kafka = scenario(admin(pair.kafka.bootstrap))
    strom = scenario(admin(pair.strom.bootstrap))
    return kafka, strom


def test_create_topic_mistakes_get_kafkas_error_codes(pair: Any,
                                                      name: Callable[[str], str]) -> None:
    taken = name("taken")
    cases = {
        "replication factor above the broker count": NewTopic(name("rf"), 1, 3),
        "zero partitions": NewTopic(name("zero"), 0, 1),
        "a name with a slash": NewTopic("bad/name", 1, 1),
        "a name of 250 characters": NewTopic("x" * 250, 1, 1),
        "a name that is '..'": NewTopic("..", 1, 1),
        "an unknown config": NewTopic(name("cfg"), 1, 1, config={"no.such.config": "1"}),
        "a config value that does not parse": NewTopic(name("cfg"), 1, 1,
                                                       config={"retention.ms": "soon"}),
        "a cleanup policy that does not exist": NewTopic(name("cfg"), 1, 1,
                                                         config={"cleanup.policy": "never"}),
        "an existing topic": NewTopic(taken, 1, 1),
    }

    def scenario(client: Any) -> dict[str, str]:
        assert outcome(client.create_topics([NewTopic(taken, 1, 1)])[taken]) == "ok"
        wait_for_topic(client, taken, 1)
        got = {}
        for what, new in cases.items():
            got[what] = outcome(client.create_topics([new])[new.topic])
        return got

    kafka, strom = on_both(pair, scenario)
    assert strom == kafka
    assert kafka["an existing topic"] == "TOPIC_ALREADY_EXISTS"
    assert kafka["replication factor above the broker count"] == "INVALID_REPLICATION_FACTOR"


def test_validate_only_creates_nothing(pair: Any, name: Callable[[str], str]) -> None:
    topic = name("dry")

    def scenario(client: Any) -> tuple[str, bool]:
        result = outcome(client.create_topics([NewTopic(topic, 2, 1)],
                                              validate_only=True)[topic])
        return result, topic in client.list_topics(timeout=10).topics

    kafka, strom = on_both(pair, scenario)
    assert strom == kafka == ("ok", False)


def test_delete_and_partition_mistakes(pair: Any, name: Callable[[str], str]) -> None:
    topic = name("parts")
    missing = name("missing")

    def scenario(client: Any) -> dict[str, Any]:
        got: dict[str, Any] = {}
        got["delete unknown"] = outcome(client.delete_topics([missing])[missing])
        got["grow unknown"] = outcome(client.create_partitions(
            [NewPartitions(missing, 3)])[missing])
        assert outcome(client.create_topics([NewTopic(topic, 2, 1)])[topic]) == "ok"
        wait_for_topic(client, topic, 2)
        got["shrink"] = outcome(client.create_partitions([NewPartitions(topic, 1)])[topic])
        got["same count"] = outcome(client.create_partitions([NewPartitions(topic, 2)])[topic])
        got["grow"] = outcome(client.create_partitions([NewPartitions(topic, 5)])[topic])
        wait_for_topic(client, topic, 5)
        described = client.list_topics(topic, timeout=10).topics[topic]
        got["partitions"] = sorted(described.partitions)
        got["replicas"] = [len(p.replicas) for p in described.partitions.values()]
        got["delete"] = outcome(client.delete_topics([topic])[topic])
        deadline = time.monotonic() + 30
        while topic in client.list_topics(timeout=10).topics and time.monotonic() < deadline:
            time.sleep(0.2)
        got["listed after delete"] = topic in client.list_topics(timeout=10).topics
        got["delete twice"] = outcome(client.delete_topics([topic])[topic])
        return got

    kafka, strom = on_both(pair, scenario)
    assert strom == kafka
    assert kafka["delete unknown"] == "UNKNOWN_TOPIC_OR_PART"
    assert kafka["shrink"] == "INVALID_PARTITIONS"


def described(client: Any, topic: str) -> dict[str, str | None]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = client.describe_configs([resource])[resource].result(30)
    return {k: e.value for k, e in entries.items()}


def test_topic_configs_described_altered_and_refused(pair: Any,
                                                     name: Callable[[str], str]) -> None:
    topic = name("cfg")

    def scenario(client: Any) -> dict[str, Any]:
        got: dict[str, Any] = {}
        create = NewTopic(topic, 1, 1, config={"retention.ms": "3600000",
                                               "cleanup.policy": "compact,delete"})
        assert outcome(client.create_topics([create])[topic]) == "ok"
        wait_for_topic(client, topic, 1)
        values = described(client, topic)
        got["created"] = {k: values[k] for k in ("retention.ms", "cleanup.policy")}
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", "60000",
                        incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", None,
                        incremental_operation=AlterConfigOpType.DELETE)])
        got["alter"] = outcome(client.incremental_alter_configs([resource])[resource])
        values = described(client, topic)
        got["altered"] = {k: values[k] for k in ("retention.ms", "cleanup.policy")}
        bad = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
        got["alter bad value"] = outcome(client.incremental_alter_configs([bad])[bad])
        unknown = ConfigResource(ConfigResource.Type.TOPIC, name("missing"),
                                 incremental_configs=[ConfigEntry(
                                     "retention.ms", "1",
                                     incremental_operation=AlterConfigOpType.SET)])
        got["alter unknown topic"] = outcome(
            client.incremental_alter_configs([unknown])[unknown])
        missing = ConfigResource(ConfigResource.Type.TOPIC, name("missing"))
        got["describe unknown topic"] = outcome(client.describe_configs([missing])[missing])
        return got

    kafka, strom = on_both(pair, scenario)
    assert strom == kafka
    assert kafka["altered"] == {"retention.ms": "60000", "cleanup.policy": "delete"}
    assert kafka["alter bad value"] == "INVALID_CONFIG"


def test_topic_config_defaults(pair: Any, name: Callable[[str], str]) -> None:
    """The defaults a new topic describes. Every key Strom supports is described by both; the
    values must match except where docs/kafka-protocol.md says why they differ."""
    topic = name("defaults")

    def scenario(client: Any) -> dict[str, str | None]:
        assert outcome(client.create_topics([NewTopic(topic, 1, 1)])[topic]) == "ok"
        wait_for_topic(client, topic, 1)
        return described(client, topic)

    kafka, strom = on_both(pair, scenario)
    assert set(SAME_DEFAULTS) <= set(strom)
    diffs = {k: (kafka.get(k), strom.get(k)) for k in SAME_DEFAULTS if kafka.get(k) != strom[k]}
    assert diffs == {}


def raw_call(bootstrap: str, key: int, version: int, body: Any, response_type: Any,
             header_bytes: int = 5) -> Any:
    """One request over a raw connection to the first bootstrap address; the answer read by
    kio after its header (4 bytes for ApiVersions' v0 header, else 5: flexible)."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    buffer = io.BytesIO()
    entity_writer(RequestHeader)(buffer, RequestHeader(
        request_api_key=key, request_api_version=version, correlation_id=7, client_id="compat"))
    entity_writer(type(body))(buffer, body)
    data = buffer.getvalue()
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(struct.pack(">i", len(data)) + data)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        frame = s.recv(size, socket.MSG_WAITALL)
    assert struct.unpack(">i", frame[:4])[0] == 7
    return entity_reader(response_type)(frame, header_bytes)[0]


def api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    """ApiVersions v3 over a raw connection: {api key: (min, max)}."""
    response = raw_call(bootstrap, 18, 3, ApiVersionsRequest(
        client_software_name="strom-compat", client_software_version="1"),
        ApiVersionsResponse, header_bytes=4)
    assert response.error_code == 0
    return {int(k.api_key): (int(k.min_version), int(k.max_version))
            for k in response.api_keys}


#: Where Kafka 4.3.1 advertises more than Strom, as written in docs/kafka-protocol.md: nothing
#: since issue 14's last 7 APIs (both advertise Produce 0-13 and refuse v0-2, KAFKA-18659).
KAFKA_SERVES_MORE: dict[int, tuple[tuple[int, int], tuple[int, int]]] = {}


def test_api_versions_against_kafkas(pair: Any) -> None:
    """Every API Strom serves, Kafka serves; each range is Kafka's, but for the newer versions
    written down above; every pair of ranges overlaps, so a Kafka 4.x client finds a version."""
    kafka = api_versions(pair.kafka.bootstrap)
    strom = api_versions(pair.strom.bootstrap)
    assert not set(strom) - set(kafka)  # nothing Kafka itself does not serve
    different = {k: (kafka[k], strom[k]) for k in strom if strom[k] != kafka[k]}
    assert different == KAFKA_SERVES_MORE
    assert all(max(kafka[k][0], strom[k][0]) <= min(kafka[k][1], strom[k][1]) for k in strom)
    assert {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18, 19, 20, 22, 32} <= set(strom)


def test_describe_groups_v6_answers_as_kafka(pair: Any, name: Callable[[str], str]) -> None:
    """KIP-1043: DescribeGroups v6 of an unknown group is GROUP_ID_NOT_FOUND with a message
    (still Dead); a group with only committed offsets is Empty. Same answers on both."""
    from confluent_kafka import Consumer, TopicPartition
    from kio.schema.describe_groups.v6 import request as dg_req
    from kio.schema.describe_groups.v6 import response as dg_resp

    topic, group, unknown = name("dg"), name("dg-offsets"), name("dg-none")

    def scenario(server: Any) -> list[tuple[Any, ...]]:
        client = admin(server.bootstrap)
        client.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        wait_for_topic(client, topic, 1)
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group})
        try:  # Kafka makes __consumer_offsets on the first use: NOT_COORDINATOR meanwhile
            deadline = time.monotonic() + 60
            while True:
                try:
                    consumer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        finally:
            consumer.close()
        answer = raw_call(server.bootstrap, 15, 6, dg_req.DescribeGroupsRequest(
            groups=(unknown, group), include_authorized_operations=False),
            dg_resp.DescribeGroupsResponse)
        return sorted((g.group_id, int(g.error_code), g.error_message, g.group_state,
                       g.protocol_type, g.members) for g in answer.groups)

    kafka, strom = (scenario(server) for server in pair.both())
    assert strom == kafka == sorted([
        (unknown, 69, f"Group {unknown} not found.", "Dead", "", ()),
        (group, 0, None, "Empty", "", ())])


def test_produce_v0_to_v2_close_the_connection_as_kafka(pair: Any) -> None:
    """KAFKA-18659: both advertise Produce from v0 and close a v0-2 request's connection
    without an answer (a v3 request with the same empty body is answered by both)."""

    def outcome(bootstrap: str, version: int) -> bytes:
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        txn = b"" if version < 3 else struct.pack(">h", -1)  # v3: a null transactional id
        frame = struct.pack(">hhih5s", 0, version, 7, 5, b"probe") + txn + struct.pack(
            ">hii", 1, 1000, 0)  # acks 1, timeout 1000 ms, no topics
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(struct.pack(">i", len(frame)) + frame)
            return s.recv(4, socket.MSG_WAITALL)

    for server in pair.both():
        assert [outcome(server.bootstrap, v) for v in (0, 1, 2)] == [b"", b"", b""], server
        assert len(outcome(server.bootstrap, 3)) == 4, server


def test_list_offsets_special_timestamps_answer_as_kafka(pair: Any,
                                                         name: Callable[[str], str]) -> None:
    """-1 to -6 (KIP-734, KIP-405, KIP-1005, KIP-1023's -6 at v11) at the versions that bring
    them and one older, plus an unknown -7, a time before every record and one after: the same
    (error, offset, timestamp, leader epoch) on both (Kafka without tiered storage: -4 is the
    log start offset, -5 / -6 find nothing; the epoch is the found offset's, KIP-320, here 0 on
    the one-epoch topic). The records carry set timestamps, the same in both runs, one of them
    a tie for the maximum: with producer-stamped times the -3 answer depended on whether two
    records fell in the same millisecond (a flaky 0 vs 1 in CI)."""
    import datetime
    import importlib
    import time

    from confluent_kafka import Producer

    topic = name("lo-special")
    base = int(time.time() * 1000) - 60_000  # recent: inside the default retention
    stamps = (base, base + 2, base + 2, base + 1)  # the maximum first at offset 1, tied at 2
    asked = [(11, -1), (11, -2), (11, -4), (11, -5), (11, -6), (11, -7), (10, -6), (8, -4),
             (7, -4), (9, -5), (8, -5), (7, -3), (6, -3), (11, -3), (11, 0), (11, 2**62)]

    def scenario(server: Any) -> list[tuple[int, int, int, int]]:
        client = admin(server.bootstrap)
        client.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        wait_for_topic(client, topic, 1)
        producer = Producer({"bootstrap.servers": server.bootstrap})
        for i, stamp in enumerate(stamps):
            producer.produce(topic, b"%d" % i, partition=0, timestamp=stamp)
        assert producer.flush(30) == 0
        out = []
        for version, timestamp in asked:
            req = importlib.import_module(f"kio.schema.list_offsets.v{version}.request")
            resp = importlib.import_module(f"kio.schema.list_offsets.v{version}.response")
            fields: dict[str, Any] = {"replica_id": -1, "isolation_level": 0, "topics": (
                req.ListOffsetsTopic(name=topic, partitions=(req.ListOffsetsPartition(
                    partition_index=0, timestamp=timestamp),)),)}
            if version >= 10:
                fields["timeout"] = datetime.timedelta(seconds=5)
            answer = raw_call(server.bootstrap, 2, version, req.ListOffsetsRequest(**fields),
                              resp.ListOffsetsResponse)
            p = answer.topics[0].partitions[0]
            out.append((int(p.error_code), p.offset, p.timestamp, p.leader_epoch))
        return out

    kafka, strom = (scenario(server) for server in pair.both())
    assert strom == kafka
    assert kafka[4] == (0, -1, -1, -1)  # -6 at v11: nothing pending upload
    assert kafka[1] == (0, 0, -1, 0)  # earliest: the log start offset in epoch 0
    assert kafka[13] == (0, 1, base + 2, 0)  # max timestamp: the first record that holds it


def test_alter_partition_reassignments_v1_answers_as_kafka(pair: Any,
                                                            name: Callable[[str], str]) -> None:
    """v1 (KIP-860) echoes ``allow_replication_factor_change``; with it false, a target of the
    same size is accepted, a cancel with nothing moving and an unknown topic fail as in v0
    (a one-node pair cannot change a replication factor: tests/kafka/test_cluster_clients.py
    checks the refusal on three Strom brokers, with the code and message Kafka's tests show)."""
    from kio.schema.alter_partition_reassignments.v1 import request as apr_req
    from kio.schema.alter_partition_reassignments.v1 import response as apr_resp

    topic = name("apr1")

    def scenario(server: Any) -> list[tuple[Any, ...]]:
        client = admin(server.bootstrap)
        client.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        wait_for_topic(client, topic, 1)
        (node,) = client.describe_cluster().result(30).nodes
        out = []
        for allow, topic_name, replicas in ((False, topic, (node.id,)), (False, topic, None),
                                            (True, topic, None), (False, "nosuch-apr", (0,))):
            answer = raw_call(server.bootstrap, 45, 1, apr_req.AlterPartitionReassignmentsRequest(
                allow_replication_factor_change=allow, topics=(apr_req.ReassignableTopic(
                    name=topic_name, partitions=(apr_req.ReassignablePartition(
                        partition_index=0, replicas=replicas),)),)),
                apr_resp.AlterPartitionReassignmentsResponse)
            out.append((answer.allow_replication_factor_change, int(answer.error_code),
                        [int(p.error_code) for t in answer.responses for p in t.partitions]))
        return out

    kafka, strom = (scenario(server) for server in pair.both())
    assert strom == kafka == [(False, 0, [0]), (False, 0, [85]), (True, 0, [85]),
                              (False, 0, [3])]


def test_offset_commit_and_fetch_v10_by_topic_id_answer_as_kafka(
        pair: Any, name: Callable[[str], str]) -> None:
    """v10 of OffsetCommit and OffsetFetch name topics by id: known, unknown and zero ids,
    a partition the topic lacks, the group's offsets by id and all of them - the same answers
    (each server's own topic id) from Kafka 4.3.1 and Strom."""
    from kio.schema.metadata.v12 import request as md_req
    from kio.schema.metadata.v12 import response as md_resp

    from strom.testing.compat import expected_offsets_by_topic_id, offsets_by_topic_id

    topic, group = name("by-id"), name("by-id-group")
    for server in pair.both():
        client = admin(server.bootstrap)
        client.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        wait_for_topic(client, topic, 1)
        topic_id = raw_call(server.bootstrap, 3, 12, md_req.MetadataRequest(
            topics=(md_req.MetadataRequestTopic(topic_id=None, name=topic),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False),
            md_resp.MetadataResponse).topics[0].topic_id

        def call(key: int, version: int, body: Any, response: Any,
                 bootstrap: str = server.bootstrap) -> Any:
            return raw_call(bootstrap, key, version, body, response)

        assert offsets_by_topic_id(call, topic_id, group) == \
            expected_offsets_by_topic_id(topic_id, group), server.name
