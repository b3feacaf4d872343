"""Fixtures shared by the test packages of broker-image (CLI, client, broker, ...)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def refused_address() -> Iterator[str]:
    """A 127.0.0.1 port with nothing listening (bound, never listened: connect is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"
