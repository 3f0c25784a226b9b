"""A lingering close: how an early refusal on the HTTP edge reaches a client that is still
sending its body.

The edge answers some requests before reading their body (413 by Content-Length, 401
without a key, 408 for a body too slow). Closing the socket right after such an answer,
with the body's bytes unread, makes the kernel send RST, and the client's kernel may throw
the answer away with it: the official openai SDK reported APIConnectionError, and async
httpx ReadError, instead of the 413. A client written on asyncio (httpx's async
transport, the openai SDK's AsyncOpenAI) reads the answer only once it has written its
whole body, so it needs the server to take that body too.

So when a response ends while the request body is still arriving, the connection is not
closed but lingers, as Apache's and nginx's do:

    response (Connection: close) --> write_eof (FIN after the response) --> read and
    discard what comes --> close when the client closes, or at http.linger_seconds,
    or past http.linger_max_bytes, whichever is first

Discarded bytes are never kept (memory stays flat whatever the body's size), and the two
bounds keep a slow or endless body from holding the connection: past either one the
socket is closed (RST then, as before; by then the answer has had its chance).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable


class Lingering:
    """One connection's lingering close; ``start`` it instead of closing, hand it every
    byte that arrives after (``discard``), and ``cancel`` it when the connection is lost."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop,
                 seconds: float, max_bytes: int,
                 on_end: Callable[[str, int], None] = lambda why, discarded: None) -> None:
        self._transport = transport
        self._loop = loop
        self._seconds = seconds
        self._left = max_bytes
        self._discarded = 0
        self._timer: asyncio.TimerHandle | None = None
        self._on_end = on_end  # (why it ended, bytes discarded): for the log
        self.active = False

    def start(self) -> None:
        self.active = True
        t = self._transport
        if t.can_write_eof():  # not over TLS: the answer is then complete when it is read
            t.write_eof()  # the FIN goes out after the response still buffered
        # uvicorn paused reading once its request buffer filled (flow control): the body
        # must flow again for the client to finish writing it
        t.resume_reading()
        self._timer = self._loop.call_later(self._seconds, self._end, "time")

    def discard(self, data: bytes) -> None:
        self._discarded += len(data)
        self._left -= len(data)
        if self._left < 0:
            self._end("bytes")

    def cancel(self) -> None:
        """The connection is gone (the client closed it, or it broke): nothing to close."""
        if self.active:
            self.active = False
            self._stop_timer()
            self._on_end("client closed", self._discarded)

    def _end(self, why: str) -> None:
        if not self.active:
            return
        self.active = False
        self._stop_timer()
        self._on_end(why, self._discarded)
        self._transport.close()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class LingeringTransport:
    """The transport as uvicorn's h11 protocol and its request cycles see it: ``close()``
    asks ``close_or_linger`` instead, and the connection counts as closing while it
    lingers (so uvicorn starts no keep-alive timer or next request on it). Everything
    else is the real transport's."""

    def __init__(self, transport: asyncio.Transport, close_or_linger: Callable[[], None],
                 lingering: Callable[[], bool]) -> None:
        self._transport = transport
        self._close_or_linger = close_or_linger
        self._lingering = lingering

    def close(self) -> None:
        self._close_or_linger()

    def is_closing(self) -> bool:
        return self._lingering() or self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
