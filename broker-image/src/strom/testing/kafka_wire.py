"""A Kafka request frame built by kio, for tests and benchmarks that speak the wire protocol
without a client library (one helper instead of a copy in each raw driver)."""

from __future__ import annotations

import io
import struct
from typing import Any

from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer

__all__ = ["frame"]

_SIZE = struct.Struct(">i")


def frame(api_key: int, version: int, correlation_id: int, body: Any, *,
          client_id: str = "strom-test") -> bytes:
    """A size-prefixed request: header v2 (``client_id``) and ``body``, by kio."""
    buffer = io.BytesIO()
    entity_writer(RequestHeader)(buffer, RequestHeader(
        request_api_key=api_key, request_api_version=version,  # type: ignore[arg-type]
        correlation_id=correlation_id, client_id=client_id))  # type: ignore[arg-type]
    entity_writer(type(body))(buffer, body)
    data = buffer.getvalue()
    return _SIZE.pack(len(data)) + data
