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

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.broker.config_keys import (
    KEYS,
    TOPIC_DEFAULT_KEYS,
    ConfigError,
    convert,
    format_value,
    topic_defaults,
    unknown_key_message,
)
from strom.broker.listeners import Listener, ListenerError, kafka_listeners
from strom.controller.voters import parse_voters as controller_voters
from strom.storage.config import LogConfig

__all__ = [
    "KEYS",
    "BrokerConfig",
    "ConfigError",
    "config_from_env",
    "format_value",
    "load_config",
    "parse_properties",
    "parse_voters",
    "parse_yaml",
    "read_config_file",
]

log = logging.getLogger(__name__)

ENV_PREFIX = "STROM_"




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
                raise ConfigError(unknown_key_message(name))
            values[name] = convert(key, value)
        for key in KEYS.values():
            values.setdefault(key.name, key.default)
        config = cls(values, frozenset(raw), topic_defaults(values))
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
    def log_open_segments_max(self) -> int:
        """``log.open.segments.max`` (0: derived from the open-file limit at start)."""
        return int(self.values["log.open.segments.max"])

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
    import yaml  # only for a YAML file: ~0.1 s of a broker's start otherwise (issue 21 item 5)

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
