"""DescribeProducers: the idempotent producers a partition keeps state for, on its leader
(Kafka's DescribeProducers, KIP-664; what ``kafka-transactions describe-producers`` shows).

Each entry is the state the leader checks sequences against: producer id, epoch, the last
sequence appended and its batch's timestamp. Producers whose state expired
(``producer.id.expiration.ms``) are not listed, as in Kafka.

Not as Kafka: no transactions, so ``coordinator_epoch`` and ``current_txn_start_offset`` are
always -1; the request's ``broker_id`` targeting of a follower is not served (leaders only).
"""

from __future__ import annotations

from strom.broker.core import BrokerCore
from strom.broker.requests import require_topic_names
from strom.protocol.errors import StromError
from strom.protocol.v1 import broker_pb2


def active_producers(core: BrokerCore, topic: str, partition: int
                     ) -> list[broker_pb2.ActiveProducer]:
    plog, _ = core.replicas.leader_log(topic, partition)
    return [broker_pb2.ActiveProducer(producer_id=e.producer_id, producer_epoch=e.epoch,
                                      last_sequence=e.last_seq, last_timestamp=e.last_timestamp)
            for _, e in sorted(plog.producer_state.producers.items())]


async def handle(core: BrokerCore, request: broker_pb2.DescribeProducersRequest
                 ) -> broker_pb2.DescribeProducersResponse:
    require_topic_names(tp.topic for tp in request.partitions)
    response = broker_pb2.DescribeProducersResponse()
    for tp in request.partitions:
        out = response.partitions.add(topic=tp.topic, partition=tp.partition)
        try:
            out.producers.extend(active_producers(core, tp.topic, tp.partition))
        except StromError as err:
            out.error_code = int(err.code)
            out.error_message = err.message
            core.metrics.partition_errors.labels("DescribeProducers", err.code.name).inc()
    return response
