"""UnregisterBroker: only a fenced broker without replicas can be forgotten."""

from __future__ import annotations

import pytest

from strom.controller.metadata import (
    CreateTopic,
    Endpoint,
    FenceBroker,
    MetadataError,
    MetadataImage,
    RegisterBroker,
    UnfenceBroker,
    UnregisterBroker,
    decode_command,
    encode_command,
)


def _image() -> MetadataImage:
    image = MetadataImage()
    commands = []
    for b in range(3):
        commands += [RegisterBroker(b, f"i{b}", (Endpoint("grpc", "h", 9000 + b),)),
                     UnfenceBroker(b, f"i{b}")]
    commands.append(CreateTopic("t", "id", ((0, 1),)))
    for offset, c in enumerate(commands, 1):
        image.apply(offset, c)
    return image


def test_live_or_hosting_brokers_are_refused_then_forgotten() -> None:
    image = _image()
    with pytest.raises(MetadataError, match="alive"):
        image.apply(100, UnregisterBroker(2))
    image.apply(101, FenceBroker(1))
    with pytest.raises(MetadataError, match="still hosts 1 replicas"):
        image.apply(102, UnregisterBroker(1))
    image.apply(103, FenceBroker(2))
    image.apply(104, UnregisterBroker(2))
    assert sorted(image.brokers) == [0, 1]
    with pytest.raises(MetadataError):
        image.apply(105, UnregisterBroker(2))
    assert MetadataImage.from_snapshot(image.to_snapshot()) == image


def test_codec_round_trip() -> None:
    assert decode_command(encode_command(UnregisterBroker(7))) == UnregisterBroker(7)
