"""AsyncSession: one StreamingSynthesize call driven by hand (asyncio).

    async with client.session(voice="tara") as s:
        await s.send("Hello the")
        await s.send("re. How are")
        await s.flush()                  # end the current segment now
        await s.end()                    # half-close: no more text
        async for ev in s:               # AudioChunk / SegmentStart / SegmentEnd / Summary
            ...

Sending and reading may run in different tasks at the same time (an LLM task sends while a
playback task reads). ``cancel()`` stops the call at once and frees the server's slot; the
event iteration then simply ends.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

import grpc
import grpc.aio
from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from . import _convert
from .types import Encoding, Event, TTSError


class AsyncSession:
    """A running StreamingSynthesize call: ``send`` / ``flush`` / ``end`` / ``cancel`` on the
    input side, ``async for ev in session`` on the output side.

    Made by ``AsyncClient.session(...)``. The config message goes out with the first
    ``send`` / ``flush`` / ``end``, the first read, or ``async with`` entry, whichever is first.
    Leaving ``async with`` cancels the call if it has not finished (a no-op after the summary).
    """

    def __init__(self, call: grpc.aio.StreamStreamCall, config: pb.StreamingSynthesizeRequest,
                 encoding: Encoding, sample_rate: int) -> None:
        self._call = call
        self._config: pb.StreamingSynthesizeRequest | None = config
        self._lock = asyncio.Lock()  # grpc.aio allows one write at a time
        self._ended = False
        self._cancelled = False
        self._finished = False
        #: Audio encoding and output sample rate of this session's chunks.
        self.encoding = encoding
        self.sample_rate = sample_rate

    # -- input -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Send the config now (otherwise it goes with the first send/flush/end or read)."""
        async with self._lock:
            await self._start_locked()

    async def send(self, text: str) -> None:
        """Send a text fragment (any size; splitting mid-word is fine). Empty text is skipped."""
        if not isinstance(text, str):
            raise TypeError(f"send() takes str, got {type(text).__name__}")
        if text:
            await self._write(pb.StreamingSynthesizeRequest(text=text))

    async def flush(self, id: str = "") -> None:  # noqa: A002 - the proto field's name
        """End the current segment now, even mid-sentence (the text so far is spoken).
        ``id`` comes back as ``flush_id`` on the SegmentStart/SegmentEnd of the segment it
        closes (see docs/api.md for a flush with nothing pending)."""
        await self._write(_convert.flush_request(id))

    async def end(self) -> None:
        """Half-close: no more text. The server speaks what is left and sends the summary.
        Calling it again is a no-op."""
        async with self._lock:
            if self._ended:
                return
            await self._start_locked()
            self._ended = True
            try:
                await self._call.done_writing()
            except (grpc.RpcError, asyncio.InvalidStateError):
                await self._raise_status()

    def cancel(self) -> None:
        """Stop the call now; the server frees the session's slots. Iteration then ends
        without an error. Safe to call at any time, also after the call finished."""
        self._cancelled = True
        self._call.cancel()

    @property
    def done(self) -> bool:
        """True once the call has finished (summary received, error, or cancel)."""
        return self._finished or self._call.done()

    async def _write(self, req: pb.StreamingSynthesizeRequest) -> None:
        async with self._lock:
            if self._ended:
                raise RuntimeError("the session's input has ended (end() was called)")
            await self._start_locked()
            try:
                await self._call.write(req)
            except (grpc.RpcError, asyncio.InvalidStateError):
                await self._raise_status()

    async def _start_locked(self) -> None:
        if self._config is None:
            return
        config, self._config = self._config, None
        try:
            await self._call.write(config)
        except (grpc.RpcError, asyncio.InvalidStateError):
            await self._raise_status()

    async def _raise_status(self) -> None:
        """A write failed because the call has ended: raise its status as TTSError."""
        if self._cancelled:
            raise TTSError(grpc.StatusCode.CANCELLED, "the session was cancelled")
        code = await self._call.code()
        details = await self._call.details()
        raise TTSError(code or grpc.StatusCode.UNKNOWN, details or "")

    # -- output ------------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[Event]:
        return self.events()

    async def events(self) -> AsyncIterator[Event]:
        """The session's events in order; ends after the Summary, or quietly after cancel().
        A non-OK status raises TTSError."""
        if self._config is not None:
            await self.start()
        try:
            while True:
                try:
                    msg = await self._call.read()
                except grpc.RpcError as e:
                    if self._cancelled:
                        return
                    raise TTSError.from_rpc_error(e) from None
                except asyncio.CancelledError:
                    # grpc.aio raises CancelledError in a pending read when the call is
                    # cancelled; only a cancel() of ours ends quietly, a task cancel propagates
                    if self._cancelled and not _task_cancelling():
                        return
                    raise
                if msg is grpc.aio.EOF:
                    return
                ev = _convert.event(msg)
                if ev is not None:
                    yield ev
        finally:
            self._finished = True

    # -- context manager ---------------------------------------------------------------------

    async def __aenter__(self) -> "AsyncSession":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if not self._call.done():
            self.cancel()


def _task_cancelling() -> bool:
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return bool(cancelling and cancelling())
