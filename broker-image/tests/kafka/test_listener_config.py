"""``listeners`` / ``advertised.listeners`` parsed as Kafka writes them, with clear errors."""

from __future__ import annotations

import pytest

from strom.broker.config import BrokerConfig, ConfigError
from strom.broker.listeners import Listener


def test_the_kafka_listener_is_on_by_default_on_its_own_port() -> None:
    config = BrokerConfig.from_mapping({})
    assert config.kafka_listener == (Listener("PLAINTEXT", "127.0.0.1", 19092),
                                     Listener("PLAINTEXT", "127.0.0.1", 0))


def test_advertised_listeners_default_to_advertised_host() -> None:
    config = BrokerConfig.from_mapping({"listeners": "PLAINTEXT://0.0.0.0:9093",
                                        "advertised.host": "broker-0.strom"})
    assert config.kafka_listener == (Listener("PLAINTEXT", "0.0.0.0", 9093),
                                     Listener("PLAINTEXT", "broker-0.strom", 0))
    explicit = BrokerConfig.from_mapping({"listeners": "PLAINTEXT://:9093",
                                          "advertised.listeners": "PLAINTEXT://kafka.example:19093"})
    assert explicit.kafka_listener is not None
    assert explicit.kafka_listener[1] == Listener("PLAINTEXT", "kafka.example", 19093)


def test_an_empty_listeners_turns_the_kafka_listener_off() -> None:
    assert BrokerConfig.from_mapping({"listeners": ""}).kafka_listener is None


@pytest.mark.parametrize(("settings", "fragment"), [
    ({"listeners": "PLAINTEXT://:9093,OTHER://:9094"}, "one Kafka listener"),
    ({"listeners": "localhost:9093"}, "NAME://HOST:PORT"),
    ({"listeners": "SSL://:9093"}, "not supported"),
    ({"listeners": "PLAINTEXT://:99999"}, "port 99999"),
    ({"listeners": "PLAINTEXT://:9093", "advertised.listeners": "EXTERNAL://h:1"},
     "same name"),
    ({"listeners": "", "advertised.listeners": "PLAINTEXT://h:1"}, "listeners is empty"),
])
def test_bad_listeners_fail_at_start_naming_the_key(settings: dict[str, str],
                                                    fragment: str) -> None:
    with pytest.raises(ConfigError, match="listeners") as err:
        BrokerConfig.from_mapping(settings)
    assert fragment in str(err.value)
