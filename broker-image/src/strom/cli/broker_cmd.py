"""``strom broker start``: run one broker in the foreground (what the container image runs).

Settings come from ``--config FILE`` (YAML or .properties), then ``STROM_<KEY>`` environment
variables, then ``--set key=value`` and the common flags (``--broker-id``, ``--port`` ...), later
winning. The whole configuration is validated before anything starts; a bad value ends as one
line naming the key. SIGTERM (and Ctrl-C) shut down gracefully.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from strom.cli.config_docs import broker_epilog
from strom.cli.errors import CliError
from strom.cli.parsing import parse_kv_list

#: Common flags -> broker config keys.
FLAG_KEYS = {
    "broker_id": "broker.id",
    "host": "host",
    "port": "port",
    "metrics_port": "metrics.port",
    "log_dirs": "log.dirs",
    "log_level": "log.level",
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    broker = sub.add_parser("broker", help="run a broker", description="Run a Strom broker.")
    cmds = broker.add_subparsers(dest="broker_command", metavar="COMMAND", required=True)
    start = cmds.add_parser(
        "start", help="start a broker in the foreground",
        description="Start a broker in the foreground. Settings: --config FILE, then "
        "STROM_<KEY> environment variables (log.dirs -> STROM_LOG_DIRS), then --set and "
        "the flags below. SIGTERM or Ctrl-C stops it gracefully.",
        epilog=broker_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    start.add_argument("--config", type=Path, default=None, metavar="FILE",
                       help="broker config file (YAML or Kafka-style .properties)")
    start.add_argument("--set", action="append", metavar="KEY=VALUE", dest="overrides",
                       help="set any broker config key, e.g. --set num.partitions=3 "
                       "(repeatable)")
    start.add_argument("--broker-id", type=int, metavar="ID", help="broker.id")
    start.add_argument("--host", metavar="ADDR", help="host: the address to bind")
    start.add_argument("--port", type=int, metavar="PORT", help="port: the gRPC port")
    start.add_argument("--metrics-port", type=int, metavar="PORT",
                       help="metrics.port: /metrics, /healthz, /readyz")
    start.add_argument("--log-dirs", metavar="DIRS", help="log.dirs: comma-separated data dirs")
    start.add_argument("--log-level", metavar="LEVEL", help="log.level: DEBUG, INFO, WARNING")
    start.set_defaults(func=cmd_start)


def overrides_from(args: argparse.Namespace) -> dict[str, str]:
    """``--set`` pairs, then the common flags (which win over ``--set``)."""
    overrides = parse_kv_list(args.overrides, "--set")
    for attr, key in FLAG_KEYS.items():
        value = getattr(args, attr, None)
        if value is not None:
            overrides[key] = str(value)
    return overrides


def cmd_start(args: argparse.Namespace) -> int:
    overrides = overrides_from(args)
    from strom.broker.config import ConfigError, load_config
    from strom.broker.server import run

    if args.config is not None and not args.config.is_file():
        raise CliError(f"--config {args.config}: no such file; give the path of a broker config")
    try:
        config = load_config(args.config, overrides)
    except ConfigError as err:
        raise CliError(f"invalid broker config: {err}") from None
    return run(config)
