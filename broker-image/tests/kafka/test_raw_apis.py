"""APIs no client in the test suite drives directly, exercised with raw kio requests:
OffsetForLeaderEpoch (KIP-320 position validation) and DescribeTopicPartitions paging."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer
from kio.schema.describe_topic_partitions.v0 import request as dtp_req
from kio.schema.describe_topic_partitions.v0 import response as dtp_resp
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
