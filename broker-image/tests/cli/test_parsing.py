"""The pure flag-value parsers: bootstrap, k=v, key splitting, times, offsets, acks."""

from __future__ import annotations

import pytest

from strom.cli.errors import UsageError
from strom.cli.parsing import (
    default_bootstrap,
    format_timestamp,
    parse_acks,
    parse_bootstrap,
    parse_kv,
    parse_kv_list,
    parse_offset,
    parse_time,
    split_key,
    strip_newline,
)


def test_default_bootstrap_comes_from_the_environment_else_localhost() -> None:
    assert default_bootstrap({}) == "127.0.0.1:9092"
    assert default_bootstrap({"STROM_BOOTSTRAP_SERVERS": "h:1"}) == "h:1"
    assert default_bootstrap({"STROM_BOOTSTRAP_SERVERS": "  "}) == "127.0.0.1:9092"


@pytest.mark.parametrize("value,expected", [
    ("127.0.0.1:9092", "127.0.0.1:9092"),
    (" a:1 , b:2 ", "a:1,b:2"),
    ("[::1]:9092", "[::1]:9092"),
])
def test_parse_bootstrap_accepts_host_port_lists(value: str, expected: str) -> None:
    assert parse_bootstrap(value) == expected


@pytest.mark.parametrize("value", ["", "localhost", ":9092", "h:port", "h:0", "h:70000", "a:1,b"])
def test_parse_bootstrap_rejects_bad_addresses_naming_the_flag(value: str) -> None:
    with pytest.raises(UsageError, match="--bootstrap-server"):
        parse_bootstrap(value)


def test_parse_kv_keeps_equals_signs_in_values_and_allows_empty_values() -> None:
    assert parse_kv("a=b=c", "--config") == ("a", "b=c")
    assert parse_kv("a=", "--config") == ("a", "")
    with pytest.raises(UsageError, match="--config 'a' is not KEY=VALUE"):
        parse_kv("a", "--config")
    with pytest.raises(UsageError):
        parse_kv("=v", "--config")


def test_parse_kv_list_later_values_win() -> None:
    assert parse_kv_list(["a=1", "b=2", "a=3"], "--set") == {"a": "3", "b": "2"}
    assert parse_kv_list(None, "--set") == {}


def test_split_key_without_separator_gives_a_null_key() -> None:
    assert split_key(b"a:b", None) == (None, b"a:b")


def test_split_key_splits_at_the_first_separator_only() -> None:
    assert split_key(b"k:v:w", b":") == (b"k", b"v:w")
    assert split_key(b":v", b":") == (b"", b"v")
    assert split_key(b"k::", b"::") == (b"k", b"")


def test_split_key_rejects_a_line_without_the_separator() -> None:
    with pytest.raises(ValueError, match="no key separator"):
        split_key(b"novalue", b":")


def test_strip_newline_removes_one_lf_or_crlf() -> None:
    assert strip_newline(b"a\n") == b"a"
    assert strip_newline(b"a\r\n") == b"a"
    assert strip_newline(b"a") == b"a"
    assert strip_newline(b"a\n\n") == b"a\n"


@pytest.mark.parametrize("value,expected", [
    ("earliest", "earliest"),
    ("LATEST", "latest"),
    ("0", 0),
    ("1700000000000", 1_700_000_000_000),
    ("1970-01-01T00:00:01Z", 1000),
    ("1970-01-01T00:00:01", 1000),  # no zone: UTC
    ("1970-01-01T02:00:01+02:00", 1000),
    ("2024-05-01", 1_714_521_600_000),
    ("2024-05-01T12:00:00.250Z", 1_714_564_800_250),
])
def test_parse_time_accepts_names_millis_and_iso8601(value: str, expected: int | str) -> None:
    assert parse_time(value) == expected


@pytest.mark.parametrize("value", ["yesterday", "-5", "2024-13-01", "1969-12-31T00:00:00Z"])
def test_parse_time_rejects_other_values_naming_the_flag(value: str) -> None:
    with pytest.raises(UsageError, match="--time"):
        parse_time(value)


def test_format_timestamp_is_iso8601_utc_with_millis() -> None:
    assert format_timestamp(1_714_564_800_250) == "2024-05-01T12:00:00.250Z"
    assert format_timestamp(-1) is None
    assert format_timestamp(None) is None


def test_parse_offset() -> None:
    assert parse_offset("42") == 42
    assert parse_offset("Earliest") == "earliest"
    assert parse_offset("latest") == "latest"
    for bad in ("-1", "x", "1.5"):
        with pytest.raises(UsageError, match="--offset"):
            parse_offset(bad)


def test_parse_acks() -> None:
    assert parse_acks("0") == 0
    assert parse_acks("1") == 1
    assert parse_acks("all") == "all"
    assert parse_acks("-1") == "all"
    with pytest.raises(UsageError, match="--acks '2'"):
        parse_acks("2")
