"""Admin: topics, partitions, configs and the cluster description.

Every call answers per resource (partial success is normal, as in Kafka's admin API); the work is
done by :class:`~strom.broker.topics.TopicManager`, these handlers only translate. The service
table (``strom.broker.service.ADMIN``) runs each of them after a metadata barrier, so a topic
created through another broker a moment ago is known here.

- CreateTopics: Kafka's name rules, partitions and replication factor (-1 = broker default),
  Kafka-named configs, ``validate_only``; at most ``max.partitions.per.request`` partitions per
  topic (INVALID_PARTITIONS) and per request (POLICY_VIOLATION for the topics past it); a name
  given twice in one request fails both entries
  (INVALID_REQUEST), as Kafka does.
- DeleteTopics: closes and deletes the logs; waiting fetches wake and see the topic gone.
- DescribeTopics: partitions with leader, epoch, replicas, ISR; offsets, high watermark and size
  only for the partitions this broker leads (-1 otherwise: the client merges every broker's
  answer); the effective ``min_insync_replicas``; ``configs`` holds only the topic-level
  overrides.
- CreatePartitions: grow only, by at most ``max.partitions.per.request`` (INVALID_PARTITIONS
  otherwise); ``validate_only``.
- DescribeConfigs: TOPIC (every topic config with its source) and BROKER (every static key;
  the name must be this broker's id, or empty).
- AlterConfigs: incremental set/delete of topic configs, validated whole before anything
  changes, applied live to the logs and persisted; ``validate_only``. Broker configs are static
  (INVALID_REQUEST: change the config file and restart).
- DescribeCluster: cluster id, controller, live brokers, fenced brokers, voters, metadata offset.
- AlterPartitionReassignments / ListPartitionReassignments (progress from the leader) /
  ElectLeaders (preferred or unclean): see the functions.

Not supported: timeouts (everything completes before the response), caller-chosen replica
assignments, dynamic broker configs, ACLs.
"""

from __future__ import annotations

import collections

from strom.broker.config_keys import KEYS, TOPIC_DEFAULT_KEYS, format_value
from strom.broker.core import BrokerCore
from strom.broker.metadata_rpc import broker_endpoints
from strom.broker.publisher import THROTTLE_KEY, throttle_of
from strom.controller import decisions
from strom.controller.metadata import AlterConfigs, ChangePartition, UnregisterBroker
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import admin_pb2
from strom.storage.config import TOPIC_CONFIG_DEFS, LogConfig, topic_config_entries

SOURCE_DEFAULT = "DEFAULT"
SOURCE_STATIC_BROKER = "STATIC_BROKER_CONFIG"
SOURCE_TOPIC = "DYNAMIC_TOPIC_CONFIG"
#: Kafka's config type names, by the type names of Strom's topic and broker keys.
CONFIG_TYPES = {"int": "INT", "long": "LONG", "list": "LIST", "string": "STRING", "str": "STRING",
                "boolean": "BOOLEAN", "bool": "BOOLEAN", "double": "DOUBLE", "level": "STRING"}
#: The broker key that sets each topic config's default (Kafka's synonym).
BROKER_KEY_OF = {topic_key: broker_key for broker_key, topic_key in TOPIC_DEFAULT_KEYS.items()}
_BUILT_IN = LogConfig()


async def metadata_barrier(core: BrokerCore) -> None:
    """Every admin answer (on either front) reads after this: the metadata this broker applied
    includes everything committed before the request, so a topic created or changed through
    another broker a moment ago is known here (:meth:`ClusterLink.sync`)."""
    await core.link.sync()


def _fill(result: admin_pb2.TopicResult | admin_pb2.TopicDescription
          | admin_pb2.ResourceConfigs | admin_pb2.AlterConfigsResult
          | admin_pb2.PartitionResult | admin_pb2.UnregisterBrokerResponse,
          err: StromError) -> None:
    result.error_code = int(err.code)
    result.error_message = err.message


async def create_topics(core: BrokerCore, request: admin_pb2.CreateTopicsRequest
                        ) -> admin_pb2.CreateTopicsResponse:
    response = admin_pb2.CreateTopicsResponse()
    counts = collections.Counter(t.name for t in request.topics)
    total = 0
    for new in request.topics:
        result = response.results.add(name=new.name)
        try:
            if counts[new.name] > 1:
                raise StromError(ErrorCode.INVALID_REQUEST,
                                 f"topic {new.name!r} appears {counts[new.name]} times in one "
                                 f"request; name each topic once")
            plan = core.topics.plan_topic(new.name, new.num_partitions,
                                          new.replication_factor, dict(new.configs))
            core.topics.check_request_total(total + plan.partitions)
            total += plan.partitions
            if not request.validate_only:
                await core.topics.create(plan)
        except StromError as err:
            _fill(result, err)
    return response


async def delete_topics(core: BrokerCore, request: admin_pb2.DeleteTopicsRequest
                        ) -> admin_pb2.DeleteTopicsResponse:
    response = admin_pb2.DeleteTopicsResponse()
    for name in request.names:
        result = response.results.add(name=name)
        try:
            await core.topics.delete(name)
            core.metrics.forget_topic(name)
        except StromError as err:
            _fill(result, err)
    return response


async def describe_topics(core: BrokerCore, request: admin_pb2.DescribeTopicsRequest
                          ) -> admin_pb2.DescribeTopicsResponse:
    response = admin_pb2.DescribeTopicsResponse()
    if request.names:
        names = list(request.names)
    else:
        names = sorted(n for n, t in core.metadata.topics().items()
                       if request.include_internal or not t.internal)
    live = {b.broker_id for b in core.metadata.live_brokers()}  # once: per partition it was
    for name in names:  # 20,000 scans of the brokers in a DescribeTopics of 10,000 partitions
        desc = response.topics.add(name=name)
        try:
            record = core.topics.topic(name)
        except StromError as err:
            _fill(desc, err)
            continue
        desc.topic_id = record.topic_id
        desc.internal = record.internal
        desc.configs.update(record.configs)
        desc.min_insync_replicas = core.topics.log_config(name).min_insync_replicas
        for partition in range(record.partitions):
            out = desc.partitions.add(partition=partition, leader=-1, leader_epoch=-1,
                                      log_start_offset=-1, log_end_offset=-1,
                                      high_watermark=-1, size_bytes=-1)
            state = core.metadata.partition_state(name, partition)
            if state is not None:
                out.leader = state.leader
                out.leader_epoch = state.leader_epoch
                out.replicas.extend(state.replicas)
                out.isr.extend(state.isr)
                out.offline_replicas.extend(r for r in state.replicas
                                            if r not in live or r in state.offline)
            plog = core.replicas.get(name, partition)
            if plog is not None and core.replicas.is_leader(name, partition):
                out.log_start_offset = plog.log_start_offset
                out.log_end_offset = plog.log_end_offset
                out.high_watermark = plog.high_watermark
                out.size_bytes = plog.size_bytes
    return response


async def create_partitions(core: BrokerCore, request: admin_pb2.CreatePartitionsRequest
                            ) -> admin_pb2.CreatePartitionsResponse:
    response = admin_pb2.CreatePartitionsResponse()
    response.result.name = request.topic
    try:
        if request.validate_only:
            core.topics.check_partitions(request.topic, request.new_total_count)
        else:
            await core.topics.grow(request.topic, request.new_total_count)
    except StromError as err:
        _fill(response.result, err)
    return response


async def describe_configs(core: BrokerCore, request: admin_pb2.DescribeConfigsRequest
                           ) -> admin_pb2.DescribeConfigsResponse:
    response = admin_pb2.DescribeConfigsResponse()
    for resource in request.resources:
        result = response.results.add()
        result.resource.CopyFrom(resource)
        try:
            if resource.type == admin_pb2.TOPIC:
                _topic_configs(core, resource.name, result)
            elif resource.type == admin_pb2.BROKER:
                _broker_configs(core, resource.name, result)
            else:
                raise StromError(ErrorCode.INVALID_REQUEST,
                                 f"resource type {resource.type} is not supported; use TOPIC "
                                 f"or BROKER")
        except StromError as err:
            del result.entries[:]
            _fill(result, err)
    return response


def _topic_configs(core: BrokerCore, name: str, result: admin_pb2.ResourceConfigs) -> None:
    record = core.topics.topic(name)
    config = core.topics.configured_log_config(name)
    broker_set = {TOPIC_DEFAULT_KEYS[k] for k in core.config.explicit if k in TOPIC_DEFAULT_KEYS}
    built_in = dict((k, v) for k, v, _ in topic_config_entries(_BUILT_IN, {}))
    defaults = dict((k, v) for k, v, _ in topic_config_entries(core.config.topic_defaults, {}))
    for key, value, is_default in topic_config_entries(config, record.configs):
        if not is_default:
            source = SOURCE_TOPIC
        elif key in broker_set:
            source = SOURCE_STATIC_BROKER
        else:
            source = SOURCE_DEFAULT
        entry = result.entries.add(name=key, value=value, source=source, is_default=is_default,
                                   read_only=False, documentation=TOPIC_CONFIG_DEFS[key].doc,
                                   type=CONFIG_TYPES.get(TOPIC_CONFIG_DEFS[key].type, ""))
        # Kafka's synonyms: the override, then the broker key as set, then its default
        if not is_default:
            entry.synonyms.add(name=key, value=value, source=SOURCE_TOPIC)
        broker_key = BROKER_KEY_OF.get(key, key)
        if key in broker_set:
            entry.synonyms.add(name=broker_key, value=defaults[key], source=SOURCE_STATIC_BROKER)
        entry.synonyms.add(name=broker_key, value=built_in[key], source=SOURCE_DEFAULT)


def _check_broker(core: BrokerCore, name: str) -> None:
    if name not in ("", str(core.config.broker_id)):
        raise StromError(ErrorCode.INVALID_REQUEST,
                         f"broker {name!r} is not this broker (id {core.config.broker_id}); ask "
                         f"that broker, or use {str(core.config.broker_id)!r}")


def _broker_configs(core: BrokerCore, name: str, result: admin_pb2.ResourceConfigs) -> None:
    _check_broker(core, name)
    for key, value, is_default in core.config.describe():
        entry = result.entries.add(name=key, value=value, is_default=is_default, read_only=True,
                                   source=SOURCE_DEFAULT if is_default else SOURCE_STATIC_BROKER,
                                   documentation=KEYS[key].doc,
                                   type=CONFIG_TYPES.get(KEYS[key].kind, ""))
        if not is_default:
            entry.synonyms.add(name=key, value=value, source=SOURCE_STATIC_BROKER)
        default = KEYS[key].default
        if default is None and key in TOPIC_DEFAULT_KEYS:
            default = getattr(_BUILT_IN, TOPIC_DEFAULT_KEYS[key].replace(".", "_"), "")
        entry.synonyms.add(name=key, value=format_value(default), source=SOURCE_DEFAULT)


async def alter_configs(core: BrokerCore, request: admin_pb2.AlterConfigsRequest
                        ) -> admin_pb2.AlterConfigsResponse:
    response = admin_pb2.AlterConfigsResponse()
    for resource in request.resources:
        result = response.results.add()
        result.resource.CopyFrom(resource.resource)
        try:
            if resource.resource.type == admin_pb2.BROKER:
                _check_broker(core, resource.resource.name)
                raise StromError(ErrorCode.INVALID_REQUEST,
                                 "broker configs are static; change the broker's config file "
                                 "(or STROM_* environment) and restart it")
            if resource.resource.type != admin_pb2.TOPIC:
                raise StromError(ErrorCode.INVALID_REQUEST,
                                 f"resource type {resource.resource.type} is not supported; "
                                 f"use TOPIC")
            name = resource.resource.name
            if request.validate_only:
                core.topics.plan_configs(name, dict(resource.set), list(resource.delete))
            else:
                await core.topics.alter_configs(name, dict(resource.set), list(resource.delete))
        except StromError as err:
            _fill(result, err)
    return response


async def describe_cluster(core: BrokerCore, request: admin_pb2.DescribeClusterRequest
                           ) -> admin_pb2.DescribeClusterResponse:
    metadata = core.metadata
    response = admin_pb2.DescribeClusterResponse(
        cluster_id=metadata.cluster_id, controller_id=metadata.controller_id,
        metadata_offset=metadata.offset, answered_by=core.config.broker_id)
    response.brokers.extend(broker_endpoints(core))
    response.fenced_broker_ids.extend(b.broker_id for b in metadata.brokers() if b.fenced)
    response.voters.extend(sorted(core.link.voters))
    response.offline_log_dirs.extend(f"{d}: {reason}"
                                     for d, reason in sorted(core.logs.offline_dirs.items()))
    return response


# -- reassignments and elections ------------------------------------------------------------------


async def alter_partition_reassignments(
        core: BrokerCore, request: admin_pb2.AlterPartitionReassignmentsRequest
) -> admin_pb2.AlterPartitionReassignmentsResponse:
    """Start or cancel reassignments (KIP-455); the active controller completes them.

    ``keep_replication_factor`` (KIP-860; the Kafka front's v1 ``allow_replication_factor_
    change`` false) fails a target that changes its partition's replica count
    (INVALID_REPLICATION_FACTOR); unset allows it, as Kafka's default does.

    Each target is validated against this broker's image and proposed as one epoch-checked
    partition change; the throttle is ``replication.throttled.rate``, one value every broker
    applies to itself, as leader and as follower (Kafka's per-broker leader and follower
    throttled rates set to the same value by ``kafka-reassign-partitions --throttle``).
    """
    response = admin_pb2.AlterPartitionReassignmentsResponse()
    changes: list[tuple[admin_pb2.PartitionResult, ChangePartition]] = []
    seen: set[tuple[str, int]] = set()
    for target in request.partitions:
        result = response.results.add(topic=target.topic, partition=target.partition)
        try:
            key = (target.topic, target.partition)
            if key in seen:
                raise StromError(ErrorCode.INVALID_REQUEST,
                                 f"{target.topic}-{target.partition} appears twice; name each "
                                 f"partition once")
            seen.add(key)
            image = core.link.image
            if target.cancel:
                change = decisions.reassignment_cancel(image, target.topic, target.partition)
            else:
                if not target.replicas:
                    raise StromError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                     f"{target.topic}-{target.partition}: replicas is empty; give "
                                     f"the target broker ids, or set cancel")
                change = decisions.reassignment_start(image, target.topic, target.partition,
                                                      list(target.replicas),
                                                      not request.keep_replication_factor)
            changes.append((result, change))
        except StromError as err:
            _fill(result, err)
    if request.validate_only:
        return response
    if request.throttle_bytes_per_sec:
        rate = request.throttle_bytes_per_sec
        throttle = (AlterConfigs("broker", "", delete=(THROTTLE_KEY,)) if rate < 0 else
                    AlterConfigs("broker", "", set=((THROTTLE_KEY, str(rate)),)))
        await core.link.propose(throttle)
    for result, change in changes:
        try:
            await core.link.propose(change)
        except StromError as err:
            _fill(result, err)
    return response


async def list_partition_reassignments(
        core: BrokerCore, request: admin_pb2.ListPartitionReassignmentsRequest
) -> admin_pb2.ListPartitionReassignmentsResponse:
    image = core.link.image
    wanted = set(request.topics)
    response = admin_pb2.ListPartitionReassignmentsResponse(
        throttle_bytes_per_sec=throttle_of(image))
    me = core.config.broker_id
    for name in sorted(image.topics):
        if wanted and name not in wanted:
            continue
        for index, p in sorted(image.topics[name].partitions.items()):
            if not p.adding_replicas and not p.removing_replicas:
                continue
            out = response.reassignments.add(
                topic=name, partition=index, replicas=p.replicas, adding_replicas=p.adding_replicas,
                removing_replicas=p.removing_replicas, isr=p.isr, leader=p.leader,
                leader_log_end_offset=-1, answered_by=me)
            progress = core.replicas.replica_progress(name, index) if p.leader == me else None
            if progress is not None:
                out.leader_log_end_offset = progress.get(me, -1)
                for broker in p.replicas:
                    out.progress.add(broker_id=broker, log_end_offset=progress.get(broker, -1),
                                     in_sync=broker in p.isr)
    return response


async def elect_leaders(core: BrokerCore, request: admin_pb2.ElectLeadersRequest
                        ) -> admin_pb2.ElectLeadersResponse:
    if request.election_type not in (0, 1):
        raise StromError(ErrorCode.INVALID_REQUEST,
                         f"election_type={request.election_type} is invalid; use 0 (preferred) "
                         f"or 1 (unclean)")
    image = core.link.image
    if request.partitions:
        targets = [(tp.topic, tp.partition) for tp in request.partitions]
    else:
        targets = [(n, i) for n in sorted(image.topics) for i in sorted(image.topics[n].partitions)]
    response = admin_pb2.ElectLeadersResponse()
    explicit = bool(request.partitions)
    for topic, partition in targets:
        try:
            if request.election_type == 0:
                change = decisions.preferred_election(image, topic, partition)
            else:
                change = decisions.unclean_election(image, topic, partition)
            await core.link.propose(change)
        except StromError as err:
            if explicit or err.code != ErrorCode.ELECTION_NOT_NEEDED:
                result = response.results.add(topic=topic, partition=partition)
                _fill(result, err)
            continue
        response.results.add(topic=topic, partition=partition)
    return response


async def unregister_broker(core: BrokerCore, request: admin_pb2.UnregisterBrokerRequest
                            ) -> admin_pb2.UnregisterBrokerResponse:
    """Forget a broker removed for good (the metadata log refuses a live or hosting one)."""
    response = admin_pb2.UnregisterBrokerResponse()
    try:
        if request.broker_id not in core.link.image.brokers:
            raise StromError(ErrorCode.BROKER_NOT_AVAILABLE,
                             f"broker {request.broker_id} is not registered")
        await core.link.propose(UnregisterBroker(request.broker_id))
    except StromError as err:
        _fill(response, err)
    return response
