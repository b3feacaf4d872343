"""Bytes that do not decode as the method's protobuf message get INVALID_ARGUMENT with Kafka's
INVALID_REQUEST and a one-line reason, on every method of every service; the broker logs one
rate-limited line per method, never a traceback, and stays ready."""

from __future__ import annotations

import random
from pathlib import Path

import grpc
import pytest

from strom.protocol.errors import ErrorCode
from strom.testing import running_broker
from strom.transport.status import from_rpc_error

from .grpc_methods import METHODS

pytestmark = pytest.mark.integration

# Not protobuf at all: a bad tag, a length running past the end, a truncated varint.
GARBAGE = [b"\xff\xff\xff", b"\x0a\x05abc", b"\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80"]


def test_every_method_rejects_undecodable_bytes_with_invalid_argument(tmp_path: Path) -> None:
    rng = random.Random(13)
    with running_broker(tmp_path) as broker, grpc.insecure_channel(broker.bootstrap) as channel:
        for method in METHODS:
            call = channel.unary_unary(method)
            for payload in GARBAGE:
                with pytest.raises(grpc.RpcError) as info:
                    call(payload, timeout=10)
                assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, payload)
                err = from_rpc_error(info.value)
                assert err.code == ErrorCode.INVALID_REQUEST
                name = method.rsplit("/", 1)[1]
                assert err.message.startswith(f"{name}: the request does not decode")
                assert "\n" not in err.message
        # Many more for one method: the log stays at one line per method and interval.
        produce = channel.unary_unary("/strom.v1.Broker/Produce")
        for _ in range(200):
            with pytest.raises(grpc.RpcError):
                produce(b"\xff" + bytes(rng.randrange(256) for _ in range(20)), timeout=10)
        assert broker.is_ready()
        stderr = broker.stderr_path.read_text()
        assert "Traceback" not in stderr
        assert stderr.count("rejected a malformed Produce request") == 1
