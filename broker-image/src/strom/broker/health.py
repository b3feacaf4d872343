"""The broker's small HTTP server: ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz``.

``/healthz`` answers 200 while the process runs its event loop (a liveness probe); ``/readyz``
answers 200 only after the logs are loaded and the gRPC server is serving, and 503 again once
shutdown begins (a readiness probe). It is a minimal HTTP/1.1 server on asyncio streams; a
scrape reads the broker's state on the event loop and formats it in a worker thread
(:meth:`~strom.broker.metrics.BrokerMetrics.exposition`). GET and HEAD only; one request per
connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)

_MAX_HEADER = 16 * 1024


class HealthServer:
    def __init__(self, exposition: Callable[[], Awaitable[bytes]],
                 ready: Callable[[], bool]) -> None:
        self._exposition = exposition
        self._ready = ready
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host, port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = request_line.split()
            method, target = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            status, ctype, body = await self._route(method, target.split("?", 1)[0])
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1"))
            if method != "HEAD":
                writer.write(body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError):
            pass
        except Exception:
            log.exception("metrics/health request failed")
        finally:
            writer.close()

    async def _route(self, method: str, path: str) -> tuple[str, str, bytes]:
        text = "text/plain; charset=utf-8"
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", text, b"use GET\n"
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, await self._exposition()
        if path == "/healthz":
            return "200 OK", text, b"ok\n"
        if path == "/readyz":
            if self._ready():
                return "200 OK", text, b"ready\n"
            return "503 Service Unavailable", text, b"not ready\n"
        return "404 Not Found", text, b"try /metrics, /healthz or /readyz\n"
