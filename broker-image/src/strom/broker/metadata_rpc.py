"""Metadata: brokers, topics and partition leadership, for clients to route requests.

Answers from the :class:`~strom.broker.metadata.ClusterMetadata` view: every live broker with its
advertised endpoint and rack, and for each requested topic (all when the list is empty; internal
``__`` topics only with ``include_internal``) its id and partitions with leader, leader epoch,
replicas and ISR. Unknown topics are answered with UNKNOWN_TOPIC_OR_PARTITION per topic (or
created first when auto.create.topics.enable is set, as Kafka does); invalid names with
INVALID_TOPIC_EXCEPTION per topic.

Brokers are the unfenced ones (as in KRaft); a partition without a leader is reported with
LEADER_NOT_AVAILABLE and its replicas on fenced brokers or in offline log directories (as
KRaft's metadata cache does) as ``offline_replicas``.

Not supported: topic ids in requests, authorized operations.
"""

from __future__ import annotations

from collections.abc import Iterable

from strom.broker.core import BrokerCore
from strom.broker.listeners import GRPC_LISTENER
from strom.broker.metadata import BrokerInfo, TopicRecord
from strom.broker.topics import validate_topic_name
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import broker_pb2, common_pb2


async def handle(core: BrokerCore, request: broker_pb2.MetadataRequest, *,
                 listener: str = GRPC_LISTENER, auto_create: bool = True,
                 no_topics: bool = False) -> broker_pb2.MetadataResponse:
    """``listener`` picks whose endpoints are listed (the front the request came in on);
    ``auto_create=False`` is a client's ``allow_auto_topic_creation=false``; ``no_topics``
    asks for brokers only (Kafka's empty topic list; gRPC's empty list means all)."""
    metadata = core.metadata
    response = broker_pb2.MetadataResponse(cluster_id=metadata.cluster_id,
                                           controller_id=metadata.controller_id)
    registered = metadata.live_brokers(listener)
    brokers = [b for b in registered if b.host]
    response.brokers.extend(broker_endpoints(core, brokers))
    live = {b.broker_id for b in registered}
    if no_topics:
        return response
    if request.topics:
        for name in request.topics:
            try:
                validate_topic_name(name)
                record = metadata.topic(name)
                if record is None and auto_create:
                    record = await core.topics.auto_create(name)
                if record is None:
                    raise StromError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"topic {name!r} does not exist")
            except StromError as err:
                response.topics.add(name=name, error_code=int(err.code),
                                    error_message=err.message)
                continue
            _add_topic(core, response, record, live)
    else:
        for record in sorted(metadata.topics().values(), key=lambda t: t.name):
            if record.internal and not request.include_internal:
                continue
            _add_topic(core, response, record, live)
    return response


def broker_endpoints(core: BrokerCore, brokers: Iterable[BrokerInfo] | None = None
                     ) -> list[common_pb2.BrokerEndpoint]:
    """Endpoints of ``brokers`` (default: the live ones)."""
    return [common_pb2.BrokerEndpoint(broker_id=b.broker_id, host=b.host, port=b.port,
                                      rack=b.rack, offline_log_dirs=b.offline_log_dirs)
            for b in (core.metadata.live_brokers() if brokers is None else brokers)]


def _add_topic(core: BrokerCore, response: broker_pb2.MetadataResponse,
               record: TopicRecord, live: set[int]) -> None:
    """The topic's answer, built once per image offset (and set of live brokers): a
    10,000-partition topic took ~30 ms to build in Python, and clients ask for the same one
    again and again (issue 21); copying the built message is done in C."""
    answers = core.metadata.answers()
    key = ("metadata", record.name, tuple(sorted(live)))
    built = answers.get(key)
    if not isinstance(built, broker_pb2.TopicMetadata):
        built = answers[key] = _topic_answer(core, record, live)
    response.topics.append(built)


def _topic_answer(core: BrokerCore, record: TopicRecord, live: set[int]
                  ) -> broker_pb2.TopicMetadata:
    topic = broker_pb2.TopicMetadata(name=record.name, internal=record.internal,
                                     topic_id=record.topic_id)
    for partition in range(record.partitions):
        state = core.metadata.partition_state(record.name, partition)
        if state is None:
            topic.partitions.add(partition=partition, leader=-1, leader_epoch=-1,
                                 error_code=int(ErrorCode.LEADER_NOT_AVAILABLE))
            continue
        offline = [r for r in state.replicas if r not in live or r in state.offline]
        error = ErrorCode.LEADER_NOT_AVAILABLE if state.leader < 0 else ErrorCode.NONE
        topic.partitions.add(partition=partition, leader=state.leader,
                             leader_epoch=state.leader_epoch, replicas=state.replicas,
                             isr=state.isr, offline_replicas=offline, error_code=int(error))
    return topic
