"""Table, JSON and YAML rendering, and how record bytes appear in JSON."""

from __future__ import annotations

import json

import pytest
import yaml

from strom.cli.output import bytes_field, cell, format_table, human_bytes, render


def test_table_aligns_columns_and_right_aligns_numbers() -> None:
    text = format_table(("NAME", "PARTITIONS"), [["a", 3], ["longer", 12]])
    assert text.splitlines() == [
        "NAME    PARTITIONS",
        "a                3",
        "longer          12",
    ]


def test_table_cells_render_none_lists_and_booleans() -> None:
    assert cell(None) == "-"
    assert cell([1, 2]) == "1,2"
    assert cell([]) == "-"
    assert cell(True) == "yes"
    assert cell({"a": 1}) == "a=1"


def test_table_with_no_rows_is_the_header_and_lines_have_no_trailing_blanks() -> None:
    assert format_table(("A", "B"), []) == "A  B"
    for line in format_table(("A", "B"), [["x", None]]).splitlines():
        assert line == line.rstrip()


def test_table_rejects_ragged_rows() -> None:
    with pytest.raises(ValueError):
        format_table(("A", "B"), [["only one"]])


def test_render_json_and_yaml_carry_the_same_data() -> None:
    data = [{"name": "t", "partitions": [{"partition": 0, "isr": [1]}], "configs": {}}]
    assert json.loads(render(data, "json", "unused")) == data
    assert yaml.safe_load(render(data, "yaml", "unused")) == data
    assert render(data, "table", "the table") == "the table"
    with pytest.raises(ValueError):
        render(data, "xml", "")


def test_bytes_field_is_text_when_utf8_else_marked_base64() -> None:
    assert bytes_field(None) is None
    assert bytes_field(b"caf\xc3\xa9") == "café"
    assert bytes_field(b"\xff\x00") == {"base64": "/wA="}


def test_human_bytes() -> None:
    assert human_bytes(10) == "10 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(3 * 1024**3) == "3.0 GiB"
