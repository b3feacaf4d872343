"""Consumer-protocol bytes <-> the coordinator's subscriptions and assignments (no sockets)."""

from __future__ import annotations

import struct

import pytest

from strom.broker.kafka.consumer_protocol import (
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from strom.groups.membership import Subscription


def test_a_subscription_round_trips_with_owned_partitions_and_user_data() -> None:
    sub = Subscription(("a", "b"), (("a", 0), ("a", 1), ("b", 3)), b"sticky")
    assert decode_subscription(encode_subscription(sub)) == sub


def test_a_v0_subscription_as_librdkafka_sends_it() -> None:
    # version 0, topics ["t"], user_data null: the bytes librdkafka's range assignor sends
    data = struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", -1)
    assert decode_subscription(data) == Subscription(("t",), (), b"")


def test_a_newer_version_is_read_with_the_newest_known_layout() -> None:
    v3 = encode_subscription(Subscription(("t",)))[2:] + struct.pack(">ih", -1, -1)
    assert decode_subscription(struct.pack(">h", 7) + v3).topics == ("t",)


def test_an_assignment_round_trips_grouped_by_topic() -> None:
    parts = (("x", 2), ("y", 0), ("x", 1))
    assert sorted(decode_assignment(encode_assignment(parts))) == sorted(parts)
    assert decode_assignment(b"") == ()


@pytest.mark.parametrize("data", [b"", b"\x00", b"\xff\xff", b"\x00\x00\x00\x00\x00\x05"])
def test_garbage_is_a_consumer_protocol_error(data: bytes) -> None:
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(data)
