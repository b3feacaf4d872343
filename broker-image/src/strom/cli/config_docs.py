"""The broker and topic config tables rendered for people: CLI help epilogs and the docs tables.

Both come from the one table of each kind (``strom.broker.config_keys`` and
``strom.storage.config``), so ``strom broker start --help``, ``strom topic create --help`` and
``docs/operations.md`` never list a key the broker does not accept. ``python -m
strom.cli.config_docs docs/operations.md`` rewrites the generated tables in place; a test fails
when the file is out of date. Pure apart from that ``__main__`` entry.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from strom.broker.config_keys import KEYS, TOPIC_DEFAULT_KEYS, BrokerKey, format_value
from strom.storage.config import (
    TOPIC_CONFIG_DEFS,
    UNSUPPORTED_MESSAGE,
    UNSUPPORTED_TOPIC_CONFIGS,
)

ENV_PREFIX = "STROM_"
BROKER_TABLE = "broker-config"
TOPIC_TABLE = "topic-config"


def _broker_default(key: BrokerKey) -> str:
    if key.default is None:
        topic_key = TOPIC_DEFAULT_KEYS[key.name]
        return format_value(TOPIC_CONFIG_DEFS[topic_key].default)
    return format_value(key.default)


def _range(minimum: int | None, maximum: int | None) -> str:
    if minimum is None and maximum is None:
        return ""
    return f"[{'' if minimum is None else minimum}, {'' if maximum is None else maximum}]"


def broker_markdown() -> str:
    rows = ["| key | default | range | environment | what it is |",
            "| --- | --- | --- | --- | --- |"]
    for key in KEYS.values():
        env = ENV_PREFIX + key.name.upper().replace(".", "_")
        default = _broker_default(key)
        rows.append(f"| `{key.name}` | {f'`{default}`' if default else '(empty)'} | "
                    f"{_range(key.minimum, key.maximum)} | `{env}` | {key.doc} |")
    return "\n".join(rows)


def topic_markdown() -> str:
    rows = ["| key | type | default | what it is |", "| --- | --- | --- | --- |"]
    for name in sorted(TOPIC_CONFIG_DEFS):
        d = TOPIC_CONFIG_DEFS[name]
        rows.append(f"| `{name}` | {d.type} | `{format_value(d.default)}` | {d.doc} |")
    if UNSUPPORTED_TOPIC_CONFIGS:
        unsupported = ", ".join(f"`{k}`" for k in UNSUPPORTED_TOPIC_CONFIGS)
        rows.append("")
        rows.append(f"Refused by name (each {UNSUPPORTED_MESSAGE}): {unsupported}.")
    return "\n".join(rows)


def topic_epilog() -> str:
    """``strom topic create/alter --help``: every topic config with its type and default."""
    lines = ["topic configs (Kafka's names):"]
    for name in sorted(TOPIC_CONFIG_DEFS):
        d = TOPIC_CONFIG_DEFS[name]
        lines.append(f"  {name} ({d.type}, default {format_value(d.default)}): {d.doc}")
    return "\n".join(lines)


def broker_epilog() -> str:
    """``strom broker start --help``: every broker config key with its default."""
    lines = ["broker config keys (--set KEY=VALUE, or STROM_<KEY>):"]
    for key in KEYS.values():
        lines.append(f"  {key.name} (default {_broker_default(key)}): {key.doc}")
    return "\n".join(lines)


def _markers(name: str) -> tuple[str, str]:
    return (f"<!-- generated: {name} (python -m strom.cli.config_docs) -->",
            f"<!-- end generated: {name} -->")


def render_into(text: str) -> str:
    """``text`` with each generated table between its markers replaced by the current one."""
    for name, table in ((BROKER_TABLE, broker_markdown()), (TOPIC_TABLE, topic_markdown())):
        begin, end = _markers(name)
        head, sep, rest = text.partition(begin)
        if not sep:
            raise ValueError(f"marker {begin!r} not found")
        _, sep, tail = rest.partition(end)
        if not sep:
            raise ValueError(f"marker {end!r} not found")
        text = f"{head}{begin}\n{table}\n{end}{tail}"
    return text


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m strom.cli.config_docs",
        description="Rewrite the generated config tables (between their <!-- generated --> "
                    "markers) of a Markdown file from the broker's and topics' config tables.")
    parser.add_argument("doc", type=Path, help="the Markdown file, e.g. docs/operations.md")
    args = parser.parse_args(argv)
    path: Path = args.doc
    try:
        path.write_text(render_into(path.read_text(encoding="utf-8")), encoding="utf-8")
    except (OSError, ValueError) as exc:
        print(f"config_docs: error: {path}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
