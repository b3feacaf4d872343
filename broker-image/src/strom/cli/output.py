"""Rendering of command results as ``-o table|json|yaml`` (and the byte fields of records).

Commands build plain data (dicts, lists, str, int) once and pick a renderer; the table form is a
list of rows under upper-case column headers, as ``kubectl`` and the Kafka tools print them. JSON
and YAML carry the same data with lower-case keys so scripts can rely on them.
"""

from __future__ import annotations

import argparse
import base64
import json
from collections.abc import Iterable, Sequence
from typing import Any

import yaml

FORMATS = ("table", "json", "yaml")


def add_output_flag(
    parser: argparse.ArgumentParser, choices: Sequence[str] = FORMATS, default: str = "table"
) -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=list(choices),
        default=default,
        help=f"output format (default: {default})",
    )


def cell(value: Any) -> str:
    """One table cell: None as '-', lists comma-joined, booleans as yes/no."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(cell(v) for v in value) if value else "-"
    if isinstance(value, dict):
        return ",".join(f"{k}={cell(v)}" for k, v in value.items()) if value else "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def format_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned columns separated by two spaces; numbers right-aligned. No trailing blanks."""
    raw_rows = [list(row) for row in rows]
    text_rows = [[cell(v) for v in row] for row in raw_rows]
    widths = [len(c) for c in columns]
    for row in text_rows:
        if len(row) != len(columns):
            raise ValueError(f"row has {len(row)} cells, table has {len(columns)} columns")
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(value))
    numeric = [
        bool(raw_rows) and all(_is_number(r[i]) for r in raw_rows) for i in range(len(columns))
    ]
    lines = []
    for row in [list(columns), *text_rows]:
        parts = [
            value.rjust(widths[i]) if numeric[i] else value.ljust(widths[i])
            for i, value in enumerate(row)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def format_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)


def format_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)


def render(data: Any, fmt: str, table: str) -> str:
    """The output for ``fmt``: ``table`` is the already formatted table text."""
    if fmt == "json":
        return format_json(data)
    if fmt == "yaml":
        return format_yaml(data).rstrip("\n")
    if fmt == "table":
        return table
    raise ValueError(f"unknown output format {fmt!r}; use one of {', '.join(FORMATS)}")


def bytes_field(value: bytes | None) -> str | dict[str, str] | None:
    """A key, value or header value for JSON: UTF-8 text when it decodes, else marked base64.

    ``None`` stays ``null`` (a Kafka null key or tombstone value); non-UTF-8 bytes become
    ``{"base64": "..."}`` so a reader can tell them from text that happens to look like base64.
    """
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}


def human_bytes(n: int | float) -> str:
    """1536 -> '1.5 KiB'."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
