"""How the console consumer prints records, where it starts, and when it stops."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from strom.cli.consume import StopRule, format_record, format_text, record_to_json, start_position
from strom.cli.errors import UsageError


@dataclass
class Rec:
    key: bytes | None = b"k"
    value: bytes | None = b"v"
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    topic: str = "t"
    partition: int = 1
    offset: int = 7
    timestamp: int = 1000


def test_text_is_the_value_alone_by_default() -> None:
    assert format_text(Rec()) == b"v"
    assert format_text(Rec(value=None)) == b"null"
    assert format_text(Rec(value=b"\xff\x00")) == b"\xff\x00"


def test_text_with_key_and_headers_is_tab_separated_like_kafka() -> None:
    rec = Rec(headers=[("h1", b"a"), ("h2", None)])
    assert format_text(rec, print_key=True) == b"k\tv"
    assert format_text(rec, print_key=True, print_headers=True) == b"h1:a,h2:null\tk\tv"
    assert format_text(Rec(key=None), print_key=True, print_headers=True) == b"NO_HEADERS\tnull\tv"


def test_json_has_every_field_and_marks_binary_as_base64() -> None:
    rec = Rec(key=None, value=b"\x00\xff", headers=[("h", b"x")])
    assert record_to_json(rec) == {
        "topic": "t", "partition": 1, "offset": 7, "timestamp": 1000,
        "key": None, "value": {"base64": "AP8="}, "headers": [{"key": "h", "value": "x"}],
    }
    line = format_record(Rec(), "json", False, False)
    assert json.loads(line)["value"] == "v"


def test_start_position() -> None:
    assert start_position(False, None, None) == "latest"
    assert start_position(True, None, None) == "earliest"
    assert start_position(False, "5", 0) == 5
    assert start_position(False, "earliest", 2) == "earliest"
    with pytest.raises(UsageError, match="--offset needs --partition"):
        start_position(False, "5", None)


def test_stop_rule_max_messages() -> None:
    rule = StopRule(max_messages=3, timeout_ms=None)
    assert rule.remaining() == 3
    rule.saw(2, now=0.0)
    assert not rule.done(now=0.0)
    assert rule.remaining() == 1
    rule.saw(1, now=0.0)
    assert rule.done(now=0.0)


def test_stop_rule_idle_timeout_restarts_on_each_record() -> None:
    rule = StopRule(max_messages=None, timeout_ms=1000)
    rule.last_record = 10.0
    assert not rule.done(now=10.9)
    assert rule.poll_timeout_ms(now=10.9) == 100
    rule.saw(1, now=10.9)
    assert not rule.done(now=11.8)
    assert rule.done(now=11.9)
    assert rule.poll_timeout_ms(now=12.5) == 0


def test_stop_rule_without_limits_never_stops() -> None:
    rule = StopRule(None, None)
    rule.saw(10**6, now=0.0)
    assert not rule.done(now=10**9)
    assert rule.poll_timeout_ms() == 500
    assert rule.remaining() is None
