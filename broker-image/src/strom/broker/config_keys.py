"""The broker's config keys: names, types, defaults, ranges and docs, and how a value is checked.

The one table of broker-level keys (Kafka's names where Kafka has the key). The broker's loader
(``strom.broker.config``), the CLI help, the operator's StromCluster validation and the docs table
all read it, so a key is declared once. Pure: no I/O (reading files and the environment is
``strom.broker.config``'s job), so the operator can import it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from strom.broker.listeners import DEFAULT_KAFKA_LISTENER, DEFAULT_KAFKA_PORT
from strom.protocol.errors import StromError
from strom.storage.config import LogConfig, parse_topic_configs

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class ConfigError(Exception):
    """A bad broker configuration; ``str(err)`` is one line for the operator to act on."""


@dataclass(frozen=True)
class BrokerKey:
    name: str
    kind: str  # "int" | "str" | "bool" | "list" | "level"
    default: Any
    minimum: int | None = None
    maximum: int | None = None
    doc: str = ""


# Broker-level defaults for topic configs: broker key -> topic key (Kafka's pairs).
TOPIC_DEFAULT_KEYS: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "message.max.bytes": "max.message.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}

BROKER_KEYS: tuple[BrokerKey, ...] = (
    BrokerKey("broker.id", "int", 0, 0, 2**31 - 1, "This broker's id, unique in the cluster."),
    BrokerKey("host", "str", "127.0.0.1", doc="Address the gRPC and metrics servers bind."),
    BrokerKey("port", "int", 9092, 0, 65535, "gRPC port (0 = any free port)."),
    BrokerKey("advertised.host", "str", "", doc="Host clients are told to use (default: host)."),
    BrokerKey("listeners", "str", f"{DEFAULT_KAFKA_LISTENER}://:{DEFAULT_KAFKA_PORT}",
              doc="The Kafka-protocol listener, NAME://HOST:PORT (empty host: host; port 0: a "
                  "free port; empty: no Kafka listener)."),
    BrokerKey("advertised.listeners", "str", "",
              doc="The Kafka listener clients are told to use, NAME://HOST:PORT (default: "
                  "listeners with advertised.host and the bound port)."),
    BrokerKey("metrics.port", "int", 9404, 0, 65535,
         "HTTP port for /metrics, /healthz, /readyz (0 = disabled)."),
    BrokerKey("log.dirs", "list", ("./strom-data",), doc="Comma-separated data directories."),
    BrokerKey("cluster.id", "str", "", doc="Cluster id (default: generated once and persisted)."),
    BrokerKey("broker.rack", "str", "", doc="Rack of this broker, for rack-aware placement."),
    BrokerKey("num.partitions", "int", 1, 1, 100_000, "Default partition count of new topics."),
    BrokerKey("default.replication.factor", "int", 1, 1, 32767,
         "Default replication factor of new topics."),
    BrokerKey("max.partitions.per.request", "int", 10_000, 1, 1_000_000,
              "The most partitions one CreateTopics request (summed over its topics) or one "
              "CreatePartitions request may add; more is refused with INVALID_PARTITIONS / "
              "POLICY_VIOLATION before any work. Kafka bounds every metadata operation to 10,000 "
              "records (QuorumController.MAX_RECORDS_PER_USER_OP)."),
    BrokerKey("auto.create.topics.enable", "bool", False,
         doc="Create unknown topics on produce/metadata requests."),
    BrokerKey("log.segment.bytes", "int", None, doc="Default segment.bytes of topics."),
    BrokerKey("log.roll.ms", "int", None, doc="Default segment.ms of topics."),
    BrokerKey("log.retention.ms", "int", None, doc="Default retention.ms of topics."),
    BrokerKey("log.retention.bytes", "int", None, doc="Default retention.bytes of topics."),
    BrokerKey("log.cleanup.policy", "str", None, doc="Default cleanup.policy of topics."),
    BrokerKey("log.flush.interval.messages", "int", None, doc="Default flush.messages of topics."),
    BrokerKey("log.flush.interval.ms", "int", None, doc="Default flush.ms of topics."),
    BrokerKey("message.max.bytes", "int", None, doc="Default max.message.bytes of topics."),
    BrokerKey("log.message.timestamp.type", "str", None,
         doc="Default message.timestamp.type of topics."),
    BrokerKey("log.message.timestamp.before.max.ms", "int", None,
              doc="Default message.timestamp.before.max.ms of topics."),
    BrokerKey("log.message.timestamp.after.max.ms", "int", None,
              doc="Default message.timestamp.after.max.ms of topics."),
    BrokerKey("min.insync.replicas", "int", None, doc="Default min.insync.replicas of topics."),
    BrokerKey("num.recovery.threads.per.data.dir", "int", 8, 1, 256,
              "Threads per log directory that open (recover) the logs at start and close them "
              "at shutdown; the work is mostly waiting for fsync, so more threads than cores help "
              "(Kafka's default is 2)."),
    BrokerKey("log.open.segments.max", "int", 0, 0, 2**31 - 1,
              "The most segment files (.log) the broker keeps open at once; the least recently "
              "used beyond it are closed and reopened on their next use (indexes hold no open "
              "file). 0 = the open-file limit (RLIMIT_NOFILE, raised to the hard limit at start) "
              "less a quarter of it, at least 256 kept for sockets and other files."),
    BrokerKey("log.retention.check.interval.ms", "int", 300_000, 100, 2**31 - 1,
         "How often retention, compaction and time-based flushes run."),
    BrokerKey("fetch.max.bytes", "int", 52_428_800, 1024, 2**31 - 1,
         "Largest fetch response (when the request asks for 0 = default)."),
    BrokerKey("socket.request.max.bytes", "int", 104_857_600, 64 * 1024 * 1024, 2**31 - 1,
         "Largest gRPC message, and largest Kafka-protocol request (a bigger one closes the "
         "connection, as in Kafka), sent or received (at least 64 MiB)."),
    BrokerKey("connections.max.idle.ms", "int", 600_000, 1000, 2**31 - 1,
              "A Kafka-protocol connection that sends no complete request (or does not read its "
              "response) for this long is closed."),
    BrokerKey("socket.receive.buffer.bytes", "int", 102_400, -1, 2**31 - 1,
              "SO_RCVBUF of the Kafka listener's sockets, as in Kafka (-1: the OS default, which "
              "Linux grows to tcp_rmem's maximum): what a client can have in flight unread. "
              "With a bound, a producer that sends faster than the broker reads keeps its "
              "records and sends them in fewer, larger requests."),
    BrokerKey("socket.send.buffer.bytes", "int", -1, -1, 2**31 - 1,
              "SO_SNDBUF of the Kafka listener's sockets (-1: the OS default, which Linux "
              "grows as needed; Kafka's default is 102400, not taken here because large Fetch "
              "answers were not measured with it)."),
    BrokerKey("shutdown.timeout.ms", "int", 10_000, 0, 3_600_000,
         "Grace period for in-flight requests on SIGTERM."),
    BrokerKey("log.level", "level", "INFO", doc="DEBUG, INFO, WARNING or ERROR."),
    # -- clustering (KRaft-style controller quorum, replication) --------------------------------
    BrokerKey("process.roles", "str", "",
         doc="broker, controller or broker,controller (default: broker,controller when this "
             "broker is in controller.quorum.voters or the voter list is empty, else broker)."),
    BrokerKey("controller.quorum.voters", "str", "",
         doc="ID@HOST:PORT,... of the controller voters (in combined mode a voter's port is its "
             "broker port); empty = this broker alone is the controller."),
    BrokerKey("controller.election.timeout.ms", "int", 1000, 50, 600_000,
         "Raft election timeout of the controller quorum (each wait is drawn from [t, 2t))."),
    BrokerKey("controller.heartbeat.interval.ms", "int", 250, 10, 60_000,
         "Raft heartbeat interval of the controller leader: liveness only (the leader tells "
         "the others of a commit at once), a quarter of the election timeout as in KRaft."),
    BrokerKey("metadata.compact.every", "int", 1000, 10, 10_000_000,
         "Snapshot the metadata image every N applied metadata log entries."),
    BrokerKey("broker.heartbeat.interval.ms", "int", 500, 10, 60_000,
         "How often a broker heart-beats to the active controller."),
    BrokerKey("broker.session.timeout.ms", "int", 3000, 100, 600_000,
         "A broker that has not heart-beaten for this long is fenced and loses leadership."),
    BrokerKey("replica.lag.time.max.ms", "int", 10_000, 100, 3_600_000,
         "A follower that has not caught up for this long is removed from the ISR."),
    BrokerKey("replica.fetch.wait.max.ms", "int", 500, 0, 60_000,
         "Long-poll time of a follower's fetch from its leader."),
    BrokerKey("replica.fetch.max.bytes", "int", 1_048_576, 1024, 2**31 - 1,
         "Bytes per partition a follower fetches at most per request."),
    BrokerKey("replica.fetch.response.max.bytes", "int", 10_485_760, 1024, 2**31 - 1,
         "Bytes per follower fetch response at most."),
    BrokerKey("auto.leader.rebalance.enable", "bool", True,
         doc="Move leadership back to preferred replicas when they are in sync again."),
    BrokerKey("leader.imbalance.check.interval.ms", "int", 30_000, 100, 2**31 - 1,
         "How often the controller checks for partitions not led by their preferred replica."),
    BrokerKey("unclean.leader.election.enable", "bool", None,
         doc="Default for topics: elect an out-of-sync replica when no in-sync one is left "
             "(may lose acknowledged records)."),
    BrokerKey("producer.id.expiration.ms", "int", 86_400_000, 1000, 2**31 - 1,
         "Forget an idempotent producer's sequence state after this long without writes."),
    # -- consumer groups (coordinator, __consumer_offsets) ---------------------------------------
    BrokerKey("offsets.topic.num.partitions", "int", 10, 1, 10_000,
         "Partitions of __consumer_offsets, fixed once the topic exists (Kafka: 50; fewer "
         "here because every partition led by a broker costs a loaded coordinator and a timer, "
         "and a Python broker hosts far fewer groups than a JVM one)."),
    BrokerKey("offsets.topic.replication.factor", "int", 3, 1, 32767,
         "Replication factor of __consumer_offsets (capped at the live brokers when the topic "
         "is created, so a dev cluster of one still works)."),
    BrokerKey("offsets.retention.minutes", "int", 10080, 1, 2**31 - 1,
         "Committed offsets of an empty group are deleted this long after it became empty."),
    BrokerKey("offsets.retention.check.interval.ms", "int", 600_000, 100, 2**31 - 1,
         "How often expired committed offsets are looked for."),
    BrokerKey("offsets.commit.timeout.ms", "int", 5000, 1, 2**31 - 1,
         "An offset commit (and a group metadata write) waits this long for the in-sync "
         "replicas of __consumer_offsets."),
    BrokerKey("group.min.session.timeout.ms", "int", 6000, 1, 2**31 - 1,
         "Smallest session.timeout.ms a consumer may ask for."),
    BrokerKey("group.max.session.timeout.ms", "int", 1_800_000, 1, 2**31 - 1,
         "Largest session.timeout.ms a consumer may ask for."),
    BrokerKey("group.initial.rebalance.delay.ms", "int", 3000, 0, 2**31 - 1,
         "The first rebalance of an empty group waits this long for more members to join."),
    BrokerKey("group.max.size", "int", 2**31 - 1, 1, 2**31 - 1,
         "Most members one group may have (default: unlimited)."),
)

KEYS: dict[str, BrokerKey] = {k.name: k for k in BROKER_KEYS}


def convert(key: BrokerKey, value: object) -> Any:
    name = key.name
    if value is None:
        if key.default is None:
            return None
        raise ConfigError(f"{name} has no value; expected {_expected(key)}")
    converters: dict[str, Callable[[BrokerKey, object], Any]] = {
        "int": _to_int,
        "str": _to_str,
        "bool": _to_bool,
        "list": _to_list,
        "level": _to_level,
    }
    return converters[key.kind](key, value)


def _expected(key: BrokerKey) -> str:
    if key.kind == "int":
        if key.minimum is not None and key.maximum is not None:
            return f"an integer in [{key.minimum}, {key.maximum}]"
        if key.minimum is not None:
            return f"an integer >= {key.minimum}"
        return "an integer"
    if key.kind == "bool":
        return "true or false"
    if key.kind == "list":
        return "a comma-separated list of directories"
    if key.kind == "level":
        return "one of " + ", ".join(LOG_LEVELS)
    return "a string"


def _bad(key: BrokerKey, value: object) -> ConfigError:
    return ConfigError(f"{key.name}={value!r} is invalid; expected {_expected(key)}")


def _to_int(key: BrokerKey, value: object) -> int:
    if isinstance(value, bool):
        raise _bad(key, value)
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d+\s*", value):
        number = int(value)
    else:
        raise _bad(key, value)
    if (key.minimum is not None and number < key.minimum) or (
        key.maximum is not None and number > key.maximum
    ):
        raise _bad(key, value)
    return number


def _to_str(key: BrokerKey, value: object) -> str:
    if isinstance(value, (dict, list, tuple)):
        raise _bad(key, value)
    return str(value).strip()


def _to_bool(key: BrokerKey, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _bad(key, value)


def _to_list(key: BrokerKey, value: object) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
    elif isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    else:
        raise _bad(key, value)
    items = [v for v in items if v]
    if not items:
        raise _bad(key, value)
    return tuple(items)


def _to_level(key: BrokerKey, value: object) -> str:
    level = str(value).strip().upper()
    if level == "WARN":
        level = "WARNING"
    if level not in LOG_LEVELS:
        raise _bad(key, value)
    return level


def format_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value)


def unknown_key_message(name: str) -> str:
    close = difflib.get_close_matches(name, list(KEYS), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else "; see the list of broker config keys"
    return f"unknown broker config key {name!r}{hint}"


def topic_defaults(values: Mapping[str, Any]) -> LogConfig:
    """The default LogConfig of topics, from the broker-level ``log.*`` keys that are set."""
    config = LogConfig()
    for broker_key, topic_key in TOPIC_DEFAULT_KEYS.items():
        value = values.get(broker_key)
        if value is None:
            continue
        try:
            config = parse_topic_configs({topic_key: format_value(value)}, base=config)
        except StromError as err:
            raise ConfigError(
                f"{broker_key}={format_value(value)!r} is invalid (topic default "
                f"{topic_key}): {err.message}"
            ) from None
    return config


def check_value(name: str, value: object) -> Any:
    """One key's typed value, checked as the broker checks it at start (a ``log.*`` topic default
    also by the topic-config parser); ConfigError naming the key otherwise."""
    key = KEYS.get(name)
    if key is None:
        raise ConfigError(unknown_key_message(name))
    typed = convert(key, value)
    if name in TOPIC_DEFAULT_KEYS:
        topic_defaults({name: typed})
    return typed
