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


def _bound_buffers(settings: dict[str, object]) -> tuple[int, int]:
    """SO_RCVBUF and SO_SNDBUF of a real Kafka listener's socket, bound on 127.0.0.1."""
    import asyncio
    import socket

    from strom.broker.kafka.listener import KafkaListener

    async def bind() -> tuple[int, int]:
        listener = KafkaListener(BrokerConfig.from_mapping(settings),
                                 Listener("PLAINTEXT", "127.0.0.1", 0))
        await listener.bind()
        try:
            assert listener._server is not None
            sock = listener._server.sockets[0]
            return (sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
                    sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
        finally:
            await listener.stop()

    return asyncio.run(bind())


def test_socket_buffers_are_kafkas_by_default_and_configurable() -> None:
    # Kafka's socket.receive.buffer.bytes (100 KiB by default; -1 the OS default) and
    # socket.send.buffer.bytes (the OS default here): accepted sockets inherit them. Linux
    # reports twice the size set.
    assert _bound_buffers({})[0] == 2 * 102_400
    assert _bound_buffers({"socket.receive.buffer.bytes": "65536",
                           "socket.send.buffer.bytes": "32768"}) == (2 * 65_536, 2 * 32_768)
    assert _bound_buffers({"socket.receive.buffer.bytes": "-1"})[0] != 2 * 102_400


def test_a_bad_socket_buffer_size_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"socket\.receive\.buffer\.bytes"):
        BrokerConfig.from_mapping({"socket.receive.buffer.bytes": "-5"})
