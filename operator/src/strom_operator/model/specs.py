# ruff: noqa: RUF009  (spec_field() is a dataclasses.field factory, not a shared default)
"""The typed specs of the three Strom custom resources (group ``strom.dev``, version ``v1alpha1``).

Each spec is a frozen dataclass; field metadata (see :mod:`strom_operator.model.fields`) carries the
schema facts, so :func:`parse_cluster` & co. and ``crdgen`` read the same definitions.  Rules that
span fields or compare old and new objects are :class:`~strom_operator.model.fields.Rule` objects:
a CEL expression for the API server and a Python twin the operator evaluates itself.

Keys in broker ``config`` that the operator owns (``broker.id``, ``log.dirs``, ...) are refused, and
topic ``config`` keys must be ones Strom knows, so a typo is caught at apply time and not silently
ignored by the broker.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from strom.broker.config_keys import KEYS as BROKER_KEYS
from strom.broker.config_keys import ConfigError, check_value
from strom.protocol.errors import StromError
from strom.storage.config import (
    TOPIC_CONFIG_DEFS,
    UNSUPPORTED_MESSAGE,
    UNSUPPORTED_TOPIC_CONFIGS,
    unknown_topic_config_message,
)
from strom_operator.model.errors import FieldError, SpecError
from strom_operator.model.fields import (
    ConfigMap,
    Rule,
    check_rules,
    config_value_str,
    parse,
    parse_collect,
    spec_field,
)
from strom_operator.model.quantity import QUANTITY_PATTERN, parse_quantity

GROUP = "strom.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
TOPIC_NAME = r"^[a-zA-Z0-9._-]{1,249}$"

#: Broker config keys the operator sets itself (or Kafka's names for them); users may not set them
#: in spec.config.
OPERATOR_OWNED_BROKER_KEYS = (
    "broker.id",
    "node.id",
    "host",
    "port",
    "advertised.host",
    "cluster.id",
    "log.dirs",
    "log.level",
    "broker.rack",
    "listeners",
    "advertised.listeners",
    "process.roles",
    "controller.quorum.voters",
    "metrics.port",
)

#: Broker config keys users may set in ``spec.config``: every key the broker knows
#: (``strom.broker.config_keys``) but those the operator owns.
USER_BROKER_KEYS = frozenset(BROKER_KEYS) - frozenset(OPERATOR_OWNED_BROKER_KEYS)

_KIND = {"int": int, "long": int, "double": float, "list": str, "string": str, "boolean": bool}
#: Topic-level config keys Strom implements (Kafka's names; the broker's own table in
#: ``strom.storage.config``), with the kind of value each takes.
TOPIC_CONFIG_KEYS: dict[str, type] = {
    name: _KIND[d.type] for name, d in sorted(TOPIC_CONFIG_DEFS.items())
}


def _cel_list(keys: Sequence[str]) -> str:
    return str(sorted(keys)).replace("'", '"')


def _quantity_not_smaller(new: str, old: str) -> bool:
    try:
        return parse_quantity(new) >= parse_quantity(old)
    except ValueError:
        return True  # the pattern check reports malformed sizes


# ----------------------------------------------------------------------------------------------
# StromCluster
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Brokers:
    """The broker StatefulSet. ``replicas`` is the scale subresource's spec path."""

    replicas: int = spec_field(
        default=3,
        minimum=1,
        maximum=100,
        description="Number of brokers (kubectl scale works on this field).",
        fix="use between 1 and 100 brokers",
    )


@dataclasses.dataclass(frozen=True)
class Controllers:
    """The KRaft-style controller quorum: the first ``replicas`` brokers are voters."""

    replicas: Literal[1, 3, 5] = spec_field(
        default=1,
        description="Number of controller voters (1, 3 or 5); they are the brokers with the "
        "lowest ids (combined mode).",
    )


STORAGE_NO_SHRINK = Rule(
    name="storage-size-no-shrink",
    cel="quantity(self.size).compareTo(quantity(oldSelf.size)) >= 0",
    message="storage.size may only grow (volumes can not be shrunk); restore the previous size",
    check=lambda new, old: _quantity_not_smaller(new.size, old.size),
    reason="FieldValueForbidden",
)
STORAGE_CLASS_IMMUTABLE = Rule(
    name="storage-class-immutable",
    cel="!has(oldSelf.storageClassName) || (has(self.storageClassName) && "
    "self.storageClassName == oldSelf.storageClassName)",
    message="storage.storageClassName can not be changed after creation",
    check=lambda new, old: (
        old.storage_class_name is None or new.storage_class_name == old.storage_class_name
    ),
    reason="FieldValueForbidden",
)


@dataclasses.dataclass(frozen=True)
class Storage:
    """Per-broker persistent volume (a volumeClaimTemplate)."""

    size: str = spec_field(
        pattern=QUANTITY_PATTERN,
        description="Volume size per broker, e.g. 10Gi. May grow (when the StorageClass allows "
        "volume expansion), never shrink.",
        fix="give a Kubernetes quantity such as 10Gi",
    )
    storage_class_name: str | None = spec_field(
        default=None, description="StorageClass of the volumes; the cluster default if unset."
    )
    delete_claim: bool = spec_field(
        default=False,
        description="Delete the PersistentVolumeClaims when the StromCluster is deleted.",
    )

    __rules__ = (STORAGE_NO_SHRINK, STORAGE_CLASS_IMMUTABLE)


@dataclasses.dataclass(frozen=True)
class ResourceList:
    cpu: str | None = spec_field(
        default=None, pattern=QUANTITY_PATTERN, description="CPU, e.g. 500m."
    )
    memory: str | None = spec_field(
        default=None, pattern=QUANTITY_PATTERN, description="Memory, e.g. 2Gi."
    )


@dataclasses.dataclass(frozen=True)
class Resources:
    """Compute resources of each broker container."""

    requests: ResourceList = spec_field(default_factory=ResourceList, description="Requests.")
    limits: ResourceList = spec_field(default_factory=ResourceList, description="Limits.")


@dataclasses.dataclass(frozen=True)
class Rack:
    """Rack awareness: the node label whose value becomes each broker's ``broker.rack``."""

    topology_key: str = spec_field(
        default="topology.kubernetes.io/zone",
        min_length=1,
        description="Node label copied into broker.rack (read by an init container).",
    )


@dataclasses.dataclass(frozen=True)
class Listeners:
    """How clients reach the brokers."""

    port: int = spec_field(
        default=9092, minimum=1024, maximum=65535, description="gRPC port of every broker."
    )
    kafka_port: int = spec_field(
        default=19092, minimum=1024, maximum=65535,
        description="Kafka wire protocol port of every broker (Kafka clients and tools).",
    )
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = spec_field(
        default="ClusterIP", description="Type of the bootstrap Service."
    )


@dataclasses.dataclass(frozen=True)
class ServiceMonitorSpec:
    enabled: bool = spec_field(
        default=False, description="Create a prometheus-operator ServiceMonitor."
    )
    interval: str = spec_field(
        default="30s", pattern=r"^([0-9]+(ms|s|m|h))+$", description="Scrape interval."
    )


@dataclasses.dataclass(frozen=True)
class Metrics:
    """The metrics/health HTTP endpoint of each broker (/metrics, /healthz, /readyz)."""

    port: int = spec_field(
        default=9404,
        minimum=1024,
        maximum=65535,
        description="HTTP port of /metrics, /healthz, /readyz.",
    )
    service_monitor: ServiceMonitorSpec = spec_field(
        default_factory=ServiceMonitorSpec, description="ServiceMonitor settings."
    )


@dataclasses.dataclass(frozen=True)
class NetworkPolicySpec:
    """An optional NetworkPolicy: brokers reach each other; clients come from chosen namespaces."""

    enabled: bool = spec_field(default=False, description="Create a NetworkPolicy.")
    client_namespace_labels: dict[str, str] = spec_field(
        default_factory=dict,
        description="Namespaces (by label) whose pods may reach the client port; empty means all.",
    )


BROKER_CONFIG_NOT_OWNED = Rule(
    name="config-no-operator-keys",
    cel="!self.exists(k, k in " + _cel_list(OPERATOR_OWNED_BROKER_KEYS) + ")",
    message="config may not set keys the operator manages: "
    + ", ".join(OPERATOR_OWNED_BROKER_KEYS),
    check=lambda new, old: not any(k in new for k in OPERATOR_OWNED_BROKER_KEYS),
    reason="FieldValueForbidden",
)

QUORUM_FITS = Rule(
    name="quorum-fits-brokers",
    cel="self.controllers.replicas <= self.brokers.replicas",
    message="controllers.replicas must not exceed brokers.replicas (voters are brokers)",
    check=lambda new, old: new.controllers.replicas <= new.brokers.replicas,
    field_path=".controllers.replicas",
)
QUORUM_FIXED = Rule(
    name="quorum-size-immutable",
    cel="self.controllers.replicas == oldSelf.controllers.replicas",
    message="controllers.replicas can not be changed after creation",
    check=lambda new, old: new.controllers.replicas == old.controllers.replicas,
    field_path=".controllers.replicas",
    reason="FieldValueForbidden",
)


@dataclasses.dataclass(frozen=True)
class StromClusterSpec:
    """Desired state of a Strom cluster: brokers, storage, resources and broker config."""

    storage: Storage = spec_field(
        description="Per-broker persistent storage.", fix="e.g. storage: {size: 10Gi}"
    )
    image: str = spec_field(
        default="ghcr.io/strom/strom-broker:0.1.0", min_length=1, description="Broker image."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = spec_field(
        default="IfNotPresent", description="Image pull policy."
    )
    brokers: Brokers = spec_field(default_factory=Brokers, description="Broker count.")
    controllers: Controllers = spec_field(
        default_factory=Controllers, description="Controller quorum."
    )
    resources: Resources = spec_field(default_factory=Resources, description="Broker resources.")
    config: ConfigMap = spec_field(
        default_factory=dict,
        description="Broker config (Kafka names, e.g. num.partitions, default.replication.factor, "
        "min.insync.replicas, log.retention.ms).",
        rules=(BROKER_CONFIG_NOT_OWNED,),
    )
    rack: Rack | None = spec_field(
        default=None, description="Rack awareness; unset means brokers have no rack."
    )
    listeners: Listeners = spec_field(default_factory=Listeners, description="Client listener.")
    metrics: Metrics = spec_field(default_factory=Metrics, description="Metrics endpoint.")
    network_policy: NetworkPolicySpec = spec_field(
        default_factory=NetworkPolicySpec, description="Optional NetworkPolicy."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = spec_field(
        default="INFO", description="Broker log level."
    )

    __rules__ = (QUORUM_FITS, QUORUM_FIXED)


# ----------------------------------------------------------------------------------------------
# StromTopic
# ----------------------------------------------------------------------------------------------

CLUSTER_REF_IMMUTABLE = Rule(
    name="cluster-ref-immutable",
    cel="self == oldSelf",
    message="clusterRef can not be changed; create a new resource for another cluster",
    check=lambda new, old: new == old,
    reason="FieldValueForbidden",
)


@dataclasses.dataclass(frozen=True)
class ClusterRef:
    """The StromCluster (in the same namespace) this resource belongs to."""

    name: str = spec_field(
        pattern=DNS_LABEL,
        max_length=63,
        description="Name of the StromCluster.",
        fix="name a StromCluster in the same namespace",
    )


PARTITIONS_ONLY_GROW = Rule(
    name="partitions-only-grow",
    cel="self >= oldSelf",
    message="partitions may only grow (Kafka semantics: shrinking would lose data and reorder "
    "keys); restore the previous count or create a new topic",
    check=lambda new, old: new >= old,
    reason="FieldValueForbidden",
)
TOPIC_NAME_IMMUTABLE = Rule(
    name="topic-name-immutable",
    cel="self == oldSelf",
    message="topicName can not be changed; create a new StromTopic",
    check=lambda new, old: new == old,
    reason="FieldValueForbidden",
)


TOPIC_CONFIG_IMPLEMENTED = Rule(
    name="topic-config-implemented",
    cel="!self.exists(k, k in " + _cel_list(UNSUPPORTED_TOPIC_CONFIGS) + ")",
    message="config has a key that " + UNSUPPORTED_MESSAGE + " ("
    + ", ".join(UNSUPPORTED_TOPIC_CONFIGS) + ")",
    check=lambda new, old: not any(k in UNSUPPORTED_TOPIC_CONFIGS for k in new),
)
TOPIC_CONFIG_KNOWN = Rule(
    name="topic-config-known-keys",
    cel="self.all(k, k in " + _cel_list([*TOPIC_CONFIG_KEYS, *UNSUPPORTED_TOPIC_CONFIGS]) + ")",
    message="config has a key Strom does not know; known keys: "
    + ", ".join(sorted(TOPIC_CONFIG_KEYS)),
    check=lambda new, old: all(
        k in TOPIC_CONFIG_KEYS or k in UNSUPPORTED_TOPIC_CONFIGS for k in new
    ),
)
MIN_ISR_FITS = Rule(
    name="min-insync-replicas-fits",
    cel="!('min.insync.replicas' in self.config) || "
    "int(string(self.config['min.insync.replicas'])) <= self.replicationFactor",
    message="config min.insync.replicas must not exceed replicationFactor (writes with acks=all "
    "would always fail)",
    check=lambda new, old: _min_isr_fits(new),
    field_path=".config",
)


def _min_isr_fits(spec: StromTopicSpec) -> bool:
    raw = spec.config.get("min.insync.replicas")
    if raw is None:
        return True
    try:
        return int(str(raw)) <= spec.replication_factor
    except ValueError:
        return True  # reported by validate_topic_config


@dataclasses.dataclass(frozen=True)
class StromTopicSpec:
    """A topic of a StromCluster. Partitions may only grow."""

    cluster_ref: ClusterRef = spec_field(
        description="The cluster that holds the topic.",
        rules=(CLUSTER_REF_IMMUTABLE,),
        fix="e.g. clusterRef: {name: my-cluster}",
    )
    partitions: int = spec_field(
        default=1,
        minimum=1,
        maximum=10000,
        description="Partition count (may only grow).",
        rules=(PARTITIONS_ONLY_GROW,),
    )
    replication_factor: int = spec_field(
        default=3,
        minimum=1,
        maximum=10,
        description="Replicas per partition; changing it reassigns partitions.",
    )
    topic_name: str | None = spec_field(
        default=None,
        pattern=TOPIC_NAME,
        description="Topic name in Strom; defaults to metadata.name.",
        rules=(TOPIC_NAME_IMMUTABLE,),
    )
    config: ConfigMap = spec_field(
        default_factory=dict,
        description="Topic config (Kafka names, e.g. retention.ms).",
        # Refusing Kafka keys Strom lacks by name only while there are any (none today).
        rules=(TOPIC_CONFIG_KNOWN,
               *((TOPIC_CONFIG_IMPLEMENTED,) if UNSUPPORTED_TOPIC_CONFIGS else ())),
    )
    deletion_policy: Literal["Delete", "Retain"] = spec_field(
        default="Retain",
        description="Delete: deleting the resource deletes the topic and its data. "
        "Retain: the topic stays in the cluster.",
    )

    __rules__ = (MIN_ISR_FITS,)


# ----------------------------------------------------------------------------------------------
# StromConsumerGroup
# ----------------------------------------------------------------------------------------------

RESET_NEEDS_VALUE = Rule(
    name="reset-offsets-needs-value",
    cel="(self.to != 'timestamp' || has(self.timestamp)) && "
    "(self.to != 'offset' || has(self.offset))",
    message="resetOffsets: to: timestamp needs timestamp, to: offset needs offset",
    check=lambda new, old: (
        (new.to != "timestamp" or new.timestamp is not None)
        and (new.to != "offset" or new.offset is not None)
    ),
)


@dataclasses.dataclass(frozen=True)
class ResetOffsets:
    """A declarative offset reset, applied once per change while the group is empty."""

    to: Literal["earliest", "latest", "timestamp", "offset"] = spec_field(
        description="Where to move the committed offsets.",
        fix="one of earliest, latest, timestamp, offset",
    )
    timestamp: str | None = spec_field(
        default=None,
        format="date-time",
        pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$",
        description="RFC 3339 time, for to: timestamp.",
    )
    offset: int | None = spec_field(default=None, minimum=0, description="Offset, for to: offset.")
    topics: list[str] = spec_field(
        default_factory=list,
        pattern=TOPIC_NAME,
        list_type="set",
        description="Limit the reset to these topics; empty means all of the group's topics.",
    )

    __rules__ = (RESET_NEEDS_VALUE,)


@dataclasses.dataclass(frozen=True)
class ScaleTarget:
    """The consumer workload to scale."""

    name: str = spec_field(
        pattern=DNS_LABEL, max_length=253, description="Name of the workload (same namespace)."
    )
    kind: Literal["Deployment", "StatefulSet"] = spec_field(
        default="Deployment", description="Kind of the workload."
    )


AUTOSCALE_MIN_LE_MAX = Rule(
    name="autoscale-min-le-max",
    cel="self.minReplicas <= self.maxReplicas",
    message="autoscale.minReplicas must not exceed autoscale.maxReplicas",
    check=lambda new, old: new.min_replicas <= new.max_replicas,
    field_path=".minReplicas",
)


@dataclasses.dataclass(frozen=True)
class Autoscale:
    """Lag-based autoscaling of the consumer workload (like KEDA's Kafka scaler).

    Desired replicas = ceil(total lag / lagPerReplica), clamped to [minReplicas, maxReplicas] and
    never above the partition count (an idle consumer gets no partition).  Scale-down waits for
    cooldownSeconds after the last scaling.
    """

    target: ScaleTarget = spec_field(description="The workload to scale.")
    max_replicas: int = spec_field(minimum=1, maximum=1000, description="Upper bound.")
    lag_per_replica: int = spec_field(
        minimum=1, description="Lag (records) one replica is expected to work off."
    )
    min_replicas: int = spec_field(default=1, minimum=0, maximum=1000, description="Lower bound.")
    cooldown_seconds: int = spec_field(
        default=300,
        minimum=0,
        maximum=86400,
        description="Seconds after a scaling before the workload may be scaled down.",
    )
    activation_lag: int = spec_field(
        default=0,
        minimum=0,
        description="With minReplicas 0: total lag above which the workload wakes up.",
    )

    __rules__ = (AUTOSCALE_MIN_LE_MAX,)


@dataclasses.dataclass(frozen=True)
class StromConsumerGroupSpec:
    """A consumer group: status with lag, declarative offset resets, lag autoscaling."""

    cluster_ref: ClusterRef = spec_field(
        description="The cluster that holds the group.",
        rules=(CLUSTER_REF_IMMUTABLE,),
        fix="e.g. clusterRef: {name: my-cluster}",
    )
    topics: list[str] = spec_field(
        min_items=1,
        max_items=1000,
        pattern=TOPIC_NAME,
        list_type="set",
        description="Topics the group consumes.",
        fix="list at least one topic",
    )
    group_id: str | None = spec_field(
        default=None,
        min_length=1,
        max_length=249,
        description="Group id in Strom; defaults to metadata.name.",
    )
    offset_reset: Literal["earliest", "latest"] = spec_field(
        default="latest", description="Where a member starts without a committed offset."
    )
    reset_offsets: ResetOffsets | None = spec_field(
        default=None, description="A declarative offset reset (applied once per change)."
    )
    autoscale: Autoscale | None = spec_field(
        default=None, description="Lag-based autoscaling of a consumer workload."
    )


# ----------------------------------------------------------------------------------------------
# Parsing entry points (what the reconcilers call)
# ----------------------------------------------------------------------------------------------


def parse_cluster(spec: Any) -> StromClusterSpec:
    """Parse and validate a StromCluster ``spec``; raises SpecError naming every bad field."""
    parsed, errors = parse_collect(StromClusterSpec, spec)
    if parsed is not None:
        errors.extend(validate_broker_config(parsed))
    if errors or parsed is None:
        raise SpecError(errors)
    return parsed


def parse_topic(spec: Any) -> StromTopicSpec:
    """Parse and validate a StromTopic ``spec``; raises SpecError naming every bad field."""
    parsed, errors = parse_collect(StromTopicSpec, spec)
    if isinstance(spec, Mapping) and isinstance(spec.get("config"), Mapping):
        errors.extend(validate_topic_config(spec["config"]))

    if errors or parsed is None:
        raise SpecError(errors)
    return parsed


def parse_consumer_group(spec: Any) -> StromConsumerGroupSpec:
    """Parse and validate a StromConsumerGroup ``spec``; raises SpecError naming every bad field."""
    return parse(StromConsumerGroupSpec, spec)


def check_transition(new: Any, old: Any) -> list[FieldError]:
    """Errors from rules comparing an update with the previous spec (CEL ``oldSelf`` rules)."""
    return [e for e in check_rules(new, old) if e not in check_rules(new, None)]


def validate_broker_config(spec: StromClusterSpec) -> list[FieldError]:
    """Cross-checks of broker config that need typed values (reported in status, not by CEL)."""
    errors: list[FieldError] = []
    ints: dict[str, int] = {}
    for key, raw in spec.config.items():
        if key in OPERATOR_OWNED_BROKER_KEYS:
            continue  # BROKER_CONFIG_NOT_OWNED reports it
        if key not in USER_BROKER_KEYS:
            close = difflib.get_close_matches(key, sorted(USER_BROKER_KEYS), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            errors.append(FieldError(f"spec.config[{key}]", f"is not a broker config key{hint}"))
            continue
        try:  # the broker's own check of the value (type, range, topic default)
            typed = check_value(key, config_value_str(raw))
        except ConfigError as err:
            errors.append(FieldError(f"spec.config[{key}]", str(err)))
            continue
        if isinstance(typed, int) and not isinstance(typed, bool):
            ints[key] = typed
    rf = ints.get("default.replication.factor")
    if rf is not None and rf > spec.brokers.replicas:
        errors.append(
            FieldError(
                "spec.config[default.replication.factor]",
                f"is {rf} but the cluster has {spec.brokers.replicas} brokers; "
                "lower it or add brokers",
            )
        )
    isr = ints.get("min.insync.replicas")
    if isr is not None and rf is not None and isr > rf:
        errors.append(
            FieldError(
                "spec.config[min.insync.replicas]",
                f"is {isr}, above default.replication.factor {rf}; "
                "acks=all writes would always fail",
            )
        )
    return errors


def validate_topic_config(config: Mapping[str, Any]) -> list[FieldError]:
    """Topic config keys and values, checked by the broker's own parser (``strom.storage.config``)
    so the operator accepts exactly what the broker accepts, with the broker's message."""
    errors: list[FieldError] = []
    for key, value in config.items():
        definition = TOPIC_CONFIG_DEFS.get(key)
        if definition is None:
            close = difflib.get_close_matches(key, sorted(TOPIC_CONFIG_KEYS), n=1)
            hint = (f"; did you mean {close[0]}?"
                    if close and key not in UNSUPPORTED_TOPIC_CONFIGS else "")
            errors.append(
                FieldError(f"spec.config[{key}]", unknown_topic_config_message(key) + hint))
            continue
        try:
            definition.validator(key, config_value_str(value))
        except StromError as err:
            errors.append(FieldError(f"spec.config[{key}]", err.message))
    return errors
