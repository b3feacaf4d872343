"""``python -m strom.broker --config FILE [--set key=value ...]``: run one broker.

The same entry point as ``strom broker start``, without the CLI package, so tests and containers
can start a broker directly. Config errors print one line and exit 2.
"""

from __future__ import annotations

import argparse
import sys

from strom.broker.config import ConfigError, load_config


def parse_sets(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {pair!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strom.broker",
                                     description="Run one Strom broker.")
    parser.add_argument("--config", "-c", help="YAML or .properties config file")
    parser.add_argument("--set", "-s", action="append", default=[], metavar="KEY=VALUE",
                        help="override one config key (repeatable)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, parse_sets(args.set))
    except ConfigError as err:
        print(f"strom broker: config error: {err}", file=sys.stderr)
        return 2
    from strom.broker.server import run  # after the config: a config error answers at once

    return run(config)


def skip_test_only_imports() -> None:
    """Make ``import hypothesis`` fail in this broker process.

    kio imports hypothesis whenever it is installed - a test-only dependency of the dev
    environment, absent from the broker image - and registers a strategy per type: ~0.3 s of
    CPU and 1-5 s of wall time at load 15 in every broker start of the tests and benchmarks
    (issue 21 item 5). A ``None`` entry in ``sys.modules`` makes the import raise
    ImportError, which kio handles. Only for a process started as the broker (``python -m
    strom.broker``), never in a test process that imports this module."""
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]


if __name__ == "__main__":
    skip_test_only_imports()
    sys.exit(main())
