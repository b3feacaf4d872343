"""The broker's static configuration: Kafka-style keys, read once at start and validated whole.

Sources, later wins: a config file (YAML, or a Kafka-style ``.properties`` file; detected by
extension, else by content), then ``STROM_<KEY>`` environment variables (``log.dirs`` ->
``STROM_LOG_DIRS``), then explicit overrides (the CLI's ``--set key=value`` flags).

Every problem is a :class:`ConfigError` with a one-line message that names the key, the value and
what is expected (unknown keys get the closest valid key suggested), so the CLI can print it
without a traceback. Broker-level topic defaults (``log.retention.ms`` ...) are checked with the
storage layer's own topic-config parser, so a bad default fails at start, not at the first topic.

Not supported: dynamic (runtime) broker configs, several Kafka listeners, TLS, SASL.
Unknown ``STROM_*`` environment variables are ignored (other tools share the prefix) but logged.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from strom.broker.listeners import (
    DEFAULT_KAFKA_LISTENER,
    DEFAULT_KAFKA_PORT,
    Listener,
    ListenerError,
    kafka_listeners,
)
from strom.controller.voters import parse_voters as controller_voters
from strom.protocol.errors import StromError
from strom.storage.config import LogConfig, parse_topic_configs

log = logging.getLogger(__name__)

ENV_PREFIX = "STROM_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class ConfigError(Exception):
    """A bad broker configuration; ``str(err)`` is one line for the operator to act on."""


@dataclass(frozen=True)
class _Key:
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
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}

_KEYS: tuple[_Key, ...] = (
    _Key("broker.id", "int", 0, 0, 2**31 - 1, "This broker's id, unique in the cluster."),
    _Key("host", "str", "127.0.0.1", doc="Address the gRPC and metrics servers bind."),
    _Key("port", "int", 9092, 0, 65535, "gRPC port (0 = any free port)."),
    _Key("advertised.host", "str", "", doc="Host clients are told to use (default: host)."),
    _Key("listeners", "str", f"{DEFAULT_KAFKA_LISTENER}://:{DEFAULT_KAFKA_PORT}",
         doc="The Kafka-protocol listener, NAME://HOST:PORT (empty host: host; port 0: a free "
             "port; empty: no Kafka listener)."),
    _Key("advertised.listeners", "str", "",
         doc="The Kafka listener clients are told to use, NAME://HOST:PORT (default: listeners "
             "with advertised.host and the bound port)."),
    _Key("metrics.port", "int", 9404, 0, 65535,
         "HTTP port for /metrics, /healthz, /readyz (0 = disabled)."),
    _Key("log.dirs", "list", ("./strom-data",), doc="Comma-separated data directories."),
    _Key("cluster.id", "str", "", doc="Cluster id (default: generated once and persisted)."),
    _Key("broker.rack", "str", "", doc="Rack of this broker, for rack-aware placement."),
    _Key("num.partitions", "int", 1, 1, 100_000, "Default partition count of new topics."),
    _Key("default.replication.factor", "int", 1, 1, 32767,
         "Default replication factor of new topics."),
    _Key("max.partitions.per.request", "int", 10_000, 1, 1_000_000,
         "The most partitions one CreateTopics request (summed over its topics) or one "
         "CreatePartitions request may add; more is refused with INVALID_PARTITIONS / "
         "POLICY_VIOLATION before any work. Kafka bounds every metadata operation to 10,000 "
         "records (QuorumController.MAX_RECORDS_PER_USER_OP)."),
    _Key("auto.create.topics.enable", "bool", False,
         doc="Create unknown topics on produce/metadata requests."),
    _Key("log.segment.bytes", "int", None, doc="Default segment.bytes of topics."),
    _Key("log.roll.ms", "int", None, doc="Default segment.ms of topics."),
    _Key("log.retention.ms", "int", None, doc="Default retention.ms of topics."),
    _Key("log.retention.bytes", "int", None, doc="Default retention.bytes of topics."),
    _Key("log.cleanup.policy", "str", None, doc="Default cleanup.policy of topics."),
    _Key("log.flush.interval.messages", "int", None, doc="Default flush.messages of topics."),
    _Key("log.flush.interval.ms", "int", None, doc="Default flush.ms of topics."),
    _Key("message.max.bytes", "int", None, doc="Default max.message.bytes of topics."),
    _Key("log.message.timestamp.type", "str", None,
         doc="Default message.timestamp.type of topics."),
    _Key("min.insync.replicas", "int", None, doc="Default min.insync.replicas of topics."),
    _Key("log.retention.check.interval.ms", "int", 300_000, 100, 2**31 - 1,
         "How often retention, compaction and time-based flushes run."),
    _Key("fetch.max.bytes", "int", 52_428_800, 1024, 2**31 - 1,
         "Largest fetch response (when the request asks for 0 = default)."),
    _Key("socket.request.max.bytes", "int", 104_857_600, 64 * 1024 * 1024, 2**31 - 1,
         "Largest gRPC message, and largest Kafka-protocol request (a bigger one closes the "
         "connection, as in Kafka), sent or received (at least 64 MiB)."),
    _Key("connections.max.idle.ms", "int", 600_000, 1000, 2**31 - 1,
         "A Kafka-protocol connection that sends no complete request (or does not read its "
         "response) for this long is closed."),
    _Key("shutdown.timeout.ms", "int", 10_000, 0, 3_600_000,
         "Grace period for in-flight requests on SIGTERM."),
    _Key("log.level", "level", "INFO", doc="DEBUG, INFO, WARNING or ERROR."),
    # -- clustering (KRaft-style controller quorum, replication) --------------------------------
    _Key("process.roles", "str", "",
         doc="broker, controller or broker,controller (default: broker,controller when this "
             "broker is in controller.quorum.voters or the voter list is empty, else broker)."),
    _Key("controller.quorum.voters", "str", "",
         doc="ID@HOST:PORT,... of the controller voters (in combined mode a voter's port is its "
             "broker port); empty = this broker alone is the controller."),
    _Key("controller.election.timeout.ms", "int", 1000, 50, 600_000,
         "Raft election timeout of the controller quorum (each wait is drawn from [t, 2t))."),
    _Key("controller.heartbeat.interval.ms", "int", 100, 10, 60_000,
         "Raft heartbeat interval of the controller leader."),
    _Key("metadata.compact.every", "int", 1000, 10, 10_000_000,
         "Snapshot the metadata image every N applied metadata log entries."),
    _Key("broker.heartbeat.interval.ms", "int", 500, 10, 60_000,
         "How often a broker heart-beats to the active controller."),
    _Key("broker.session.timeout.ms", "int", 3000, 100, 600_000,
         "A broker that has not heart-beaten for this long is fenced and loses leadership."),
    _Key("replica.lag.time.max.ms", "int", 10_000, 100, 3_600_000,
         "A follower that has not caught up for this long is removed from the ISR."),
    _Key("replica.fetch.wait.max.ms", "int", 500, 0, 60_000,
         "Long-poll time of a follower's fetch from its leader."),
    _Key("replica.fetch.max.bytes", "int", 1_048_576, 1024, 2**31 - 1,
         "Bytes per partition a follower fetches at most per request."),
    _Key("replica.fetch.response.max.bytes", "int", 10_485_760, 1024, 2**31 - 1,
         "Bytes per follower fetch response at most."),
    _Key("auto.leader.rebalance.enable", "bool", True,
         doc="Move leadership back to preferred replicas when they are in sync again."),
    _Key("leader.imbalance.check.interval.ms", "int", 30_000, 100, 2**31 - 1,
         "How often the controller checks for partitions not led by their preferred replica."),
    _Key("unclean.leader.election.enable", "bool", None,
         doc="Default for topics: elect an out-of-sync replica when no in-sync one is left "
             "(may lose acknowledged records)."),
    _Key("producer.id.expiration.ms", "int", 86_400_000, 1000, 2**31 - 1,
         "Forget an idempotent producer's sequence state after this long without writes."),
    # -- consumer groups (coordinator, __consumer_offsets) ---------------------------------------
    _Key("offsets.topic.num.partitions", "int", 10, 1, 10_000,
         "Partitions of __consumer_offsets, fixed once the topic exists (Kafka: 50; fewer "
         "here because every partition led by a broker costs a loaded coordinator and a timer, "
         "and a Python broker hosts far fewer groups than a JVM one)."),
    _Key("offsets.topic.replication.factor", "int", 3, 1, 32767,
         "Replication factor of __consumer_offsets (capped at the live brokers when the topic "
         "is created, so a dev cluster of one still works)."),
    _Key("offsets.retention.minutes", "int", 10080, 1, 2**31 - 1,
         "Committed offsets of an empty group are deleted this long after it became empty."),
    _Key("offsets.retention.check.interval.ms", "int", 600_000, 100, 2**31 - 1,
         "How often expired committed offsets are looked for."),
    _Key("offsets.commit.timeout.ms", "int", 5000, 1, 2**31 - 1,
         "An offset commit (and a group metadata write) waits this long for the in-sync "
         "replicas of __consumer_offsets."),
    _Key("group.min.session.timeout.ms", "int", 6000, 1, 2**31 - 1,
         "Smallest session.timeout.ms a consumer may ask for."),
    _Key("group.max.session.timeout.ms", "int", 1_800_000, 1, 2**31 - 1,
         "Largest session.timeout.ms a consumer may ask for."),
    _Key("group.initial.rebalance.delay.ms", "int", 3000, 0, 2**31 - 1,
         "The first rebalance of an empty group waits this long for more members to join."),
    _Key("group.max.size", "int", 2**31 - 1, 1, 2**31 - 1,
         "Most members one group may have (default: unlimited)."),
)

KEYS: dict[str, _Key] = {k.name: k for k in _KEYS}


@dataclass(frozen=True)
class BrokerConfig:
    """A validated broker configuration. Build it with :func:`load_config` or :meth:`from_mapping`.

    ``values`` maps every key to its typed value; ``explicit`` holds the keys that were set by a
    file, the environment or an override (DescribeConfigs reports them as STATIC_BROKER_CONFIG).
    """

    values: Mapping[str, Any]
    explicit: frozenset[str] = frozenset()
    topic_defaults: LogConfig = field(default_factory=LogConfig)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, object]) -> BrokerConfig:
        values: dict[str, Any] = {}
        for name, value in raw.items():
            key = KEYS.get(name)
            if key is None:
                raise ConfigError(_unknown_key_message(name))
            values[name] = _convert(key, value)
        for key in _KEYS:
            values.setdefault(key.name, key.default)
        config = cls(values, frozenset(raw), _topic_defaults(values))
        _check_cluster_keys(config)
        return config

    def get(self, name: str) -> Any:
        return self.values[name]

    @property
    def broker_id(self) -> int:
        return int(self.values["broker.id"])

    @property
    def host(self) -> str:
        return str(self.values["host"])

    @property
    def port(self) -> int:
        return int(self.values["port"])

    @property
    def advertised_host(self) -> str:
        return str(self.values["advertised.host"] or self.values["host"])

    @property
    def kafka_listener(self) -> tuple[Listener, Listener] | None:
        """(bind, advertised) of the Kafka-protocol listener; None when it is off."""
        try:
            return kafka_listeners(str(self.values["listeners"]),
                                   str(self.values["advertised.listeners"]), self.host,
                                   self.advertised_host)
        except ListenerError as err:
            raise ConfigError(str(err)) from None

    @property
    def metrics_port(self) -> int:
        return int(self.values["metrics.port"])

    @property
    def log_dirs(self) -> tuple[Path, ...]:
        return tuple(Path(d) for d in self.values["log.dirs"])

    @property
    def cluster_id(self) -> str:
        return str(self.values["cluster.id"])

    @property
    def rack(self) -> str:
        return str(self.values["broker.rack"])

    @property
    def num_partitions(self) -> int:
        return int(self.values["num.partitions"])

    @property
    def max_partitions_per_request(self) -> int:
        return int(self.values["max.partitions.per.request"])

    @property
    def default_replication_factor(self) -> int:
        return int(self.values["default.replication.factor"])

    @property
    def auto_create_topics(self) -> bool:
        return bool(self.values["auto.create.topics.enable"])

    @property
    def maintenance_interval_s(self) -> float:
        return int(self.values["log.retention.check.interval.ms"]) / 1000.0

    @property
    def fetch_max_bytes(self) -> int:
        return int(self.values["fetch.max.bytes"])

    @property
    def max_message_size(self) -> int:
        return int(self.values["socket.request.max.bytes"])

    @property
    def shutdown_timeout_s(self) -> float:
        return int(self.values["shutdown.timeout.ms"]) / 1000.0

    @property
    def log_level(self) -> str:
        return str(self.values["log.level"])

    @property
    def process_roles(self) -> frozenset[str]:
        """``{"broker"}``, ``{"controller"}`` or both; defaults as documented on the key."""
        text = str(self.values["process.roles"])
        if text:
            return frozenset(r.strip() for r in text.split(",") if r.strip())
        voters = self.quorum_voters
        if not self.values["controller.quorum.voters"] or self.broker_id in voters:
            return frozenset({"broker", "controller"})
        return frozenset({"broker"})

    @property
    def quorum_voters(self) -> dict[int, str]:
        """Voter id -> host:port; empty when this broker is the only controller."""
        return parse_voters(str(self.values["controller.quorum.voters"]))

    @property
    def is_controller(self) -> bool:
        return "controller" in self.process_roles

    def ms(self, name: str) -> float:
        """A ``*.ms`` key in seconds."""
        return int(self.values[name]) / 1000.0

    def describe(self) -> list[tuple[str, str, bool]]:
        """Every key as (name, value as a string, is_default), sorted by name."""
        out = []
        for name in sorted(KEYS):
            value = self.values[name]
            if value is None:  # a topic default left to the storage layer's default
                topic_key = TOPIC_DEFAULT_KEYS[name]
                value = _topic_value(self.topic_defaults, topic_key)
            out.append((name, format_value(value), name not in self.explicit))
        return out


def format_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value)


def _topic_value(config: LogConfig, topic_key: str) -> object:
    return getattr(config, topic_key.replace(".", "_"), "")


def load_config(
    path: str | Path | None = None,
    overrides: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> BrokerConfig:
    """Merge file < environment < overrides and validate the result."""
    raw: dict[str, object] = {}
    if path is not None:
        raw.update(read_config_file(Path(path)))
    raw.update(config_from_env(os.environ if environ is None else environ))
    if overrides:
        raw.update(overrides)
    return BrokerConfig.from_mapping(raw)


def config_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    by_env = {ENV_PREFIX + name.upper().replace(".", "_"): name for name in KEYS}
    out: dict[str, str] = {}
    for var, value in environ.items():
        if not var.startswith(ENV_PREFIX):
            continue
        name = by_env.get(var)
        if name is None:
            log.debug("ignoring environment variable %s: not a broker config key", var)
            continue
        out[name] = value
    return out


def read_config_file(path: Path) -> dict[str, object]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml", ".json"):
        return parse_yaml(text, str(path))
    if suffix in (".properties", ".conf", ".cfg", ".ini"):
        return parse_properties(text, str(path))
    if _looks_like_properties(text):
        return parse_properties(text, str(path))
    return parse_yaml(text, str(path))


_PROP_LINE = re.compile(r"^\s*[A-Za-z0-9_.\-]+\s*=")


def _looks_like_properties(text: str) -> bool:
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        return bool(_PROP_LINE.match(line))
    return False


def parse_properties(text: str, source: str = "<properties>") -> dict[str, object]:
    """Kafka's ``server.properties`` format: ``key=value`` / ``key: value``, # and ! comments,
    a trailing backslash continues a line."""
    out: dict[str, object] = {}
    logical: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        if not pending:
            start = lineno
            if line.strip()[:1] in ("#", "!"):
                continue
        body = line.lstrip() if pending else line
        if body.endswith("\\") and not body.endswith("\\\\"):
            pending += body[:-1]
            continue
        logical.append((start, pending + body))
        pending = ""
    if pending:
        logical.append((start, pending))
    for lineno, line in logical:
        stripped = line.strip()
        if not stripped:
            continue
        match = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", stripped)
        if match is None:
            raise ConfigError(
                f"{source}:{lineno}: cannot parse {stripped!r}; expected key=value"
            )
        out[match.group(1)] = match.group(2).strip()
    return out


def parse_yaml(text: str, source: str = "<yaml>") -> dict[str, object]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "syntax error"
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{source}{where}: invalid YAML: {first}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected a mapping of config keys, got {type(data).__name__}"
        )
    out: dict[str, object] = {}
    _flatten(data, "", out)
    return out


def _flatten(data: Mapping[Any, Any], prefix: str, out: dict[str, object]) -> None:
    """Nested YAML maps become dotted keys: ``log: {dirs: x}`` is ``log.dirs: x``."""
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and name not in KEYS:
            _flatten(value, name + ".", out)
        else:
            out[name] = value


def _unknown_key_message(name: str) -> str:
    close = difflib.get_close_matches(name, list(KEYS), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else "; see the list of broker config keys"
    return f"unknown broker config key {name!r}{hint}"


def _convert(key: _Key, value: object) -> Any:
    name = key.name
    if value is None:
        if key.default is None:
            return None
        raise ConfigError(f"{name} has no value; expected {_expected(key)}")
    converters: dict[str, Callable[[_Key, object], Any]] = {
        "int": _to_int,
        "str": _to_str,
        "bool": _to_bool,
        "list": _to_list,
        "level": _to_level,
    }
    return converters[key.kind](key, value)


def _expected(key: _Key) -> str:
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


def _bad(key: _Key, value: object) -> ConfigError:
    return ConfigError(f"{key.name}={value!r} is invalid; expected {_expected(key)}")


def _to_int(key: _Key, value: object) -> int:
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


def _to_str(key: _Key, value: object) -> str:
    if isinstance(value, (dict, list, tuple)):
        raise _bad(key, value)
    return str(value).strip()


def _to_bool(key: _Key, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _bad(key, value)


def _to_list(key: _Key, value: object) -> tuple[str, ...]:
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


def _to_level(key: _Key, value: object) -> str:
    level = str(value).strip().upper()
    if level == "WARN":
        level = "WARNING"
    if level not in LOG_LEVELS:
        raise _bad(key, value)
    return level


def _topic_defaults(values: Mapping[str, Any]) -> LogConfig:
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


def parse_voters(text: str) -> dict[int, str]:
    """``controller.quorum.voters``; empty means "this broker alone"."""
    if not text.strip():
        return {}
    try:
        return controller_voters(text)
    except ValueError as err:
        raise ConfigError(f"controller.quorum.voters: {err}") from None


def _check_cluster_keys(config: BrokerConfig) -> None:
    _ = config.kafka_listener  # a bad listeners value fails at start, naming the key
    roles = config.process_roles
    bad = sorted(roles - {"broker", "controller"})
    if bad or not roles:
        raise ConfigError(f"process.roles={config.values['process.roles']!r} is invalid; use "
                          f"broker, controller or broker,controller")
    voters = config.quorum_voters
    if "controller" in roles and voters and config.broker_id not in voters:
        raise ConfigError(f"process.roles includes controller but broker.id={config.broker_id} "
                          f"is not in controller.quorum.voters ({sorted(voters)}); add it or "
                          f"set process.roles=broker")
    if "controller" not in roles and config.broker_id in voters:
        raise ConfigError(f"broker.id={config.broker_id} is also a controller voter id in "
                          f"controller.quorum.voters but process.roles=broker; node ids are "
                          f"shared by brokers and controllers: pick another broker.id or add "
                          f"the controller role")
    if "controller" not in roles and not voters:
        raise ConfigError("process.roles=broker needs controller.quorum.voters (the "
                          "controllers to follow), e.g. 0@127.0.0.1:9092")
    if len(voters) % 2 == 0 and voters:
        log.warning("controller.quorum.voters has %d voters; an odd count (1 or 3) tolerates "
                    "the same failures with fewer nodes", len(voters))
    hb, session = (int(config.values["broker.heartbeat.interval.ms"]),
                   int(config.values["broker.session.timeout.ms"]))
    if hb >= session:
        raise ConfigError(f"broker.heartbeat.interval.ms={hb} must be smaller than "
                          f"broker.session.timeout.ms={session}")
    el, raft_hb = (int(config.values["controller.election.timeout.ms"]),
                   int(config.values["controller.heartbeat.interval.ms"]))
    if raft_hb >= el:
        raise ConfigError(f"controller.heartbeat.interval.ms={raft_hb} must be smaller than "
                          f"controller.election.timeout.ms={el}")
