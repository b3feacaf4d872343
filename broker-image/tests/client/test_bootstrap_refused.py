"""A bootstrap list that refuses every connection fails fast with one clear error (issue 12.3).

Before the fix a refused address waited out the whole request timeout (``strom topic list
--bootstrap-server 127.0.0.1:9999`` took ~10.6 s). Now the client reconnects with Kafka's
reconnect backoff for about a second and raises ``BootstrapUnreachable`` naming each address;
after it has once reached the cluster, refusals are a failover and the usual retries apply.
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from strom.client import Admin, Producer
from strom.client.bootstrap import BootstrapTracker, BootstrapUnreachable, is_connect_failure
from strom.protocol.errors import StromError
from strom.testing import running_broker

REFUSED_DETAILS = ("failed to connect to all addresses; last error: UNKNOWN: "
                   "ipv4:127.0.0.1:9999: Failed to connect to remote host: Connection refused")


class Unavailable(grpc.RpcError):
    def __init__(self, details: str, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
                 ) -> None:
        self._details, self._code = details, code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def test_only_connect_failures_count() -> None:
    assert is_connect_failure(Unavailable(REFUSED_DETAILS))
    assert not is_connect_failure(Unavailable("Socket closed"))
    assert not is_connect_failure(Unavailable(REFUSED_DETAILS, grpc.StatusCode.DEADLINE_EXCEEDED))


def test_gives_up_once_every_address_refused_for_the_window() -> None:
    tracker = BootstrapTracker(["a:1", "b:2"], give_up_after_ms=1000)
    tracker.failed("a:1", Unavailable(REFUSED_DETAILS), now_ms=0)
    assert tracker.give_up(now_ms=5000) is None, "b:2 was not tried yet"
    tracker.failed("b:2", Unavailable(REFUSED_DETAILS), now_ms=10)
    assert tracker.give_up(now_ms=900) is None, "still inside the reconnect window"
    err = tracker.give_up(now_ms=1000)
    assert isinstance(err, BootstrapUnreachable) and not err.retriable
    assert "a:1: Connection refused; b:2: Connection refused" in err.message


def test_an_address_that_answers_something_is_reachable() -> None:
    tracker = BootstrapTracker(["a:1"], give_up_after_ms=0)
    tracker.failed("a:1", Unavailable(REFUSED_DETAILS), now_ms=0)
    tracker.failed("a:1", Unavailable("Socket closed"), now_ms=1)
    assert tracker.give_up(now_ms=10) is None


def test_never_gives_up_after_the_cluster_answered_once() -> None:
    tracker = BootstrapTracker(["a:1"], give_up_after_ms=0)
    tracker.succeeded()
    tracker.failed("a:1", Unavailable(REFUSED_DETAILS), now_ms=0)
    assert tracker.give_up(now_ms=10_000) is None


@pytest.mark.integration
def test_admin_fails_fast_when_every_bootstrap_address_refuses(refused_address: str) -> None:
    start = time.monotonic()
    with Admin(refused_address, request_timeout_ms=30_000) as admin, \
            pytest.raises(BootstrapUnreachable) as info:
        admin.list_topics()
    elapsed = time.monotonic() - start
    # generous margin on a loaded machine; before the fix this waited the whole 30 s
    assert elapsed < 12, f"took {elapsed:.1f} s"
    assert refused_address in info.value.message and "Connection refused" in info.value.message


@pytest.mark.integration
def test_producer_fails_fast_when_every_bootstrap_address_refuses(refused_address: str) -> None:
    start = time.monotonic()
    with Producer(refused_address, max_block_ms=30_000) as producer, \
            pytest.raises(BootstrapUnreachable):
        producer.send("t", b"x")
    assert time.monotonic() - start < 12


@pytest.mark.integration
def test_refusals_after_the_cluster_answered_keep_retrying(tmp_path: Path) -> None:
    """A broker restarting is a failover: the call retries until its timeout, not 1 s."""
    with running_broker(tmp_path) as broker, \
            Admin(broker.bootstrap, request_timeout_ms=4000) as admin:
        admin.list_topics()
        broker.stop()
        start = time.monotonic()
        with pytest.raises(StromError) as info:
            admin.list_topics()
        assert not isinstance(info.value, BootstrapUnreachable)
        assert time.monotonic() - start >= 3.5
