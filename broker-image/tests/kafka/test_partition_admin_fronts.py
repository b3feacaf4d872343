"""DeleteRecords, DescribeLogDirs, DescribeProducers and OffsetDelete exist on both fronts, one
implementation underneath: what the gRPC services do is what Kafka clients then see, and the
other way round (the Kafka side with Apache Kafka's own tools is in ``test_java_tools``)."""

from __future__ import annotations

import grpc
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import broker_pb2, common_pb2, group_pb2
from strom.testing import BrokerProcess
from strom.transport.v1 import broker_pb2_grpc, group_pb2_grpc

from .conftest import new_topic

pytestmark = pytest.mark.integration


def test_grpc_partition_admin_is_what_kafka_clients_see(broker: BrokerProcess) -> None:
    topic = new_topic(broker, partitions=2)
    producer = Producer({"bootstrap.servers": broker.kafka_bootstrap, "enable.idempotence": True})
    for i in range(20):
        producer.produce(topic, value=b"%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    del producer
    with grpc.insecure_channel(broker.bootstrap) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
        deleted = stub.DeleteRecords(broker_pb2.DeleteRecordsRequest(partitions=[
            broker_pb2.DeleteRecordsPartition(topic=topic, partition=0, offset=3),
            broker_pb2.DeleteRecordsPartition(topic=topic, partition=1, offset=99),
            broker_pb2.DeleteRecordsPartition(topic=topic, partition=7, offset=1)]))
        assert [(r.low_watermark, r.error_code) for r in deleted.partitions] == [
            (3, 0), (-1, ErrorCode.OFFSET_OUT_OF_RANGE), (-1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        dirs = stub.DescribeLogDirs(broker_pb2.DescribeLogDirsRequest(partitions=[
            common_pb2.TopicPartition(topic=topic, partition=1)]))
        (d,) = dirs.dirs
        assert [(r.topic, r.partition) for r in d.replicas] == [(topic, 1)]
        assert d.replicas[0].size_bytes > 0 and d.total_bytes >= d.usable_bytes > 0
        producers = stub.DescribeProducers(broker_pb2.DescribeProducersRequest(partitions=[
            common_pb2.TopicPartition(topic=topic, partition=0)]))
        (p,) = producers.partitions
        assert [(x.producer_epoch, x.last_sequence) for x in p.producers] == [(0, 9)]

        group = f"{topic}-g"
        consumer = Consumer({"bootstrap.servers": broker.kafka_bootstrap, "group.id": group})
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            assert (low, high) == (3, 10)  # a Kafka client sees the gRPC DeleteRecords
            consumer.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 6)],
                            asynchronous=False)
        finally:
            consumer.close()
        groups = group_pb2_grpc.GroupStub(channel)  # type: ignore[no-untyped-call]
        answer = groups.OffsetDelete(group_pb2.OffsetDeleteRequest(group_id=group, partitions=[
            common_pb2.TopicPartition(topic=topic, partition=0)]))
        assert answer.error_code == 0 and [e.error_code for e in answer.partitions] == [0]
        missing = groups.OffsetDelete(group_pb2.OffsetDeleteRequest(group_id=f"{group}-none"))
        assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    check = Consumer({"bootstrap.servers": broker.kafka_bootstrap, "group.id": group})
    try:
        committed = check.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)],
                                    timeout=10)
        assert [tp.offset for tp in committed] == [-1001, 6]  # -1001: no committed offset
    finally:
        check.close()
