"""The Kafka-protocol listener: an asyncio protocol per connection on the broker's event loop,
with one task per connection, requests answered in order.

Why it exists: this is the only socket code of the Kafka front; what a frame means is decided in
``frames`` and what a request does in the per-API modules. It behaves as Kafka's
``SocketServer`` does:

- Frames are a signed 32-bit size and that many bytes. A size below 0 or above
  ``socket.request.max.bytes`` closes the connection (Kafka's InvalidReceiveException), as do a
  frame that is not a valid request of a served API and version (``frames.Reject``).
- A connection is served one request at a time, in arrival order (Kafka mutes a channel while
  one of its requests is in flight): pipelined requests wait in the socket buffer, responses go
  out in request order, and producers' in-flight batches are appended in the order they were
  sent. Answers are written when no further request is already read whole (``READ_AHEAD``
  bytes are read at a time): the answers to pipelined requests share one write (one send
  instead of one per request, and one wake-up of the client: librdkafka's default pipelining
  at linger.ms=0 sends one request per record, and a send per answer cost ~1 ms of wall time
  each on the loaded 2-core machine). Reading pauses once ``READ_AHEAD`` bytes holding the
  next request whole wait unread, and the task serves nothing more until the queued answers
  were handed to the socket and it drained below its high-water mark, so per-connection
  memory is one request, ``READ_AHEAD`` bytes and one socket read, the answers to one
  pipelined Produce run (or ``FLUSH_BYTES`` of others, or one larger answer) and the
  transport's buffer; a client that stops reading stops being read.
- Requests the core answers without waiting (Produce with acks 0/1 to known topics:
  :func:`strom.broker.kafka.produce.answer_now`) are served in ``data_received`` itself when
  they arrive while the connection's task waits for a request with nothing read ahead; their
  answers are written there. Everything else, and everything behind the first request that is
  not such, goes to the task in order. Why: librdkafka sends one partition per Produce
  request and at 1,000 partitions most arrive alone; waking the task for each cost a second
  event-loop iteration (with its own ``epoll_wait``) and two timeout objects, and the broker's
  CPU per lone request bounds confluent-kafka's keyed produce there (issue 21 item 1; figures
  in docs/decisions.md, helper ``lone21``). Same handler, answers, order and metrics as the
  task's pipelined-Produce path.
- ``connections.max.idle.ms`` without a byte read (or without draining a response) closes the
  connection: a half-open or stalled peer does not keep a task forever. (Kafka counts any
  read as activity too; one timer per wait, moved on only when it fires.)
- acks=0 Produce gets no response; a failed acks=0 Produce closes the connection.
- An unexpected exception in a handler is logged with its traceback and closes that connection
  (the client reconnects and retries); it never reaches other connections or the event loop.
- What a client can cause is logged at a bounded rate (``strom.ratelimit``: one line per kind
  per 10 s, then the count suppressed): a fuzzing client sending 8,500 bad frames wrote 0.9 MB
  of "closing Kafka connection" lines before.

Metrics: ``strom_broker_requests`` / ``strom_broker_request_duration_seconds`` with
``listener=<the listener's name>`` and the API's Kafka name, ``strom_broker_connections`` (open
now) and ``strom_broker_connections_created``, both by listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
from typing import Any

from strom.broker.config import BrokerConfig
from strom.broker.core import BrokerCore
from strom.broker.fetch_sessions import FetchSessionCache
from strom.broker.kafka import produce as kafka_produce
from strom.broker.kafka.apis import ADVERTISED, APIS, SUPPORTED
from strom.broker.kafka.context import Context
from strom.broker.kafka.frames import (
    BIG_WRITE,
    ApiVersionsFallback,
    Chunk,
    Reject,
    Request,
    api_versions_fallback,
    encode_response_chunks,
    parse_request,
    read_size,
)
from strom.broker.kafka.produce import CloseConnection
from strom.broker.listeners import Listener
from strom.protocol.errors import ErrorCode
from strom.ratelimit import RateLimitedLog

log = logging.getLogger("strom.broker.kafka")
#: Record sets go to the socket in pieces of this size (see ``KafkaListener._flush``).
SEND_PIECE = 1 << 20
#: Bytes read from the socket at a time: whole small requests pipelined behind the one being
#: served are seen, so their answers can share one write.
READ_AHEAD = 65_536
#: Queued answers are written once they reach this size, even if more requests are waiting.
FLUSH_BYTES = 65_536
_SIZE = struct.Struct(">i")
_KEY = struct.Struct(">h")
_client_caused = RateLimitedLog(log)


class KafkaListener:
    """``await bind()`` (before the core exists, so the bound port can be registered), then
    ``start(core)``, later ``await stop()``."""

    def __init__(self, config: BrokerConfig, bind: Listener) -> None:
        self.name = bind.name
        self.host = bind.host
        self.requested_port = bind.port
        self.port = 0
        self.max_request_bytes = config.max_message_size
        self.idle_s = int(config.get("connections.max.idle.ms")) / 1000.0
        self.buffers = {socket.SO_RCVBUF: int(config.get("socket.receive.buffer.bytes")),
                        socket.SO_SNDBUF: int(config.get("socket.send.buffer.bytes"))}
        self.core: BrokerCore | None = None
        self.fetch_sessions = FetchSessionCache()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._request_counters: dict[tuple[str, str], Any] = {}
        self._durations: dict[str, Any] = {}

    async def bind(self) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self, loop), self.host, self.requested_port,
            start_serving=False, reuse_address=True)
        for sock in self._server.sockets:  # accepted sockets inherit them (and the TCP window
            for option, size in self.buffers.items():  # scale is chosen for them), as Kafka's
                if size >= 0:  # Acceptor sets the server socket's receive buffer
                    sock.setsockopt(socket.SOL_SOCKET, option, size)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def start(self, core: BrokerCore) -> None:
        assert self._server is not None, "bind() first"
        self.core = core
        await self._server.start_serving()

    def _requests(self, api: str, result: str) -> Any:
        """``strom_broker_requests`` of this listener for ``api`` and ``result`` (the labelled
        child looked up once: a lookup costs about as much as the increment, per request)."""
        child = self._request_counters.get((api, result))
        if child is None:
            assert self.core is not None
            child = self._request_counters[(api, result)] = self.core.metrics.requests.labels(
                api, result, self.name)
        return child

    def _duration(self, api: str) -> Any:
        """``strom_broker_request_duration_seconds`` of this listener for ``api``."""
        child = self._durations.get(api)
        if child is None:
            assert self.core is not None
            child = self._durations[api] = self.core.metrics.request_duration.labels(
                api, self.name)
        return child

    async def stop(self) -> None:
        """Stop accepting, close every connection (in-flight requests are cancelled)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
            self._server = None

    def _connected(self, conn: _Connection) -> None:
        """A new connection (``connection_made``): its task serves what is not served now."""
        core = self.core
        assert core is not None
        task = asyncio.get_running_loop().create_task(self._serve(core, conn))
        self._connections.add(task)

    async def _serve(self, core: BrokerCore, conn: _Connection) -> None:
        task = asyncio.current_task()
        core.metrics.connections.labels(self.name).inc()
        core.metrics.connections_created.labels(self.name).inc()
        try:
            while await self._one(core, conn):
                pass
            await self._flush(conn)  # answers to the requests before the one that closes
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed the connection
        except TimeoutError:
            log.debug("closing idle Kafka connection from %s after %.0fs", conn.peer, self.idle_s)
        except asyncio.CancelledError:
            pass  # stop(): the listener closes; ending quietly keeps asyncio's callback calm
        finally:
            if task is not None:
                self._connections.discard(task)
            core.metrics.connections.labels(self.name).dec()
            conn.serving = False
            conn.transport.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(conn.closed), 1.0)

    async def _one(self, core: BrokerCore, conn: _Connection) -> bool:
        """Read, handle and answer one request; False closes the connection."""
        peer = conn.peer
        buf = conn.buf
        while len(buf) < 4:
            await conn.fill()
        size = _SIZE.unpack_from(buf)[0]
        if size < 0 or size > self.max_request_bytes:
            _client_caused.warning("request size", "closing Kafka connection from %s: a request "
                                   "of %d bytes is outside 0..socket.request.max.bytes (%d)",
                                   peer, size, self.max_request_bytes)
            return False
        while len(buf) - 4 < size:
            await conn.fill()
        with memoryview(buf) as view:
            frame = bytes(view[4:4 + size])
        del buf[:4 + size]
        parsed = parse_request(frame, SUPPORTED)
        if isinstance(parsed, Reject):
            _client_caused.log(logging.INFO, "invalid request", "closing Kafka connection from "
                               "%s: %s", peer, parsed.reason)
            core.metrics.requests.labels("unknown", "INVALID_REQUEST", self.name).inc()
            return False
        if isinstance(parsed, ApiVersionsFallback):
            core.metrics.requests.labels("ApiVersions", "UNSUPPORTED_VERSION", self.name).inc()
            return await self._answer(conn, [api_versions_fallback(parsed, ADVERTISED)])
        api = APIS[parsed.api_key]
        if parsed.api_key == kafka_produce.KEY:
            run = self._pipelined_produce(conn)
            if run:
                return await self._produce_run(core, conn, [parsed, *run])
        context = Context(core, parsed, self.name, ADVERTISED, self.fetch_sessions)
        metrics = core.metrics
        metrics.inflight.inc()
        started = time.perf_counter()
        result = "ok"
        try:
            response = await api.handle(context)
        except CloseConnection:
            result = "closed"
            return False
        except asyncio.CancelledError:
            result = "cancelled"
            raise
        except Exception:
            result = ErrorCode.UNKNOWN_SERVER_ERROR.name
            _client_caused.error(f"failed {api.name}", "Kafka %s v%d from %s (client %r) failed "
                                 "inside the broker; closing the connection", api.name,
                                 parsed.api_version, peer, parsed.client_id, exc_info=True)
            return False
        finally:
            metrics.inflight.dec()
            self._requests(api.name, result).inc()
            self._duration(api.name).observe(time.perf_counter() - started)
        if response is None:
            return True
        if isinstance(response, bytes):  # already encoded (templated answers)
            return await self._answer(conn, [response])
        if isinstance(response, list):  # already encoded as chunks (Fetch's templated answers)
            return await self._answer(conn, response)
        try:
            data = encode_response_chunks(parsed.correlation_id, response)
        except Exception:
            log.exception("Kafka %s v%d response to %s could not be encoded; closing the "
                          "connection", api.name, parsed.api_version, peer)
            return False
        return await self._answer(conn, data)

    def _pipelined_produce(self, conn: _Connection) -> list[Request]:
        """The valid Produce requests read whole right behind the one being served (taken
        from the read buffer); the first frame that is not one stays for :meth:`_one`."""
        run: list[Request] = []
        buf = conn.buf
        while len(buf) >= 6:
            size = _SIZE.unpack_from(buf)[0]
            if not 2 <= size <= min(len(buf) - 4, self.max_request_bytes) \
                    or _KEY.unpack_from(buf, 4)[0] != kafka_produce.KEY:
                break  # not read whole, out of bounds, or not a Produce request
            with memoryview(buf) as view:  # one copy of the frame (a bytearray slice is one)
                parsed = parse_request(bytes(view[4:4 + size]), SUPPORTED)
            if not isinstance(parsed, Request):
                break
            del buf[:4 + size]
            run.append(parsed)
        return run

    async def _produce_run(self, core: BrokerCore, conn: _Connection,
                           requests: list[Request]) -> bool:
        """Serve Produce requests that arrived pipelined together
        (:func:`strom.broker.kafka.produce.handle_pipelined`) and queue their answers in order;
        False closes the connection (after the answers before a failed acks=0 request)."""
        contexts = [Context(core, r, self.name, ADVERTISED, self.fetch_sessions)
                    for r in requests]
        metrics = core.metrics
        metrics.inflight.inc(len(requests))
        started = time.perf_counter()
        answers: list[Any] = []
        failure: str | None = None
        try:
            answers = await kafka_produce.handle_pipelined(contexts)
        except asyncio.CancelledError:
            failure = "cancelled"
            raise
        except Exception:
            failure = ErrorCode.UNKNOWN_SERVER_ERROR.name
            self._produce_failed(conn, requests)
            return False
        finally:
            self._produce_served(core, len(requests), answers, failure, started)
        if not self._queue_produce_answers(conn, requests, answers):
            return False
        if conn.pending_bytes >= FLUSH_BYTES or (conn.pending and not conn.next_frame_here()):
            await self._flush(conn)  # one write for the run's answers
        return True

    def _serve_now(self, conn: _Connection, data: bytes) -> int:
        """Serve the Produce requests at the start of ``data`` (bytes just read while the
        connection's task waits for a request, nothing read ahead) here, in ``data_received``,
        if the core can answer them without waiting
        (:func:`strom.broker.kafka.produce.answer_now`), and write their answers: how many
        bytes of ``data`` were served (0: none; the rest goes to the connection's task).

        Why: a request that arrives alone (librdkafka's one-partition Produce requests over
        many partitions, with its backpressure threshold of 1) otherwise costs a wake-up of
        the task and a second event-loop iteration (with its own ``epoll_wait``) on top of the
        read. The requests are served as :meth:`_produce_run` serves them: same handler, same
        answers in the same order, same metrics; a failed acks=0 request closes the
        connection after the answers before it."""
        requests: list[Request] = []
        at, end = 0, len(data)
        while at + 6 <= end:
            size = _SIZE.unpack_from(data, at)[0]
            if not 2 <= size <= min(end - at - 4, self.max_request_bytes) \
                    or _KEY.unpack_from(data, at + 4)[0] != kafka_produce.KEY:
                break  # not whole, out of bounds, or not a Produce request: for the task
            parsed = parse_request(data[at + 4:at + 4 + size], SUPPORTED)
            if not isinstance(parsed, Request):
                break
            requests.append(parsed)
            at += 4 + size
        if not requests:
            return 0
        core = self.core
        assert core is not None
        contexts = [Context(core, r, self.name, ADVERTISED, self.fetch_sessions)
                    for r in requests]
        metrics = core.metrics
        metrics.inflight.inc(len(requests))
        started = time.perf_counter()
        answers: list[Any] | None = None
        failure: str | None = None
        try:
            answers = kafka_produce.answer_now(contexts)
        except Exception:
            failure = ErrorCode.UNKNOWN_SERVER_ERROR.name
            self._produce_failed(conn, requests)
            conn.transport.close()
            return end
        finally:
            if answers is None and failure is None:
                metrics.inflight.dec(len(requests))  # not served here: nothing counted
            else:
                self._produce_served(core, len(requests), answers or [], failure, started)
        if answers is None:
            return 0
        if not self._queue_produce_answers(conn, requests, answers):
            conn.write_pending()
            conn.transport.close()  # the rest is not served (a failed acks=0 request)
            return end
        conn.write_pending()
        return at

    def _produce_failed(self, conn: _Connection, requests: list[Request]) -> None:
        """Log a Produce run that failed inside the broker (call in the ``except`` block)."""
        _client_caused.error("failed Produce", "Kafka Produce (%d pipelined requests) from "
                             "%s (client %r) failed inside the broker; closing the "
                             "connection", len(requests), conn.peer,
                             requests[0].client_id, exc_info=True)

    def _produce_served(self, core: BrokerCore, count: int, answers: list[Any],
                        failure: str | None, started: float) -> None:
        """The metrics of ``count`` Produce requests served together since ``started``."""
        metrics = core.metrics
        metrics.inflight.dec(count)
        elapsed = time.perf_counter() - started
        closed = bool(answers) and answers[-1] is kafka_produce.CLOSE
        served = len(answers) - closed if failure is None else count
        duration = self._duration("Produce")
        for _ in range(served + closed):
            duration.observe(elapsed)
        if served:
            self._requests("Produce", failure or "ok").inc(served)
        if closed:
            metrics.requests.labels("Produce", "closed", self.name).inc()

    def _queue_produce_answers(self, conn: _Connection, requests: list[Request],
                               answers: list[Any]) -> bool:
        """Queue the answers to pipelined Produce ``requests`` in order; False closes the
        connection (a failed acks=0 request, or an answer that cannot be encoded)."""
        for request, answer in zip(requests, answers, strict=False):
            if answer is kafka_produce.CLOSE:
                return False
            if answer is None:
                continue
            if isinstance(answer, bytes):  # a templated answer, already encoded
                conn.pending.append(answer)
                conn.pending_bytes += len(answer)
            else:
                try:
                    data = encode_response_chunks(request.correlation_id, answer)
                except Exception:
                    log.exception("Kafka Produce v%d response to %s could not be encoded; "
                                  "closing the connection", request.api_version, conn.peer)
                    return False
                conn.pending.extend(data)
                conn.pending_bytes += sum(len(c) for c in data)
        return True

    async def _answer(self, conn: _Connection, chunks: list[Chunk]) -> bool:
        """Queue a response behind the earlier ones; write them all when no further request is
        waiting in the read buffer (or ``FLUSH_BYTES`` are queued)."""
        conn.pending.extend(chunks)
        conn.pending_bytes += sum(len(c) for c in chunks)
        if conn.pending_bytes >= FLUSH_BYTES or not conn.next_frame_here():
            await self._flush(conn)
        return True

    async def _flush(self, conn: _Connection) -> None:
        """Write the queued responses and wait until the socket took them (below the
        high-water mark).

        Small chunks are joined into one write (one send for many pipelined answers); record
        sets (``BIG_WRITE`` bytes or more) are written as they are, in pieces of ``SEND_PIECE``
        bytes, each handed to the socket first: the transport copies only what the socket does
        not take at once, and at most one piece of it at a time."""
        chunks, conn.pending, conn.pending_bytes = conn.pending, [], 0
        writer = conn.transport
        small: list[Chunk] = []
        for chunk in chunks:
            if len(chunk) < BIG_WRITE:
                small.append(chunk)
                continue
            if small:
                writer.write(b"".join(small))
                small = []
            view = memoryview(chunk)
            for start in range(0, len(view), SEND_PIECE):
                writer.write(view[start:start + SEND_PIECE])
                async with asyncio.timeout(self.idle_s):
                    await conn.drain()
        if small:
            writer.write(small[0] if len(small) == 1 else b"".join(small))
        if writer.get_write_buffer_size():
            async with asyncio.timeout(self.idle_s):
                await conn.drain()


class _Connection(asyncio.Protocol):
    """One client connection: the bytes read ahead of the request being served, the responses
    not written yet, and what the connection's task waits for (more bytes, or the socket to
    drain).

    Bytes that arrive while the task waits for a request with nothing read ahead are first
    offered to the listener's :meth:`KafkaListener._serve_now` (Produce requests the core
    answers without waiting are served right here); what it leaves is buffered for the task.
    The task's waits for bytes end with TimeoutError after ``connections.max.idle.ms`` without
    any byte read (one timer per wait, moved on only when it fires: bytes served here do not
    touch it); reading pauses while ``READ_AHEAD`` bytes wait unread, the next request whole
    among them."""

    def __init__(self, listener: KafkaListener, loop: asyncio.AbstractEventLoop) -> None:
        self.listener = listener
        self.loop = loop
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # connection_made
        self.peer = "?"
        self.buf = bytearray()
        self.pending: list[Chunk] = []
        self.pending_bytes = 0
        self.serving = True
        """False once the task ended: nothing more is served here either."""
        self.closed: asyncio.Future[None] = loop.create_future()
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._write_paused = False
        self._read_paused = False
        self._error: Exception | None = None
        self._last_read = loop.time()

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.peer = _peer(transport)
        self.listener._connected(self)

    def data_received(self, data: bytes) -> None:
        self._last_read = self.loop.time()
        if self._waiter is not None and not self.buf and not self._write_paused \
                and self.serving:
            served = self.listener._serve_now(self, data)
            if served == len(data) or self.transport.is_closing():
                return
            if served:
                data = data[served:]
        self.buf += data
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)
        elif len(self.buf) >= READ_AHEAD and not self._read_paused and self.next_frame_here():
            self._read_paused = True  # the task has its next request whole: read no further
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self._fail(asyncio.IncompleteReadError(bytes(self.buf), None))
        return True  # the task closes the transport (after writing what it has)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc if exc is not None else ConnectionResetError("connection lost"))
        self._write_paused = False
        drained = self._drained
        if drained is not None and not drained.done():
            drained.set_exception(ConnectionResetError("connection lost"))
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    # -- what the connection's task awaits ---------------------------------------------------

    async def fill(self) -> None:
        """Wait for more bytes (appended to ``buf``); TimeoutError after
        ``connections.max.idle.ms`` without a byte read, IncompleteReadError or
        ConnectionError once the client closed."""
        if self._error is not None:
            raise self._error
        if self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()
        waiter = self._waiter = self.loop.create_future()
        self._last_read = self.loop.time()
        timer = self.loop.call_at(self._last_read + self.listener.idle_s, self._idle, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            timer.cancel()

    def _idle(self, waiter: asyncio.Future[None]) -> None:
        """The wait's timer: TimeoutError if no byte was read for the idle time, else the
        timer moves to the idle time after the last read."""
        if waiter.done():
            return
        due = self._last_read + self.listener.idle_s
        if self.loop.time() >= due:
            self._waiter = None
            waiter.set_exception(TimeoutError())
        else:
            timer = self.loop.call_at(due, self._idle, waiter)
            waiter.add_done_callback(lambda _: timer.cancel())

    async def drain(self) -> None:
        """Wait until the socket's write buffer is below its high-water mark."""
        if self._error is not None and not isinstance(self._error, asyncio.IncompleteReadError):
            raise self._error
        if not self._write_paused:
            return
        drained = self._drained = self.loop.create_future()
        await drained

    def write_pending(self) -> None:
        """Write the queued (small) answers now, in one write; no wait for the socket."""
        if self.pending:
            chunks, self.pending, self.pending_bytes = self.pending, [], 0
            self.transport.write(chunks[0] if len(chunks) == 1 else b"".join(chunks))

    def _fail(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def next_frame_here(self) -> bool:
        """Whether the next request is already read whole (or its size prefix is invalid)."""
        buf = self.buf
        if len(buf) < 4:
            return False
        size = read_size(bytes(buf[:4]))
        return size < 0 or len(buf) - 4 >= size


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)
