"""The broker's Kafka-protocol listener settings, parsed as Kafka parses ``listeners``.

Why it exists: beside its gRPC port a broker speaks Kafka's wire protocol on a listener written
the way Kafka operators write it, ``listeners=PLAINTEXT://HOST:PORT`` (an empty host binds the
broker's ``host``; port 0 picks a free port), and tells clients where to connect with
``advertised.listeners=PLAINTEXT://HOST:PORT`` (default: the listener with the broker's
``advertised.host`` and the bound port). An empty ``listeners`` turns the Kafka listener off.

The listener's name is what the broker registers its endpoint under in the metadata log, so a
Metadata request answered on that listener lists every broker's endpoint of the same name, as
Kafka does. Not supported (ConfigError naming the fix): more than one Kafka listener, security
protocols other than PLAINTEXT (no TLS, no SASL), ``listener.security.protocol.map``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GRPC_LISTENER = "grpc"
"""The endpoint name of the gRPC port in broker registrations (not a Kafka listener)."""

DEFAULT_KAFKA_LISTENER = "PLAINTEXT"
DEFAULT_KAFKA_PORT = 19092
"""9092 is Kafka's, but it is Strom's gRPC port; the Kafka listener defaults to 19092."""

_SPEC = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_]*)://(?P<host>\[[^\]]*\]|[^:/]*):(?P<port>\d+)$")


class ListenerError(ValueError):
    """A bad ``listeners`` / ``advertised.listeners`` value; the message names the fix."""


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listener(key: str, text: str) -> Listener | None:
    """``NAME://HOST:PORT`` -> :class:`Listener`; empty text -> None (no Kafka listener)."""
    text = text.strip()
    if not text:
        return None
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) > 1:
        raise ListenerError(f"{key}={text!r} names {len(parts)} listeners; Strom serves one "
                            f"Kafka listener: use one NAME://HOST:PORT")
    match = _SPEC.match(parts[0])
    if match is None:
        raise ListenerError(f"{key}={text!r} is not NAME://HOST:PORT (e.g. "
                            f"PLAINTEXT://:{DEFAULT_KAFKA_PORT}; an empty host means the "
                            f"broker's host, port 0 a free port)")
    name, host, port = match["name"], match["host"].strip("[]"), int(match["port"])
    if name.upper() in ("SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ListenerError(f"{key}={text!r}: security protocol {name} is not supported; use "
                            f"PLAINTEXT")
    if name == GRPC_LISTENER:
        raise ListenerError(f"{key}={text!r}: the name {GRPC_LISTENER!r} is the gRPC port's; "
                            f"name the Kafka listener PLAINTEXT")
    if not 0 <= port <= 65535:
        raise ListenerError(f"{key}={text!r}: port {port} is not 0..65535")
    return Listener(name, host, port)


def kafka_listeners(listeners: str, advertised: str, host: str, advertised_host: str
                    ) -> tuple[Listener, Listener] | None:
    """(bind, advertised) for the Kafka listener, or None when ``listeners`` is empty.

    The advertised port 0 means "the bound port" (filled in once the socket is bound).
    """
    bind = parse_listener("listeners", listeners)
    if bind is None:
        if advertised.strip():
            raise ListenerError(f"advertised.listeners={advertised!r} is set but listeners is "
                                f"empty; set listeners too, or clear advertised.listeners")
        return None
    bind = Listener(bind.name, bind.host or host, bind.port)
    adv = parse_listener("advertised.listeners", advertised)
    if adv is None:
        adv = Listener(bind.name, advertised_host, 0)
    elif adv.name != bind.name:
        raise ListenerError(f"advertised.listeners={advertised!r} names listener {adv.name!r} "
                            f"but listeners names {bind.name!r}; use the same name")
    elif not adv.host:
        raise ListenerError(f"advertised.listeners={advertised!r} has no host; name the host "
                            f"clients should connect to")
    return bind, adv
