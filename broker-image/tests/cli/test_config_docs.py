"""The config tables people read are generated from the tables the broker validates with."""

from __future__ import annotations

from pathlib import Path

from strom.broker.config_keys import KEYS
from strom.cli.config_docs import render_into
from strom.cli.main import build_parser
from strom.storage.config import TOPIC_CONFIG_DEFS, UNSUPPORTED_TOPIC_CONFIGS

OPERATIONS = Path(__file__).resolve().parents[3] / "docs" / "operations.md"


def test_docs_tables_are_up_to_date() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    assert render_into(text) == text, (
        "docs/operations.md is out of date: run python -m strom.cli.config_docs "
        "docs/operations.md")


def test_docs_list_every_key_once() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    for name in [*KEYS, *TOPIC_CONFIG_DEFS, *UNSUPPORTED_TOPIC_CONFIGS]:
        assert f"`{name}`" in text, name


def _help(*argv: str) -> str:
    parser = build_parser()
    sub = parser
    for word in argv:
        action = next(a for a in sub._actions if a.dest.endswith("command"))
        sub = action.choices[word]  # type: ignore[index]
    return sub.format_help()


def test_cli_help_lists_every_key() -> None:
    for command in (("topic", "create"), ("topic", "alter")):
        text = _help(*command)
        for name in TOPIC_CONFIG_DEFS:
            assert f"  {name} (" in text, (command, name)
    text = _help("broker", "start")
    for name in KEYS:
        assert f"  {name} (" in text, name
