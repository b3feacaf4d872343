"""Topic names follow Kafka's rules; errors say what is wrong."""

from __future__ import annotations

import pytest

from strom.broker.topics import validate_topic_name
from strom.protocol.errors import ErrorCode, StromError


@pytest.mark.parametrize("name", ["a", "orders", "a.b_c-D9", "x" * 249, "__consumer_offsets"])
def test_valid_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "empty"),
        (".", "reserved"),
        ("..", "reserved"),
        ("x" * 250, "250 characters"),
        ("a b", "' '"),
        ("a/b", "'/'"),
        ("tópico", "'ó'"),
        ("a:b", "':'"),
    ],
)
def test_invalid_names(name: str, fragment: str) -> None:
    with pytest.raises(StromError) as info:
        validate_topic_name(name)
    assert info.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert fragment in info.value.message
