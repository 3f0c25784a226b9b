"""Bounds on what an HTTP client may send and how slowly (the http.* settings).

uvicorn bounds a request head's size (h11, 16 KB) and an idle keep-alive connection, but
not the time a head or a body takes to arrive, nor a body's size, nor how many
connections sit half-open. Those bounds live here, each counted in
ServerState.http_refused (the orpheus_http_refused{reason} metric) and logged once at
info, without a traceback, under one of these reasons:

    head_timeout         the request head did not arrive within http.head_timeout_seconds
                         of the connection (or of the previous response): connection closed
    pending_connections  http.max_pending_connections connections already wait for their
                         head: the new one is closed at once
    body_too_large       Content-Length or the body read so far is over http.max_body_bytes:
                         413, connection closed (the rest of the body is never kept)
    body_timeout         the body did not arrive within http.body_timeout_seconds of the
                         head: 408, connection closed
    ws_config_timeout    a WebSocket sent no config within http.ws_config_timeout_seconds
                         (counted by ws.py)

A client that leaves while its body is being read is logged at info ("client left"): a
disconnect is not an error. A request that carries a body is authenticated before the body
is read (401 without a known key, when keys are on), so an unknown caller's body is never
read and the answer names what it must fix first.

    connection --(head_timeout)--> head --(401, body_timeout, max_body_bytes)--> body --> route
      BoundedH11: per connection,      BoundedBody: ASGI middleware, reads the whole
      on the protocol                  body before the route runs, then replays it

Every refusal made before the whole body arrived says `Connection: close`, and the
connection then closes the way linger.py describes (http.linger_*), so the client gets the
answer even while it is still sending.
"""

from __future__ import annotations

import asyncio

import h11
import structlog
from starlette.requests import HTTPConnection
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from orpheus_svc.core.status import Status
from orpheus_svc.server.state import ServerState

from .auth import authenticate
from .errors import ApiError
from .linger import Lingering, LingeringTransport

log = structlog.get_logger("orpheus_svc.http")


def refused(state: ServerState, reason: str, **fields) -> None:
    """Count and log (info, once) a request or connection ended by an http.* bound."""
    state.http_refused[reason] += 1
    log.info("http request refused", reason=reason, **fields)


class BoundedBody:
    """ASGI middleware: an HTTP request's whole body is read here, within
    http.max_body_bytes and http.body_timeout_seconds, before the app sees the request;
    the app then reads it from memory (and later `receive` calls, e.g. Starlette's
    disconnect watch while a response streams, go to the server as usual)."""

    def __init__(self, app, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limits = self.state.config.http
        path = scope.get("path", "")
        length = _content_length(scope)
        if _has_body(scope, length):
            try:
                authenticate(HTTPConnection(scope))
            except ApiError as error:  # counted and logged by authenticate
                await self._answer(scope, receive, send, error)
                return
        if length is not None and length > limits.max_body_bytes:
            await self._refuse(scope, receive, send, "body_too_large", _too_large(limits, length),
                               path=path, content_length=length)
            return
        loop = asyncio.get_running_loop()
        timeout = limits.body_timeout_seconds
        deadline = loop.time() + timeout if timeout > 0 else None
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                if deadline is None:
                    message = await receive()
                else:
                    message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0))
            except asyncio.TimeoutError:
                await self._refuse(scope, receive, send, "body_timeout", ApiError(
                    Status.DEADLINE_EXCEEDED, f"the request body did not arrive within "
                    f"{timeout:g} s (http.body_timeout_seconds)", http_status=408),
                    path=path, received_bytes=size)
                return
            if message["type"] == "http.disconnect":
                log.info("client left", path=path, while_="reading the request body",
                         received_bytes=size)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limits.max_body_bytes:
                await self._refuse(scope, receive, send, "body_too_large",
                                   _too_large(limits, size), path=path, received_bytes=size)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope, receive, send, reason: str, error: ApiError, **fields) -> None:
        refused(self.state, reason, **fields)
        await self._answer(scope, receive, send, error)

    @staticmethod
    async def _answer(scope, receive, send, error: ApiError) -> None:
        """An error before the whole body was read: the connection cannot carry another
        request, so it closes (lingering: BoundedH11)."""
        response = error.response()
        response.headers["Connection"] = "close"
        await response(scope, receive, send)


def _has_body(scope, length: int | None) -> bool:
    return (length is not None and length > 0) or any(
        name == b"transfer-encoding" for name, _ in scope.get("headers", ()))


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value) if len(value) <= 20 else 1 << 70
            except ValueError:
                return None  # h11 refuses a malformed length before we are called
    return None


def _too_large(limits, size: int) -> ApiError:
    return ApiError(Status.RESOURCE_EXHAUSTED, f"the request body is larger than this server's "
                    f"limit of {limits.max_body_bytes} bytes (http.max_body_bytes)",
                    http_status=413)


def bounded_h11(state: ServerState) -> type:
    """uvicorn's h11 protocol with a time limit on each request head, a cap on the
    connections waiting for one (a class per server: its pending set is the server's), and
    a lingering close of a connection whose response ended before its request body did."""
    pending: set = set()
    limits = state.config.http

    class BoundedH11(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _linger: Lingering | None = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            raw = self._raw = self.transport
            # uvicorn closes through self.transport (here and in each request cycle)
            self.transport = LingeringTransport(
                raw, lambda: self._close_or_linger(raw),
                lambda: self._linger is not None and self._linger.active)
            if len(pending) >= limits.max_pending_connections:
                refused(state, "pending_connections", client=_peer(self.client),
                        limit=limits.max_pending_connections)
                self.transport.close()
                return
            self._await_head()

        def data_received(self, data: bytes) -> None:
            if self._linger is not None and self._linger.active:
                self._linger.discard(data)  # the rest of a refused body: never kept
                return
            if self.conn.their_state is h11.IDLE and self not in pending:
                self._await_head()  # the next request on a kept-alive connection
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._head_done()  # a head arrived (or the connection was upgraded)

        def handle_websocket_upgrade(self, event) -> None:
            # the WebSocket protocol takes over the connection with the real transport: its
            # closes are its own (BoundedWebSocket), never a lingering one
            self.transport = self._raw
            super().handle_websocket_upgrade(event)

        def connection_lost(self, exc) -> None:
            self._head_done()
            if self._linger is not None:
                self._linger.cancel()
            super().connection_lost(exc)

        def _close_or_linger(self, raw) -> None:
            """Close, unless the client is still sending the request body (an answer given
            before it was read): then linger (linger.py) so that the answer reaches it."""
            if self._linger is not None and self._linger.active:
                return
            if (raw.is_closing() or limits.linger_seconds <= 0
                    or self.conn.their_state is not h11.SEND_BODY):
                raw.close()
                return
            client = _peer(self.client)

            def ended(why: str, discarded: int) -> None:
                log.debug("lingering close ended", client=client, why=why,
                          discarded_bytes=discarded)

            self._linger = Lingering(raw, self.loop, limits.linger_seconds,
                                     limits.linger_max_bytes, ended)
            self._linger.start()

        def _await_head(self) -> None:
            pending.add(self)
            if limits.head_timeout_seconds > 0 and self._head_timer is None:
                self._head_timer = self.loop.call_later(limits.head_timeout_seconds,
                                                        self._head_expired)

        def _head_done(self) -> None:
            pending.discard(self)
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_expired(self) -> None:
            self._head_timer = None
            pending.discard(self)
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                refused(state, "head_timeout", client=_peer(self.client),
                        timeout_s=limits.head_timeout_seconds)
                self.transport.close()

    return BoundedH11


class BoundedWebSocket(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol, with two changes for a client that stopped reading:
    a close (and the error event before it, see URGENT) is written even while the
    transport is paused for back-pressure, so it is queued behind the unread audio rather
    than waiting for the client forever; and when the close handshake times out with
    bytes still unsent, the connection is aborted, so its descriptor is freed instead of
    waiting for a reader that never comes."""

    _paused = False  # the transport asked us to stop writing (back-pressure)

    def pause_writing(self) -> None:
        self._paused = True
        super().pause_writing()

    def resume_writing(self) -> None:
        self._paused = False
        super().resume_writing()

    async def send(self, message) -> None:
        urgent = message.get("type") == "websocket.close" or message.get(URGENT)
        if urgent and not self.writable.is_set():
            self.writable.set()  # Event.wait() on a set event returns without yielding
            try:
                await super().send({k: v for k, v in message.items() if k != URGENT})
            finally:
                if self._paused and not self.disconnected:
                    self.writable.clear()
        else:
            await super().send({k: v for k, v in message.items() if k != URGENT})
        if message.get("type") == "websocket.close" and self.close_timer is not None:
            self.close_timer.cancel()
            self.close_timer = self.loop.call_later(self.close_timeout, self._close_or_abort)

    def _close_or_abort(self) -> None:
        if self.transport.get_write_buffer_size() > 0:
            self.transport.abort()
        else:
            self.transport.close()


# Key of an ASGI websocket.send message that must be written even to a client that has
# stopped reading (the error event before the close); BoundedWebSocket drops it.
URGENT = "orpheus.urgent"


def _peer(client) -> str:
    return f"{client[0]}:{client[1]}" if client else ""
