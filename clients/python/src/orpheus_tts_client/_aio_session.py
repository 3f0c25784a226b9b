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
from typing import Any, AsyncIterator, Callable

import grpc
import grpc.aio
from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from . import _convert
from ._retry import Attempts, accepted
from .types import Encoding, Event, TTSError


class AsyncSession:
    """A running StreamingSynthesize call: ``send`` / ``flush`` / ``end`` / ``cancel`` on the
    input side, ``async for ev in session`` on the output side.

    Made by ``AsyncClient.session(...)``. The config message goes out with the first
    ``send`` / ``flush`` / ``end``, the first read, or ``async with`` entry, whichever is first.
    Leaving ``async with`` cancels the call if it has not finished (a no-op after the summary).

    A call refused with UNAVAILABLE before the server accepted it is tried again (up to
    ``retries`` more times) with everything written so far, in order (see ``_retry``).
    """

    def __init__(self, open_call: Callable[[float | None], grpc.aio.StreamStreamCall],
                 config: pb.StreamingSynthesizeRequest, encoding: Encoding, sample_rate: int,
                 *, retries: int = 0, timeout: float | None = None) -> None:
        self._open_call = open_call  # timeout -> a new StreamingSynthesize call
        self._attempts = Attempts(retries, timeout)
        self._call, self._status = self._open()
        self._config: pb.StreamingSynthesizeRequest | None = config
        # what was written, kept for a retry until the server accepts the call
        self._sent: list[pb.StreamingSynthesizeRequest] | None = [] if retries else None
        self._accepted = False
        self._lock = asyncio.Lock()  # grpc.aio allows one write at a time
        self._ended = False
        self._cancelled = False
        self._finished = False
        #: Audio encoding and output sample rate of this session's chunks.
        self.encoding = encoding
        self.sample_rate = sample_rate

    def _open(self) -> tuple[grpc.aio.StreamStreamCall, "_StatusWatch"]:
        call = self._open_call(self._attempts.timeout())
        return call, _StatusWatch(call)

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
            call = self._call
            try:
                await call.done_writing()
            except (grpc.RpcError, asyncio.InvalidStateError):
                if not await self._retry_locked(call):  # the retry half-closes its call
                    await self._raise_status()

    def cancel(self) -> None:
        """Stop the call now; the server frees the session's slots. Iteration then ends
        without an error. Safe to call at any time, also after the call finished."""
        self._cancelled = True
        self._call.cancel()

    @property
    def done(self) -> bool:
        """True once the call has finished (summary received, error, or cancel). A call that
        ended before the server accepted it, with retries left, is done once its events have
        been read (reading is where a refused call is retried)."""
        if self._finished or self._cancelled:
            return True
        return self._call.done() and (self._accepted
                                      or self._attempts.number > self._attempts.retries)

    async def _write(self, req: pb.StreamingSynthesizeRequest) -> None:
        async with self._lock:
            if self._ended:
                raise RuntimeError("the session's input has ended (end() was called)")
            await self._start_locked()
            await self._send_locked(req)

    async def _start_locked(self) -> None:
        if self._config is None:
            return
        config, self._config = self._config, None
        await self._send_locked(config)

    async def _send_locked(self, req: pb.StreamingSynthesizeRequest) -> None:
        if self._sent is not None:
            self._sent.append(req)
        call = self._call
        try:
            await call.write(req)
        except (grpc.RpcError, asyncio.InvalidStateError):
            if not await self._retry_locked(call):  # a retry sends req with the rest
                await self._raise_status()

    async def _retry_locked(self, failed: grpc.aio.StreamStreamCall) -> bool:
        """After ``failed`` ended: whether the session goes on in a new attempt (made here,
        with everything written so far, if the way it ended allows one; see _retry), or in
        one another task made already. Holds the write lock, so no write overtakes the replay."""
        while not self._cancelled:
            if failed is not self._call:
                return True
            code, _ = await self._status.settled()
            headers = await failed.initial_metadata()
            wait = self._attempts.next_wait(code == grpc.StatusCode.UNAVAILABLE,
                                            accepted(self._accepted, headers))
            if wait is None or self._sent is None:
                return False
            await asyncio.sleep(wait)
            if self._cancelled:
                return False
            self._attempts.advance()
            self._call, self._status = self._open()
            failed = self._call
            try:
                for req in self._sent:
                    await failed.write(req)
                if self._ended:
                    await failed.done_writing()
                return True
            except (grpc.RpcError, asyncio.InvalidStateError):
                continue  # this attempt ended too: decide again
        return False

    async def _raise_status(self) -> None:
        """The call has ended (a write or read failed): raise its status as TTSError."""
        if self._cancelled:
            raise TTSError(grpc.StatusCode.CANCELLED, "the session was cancelled")
        code, details = await self._status.settled()
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
                call = self._call
                try:
                    msg = await call.read()
                except grpc.RpcError as e:
                    if self._cancelled:
                        return
                    async with self._lock:
                        retried = await self._retry_locked(call)
                    if retried:
                        continue
                    if self._cancelled:
                        return
                    if e.code() == grpc.StatusCode.INTERNAL:
                        await self._raise_status()  # the server's, if a write hid it
                    raise TTSError.from_rpc_error(e) from None
                except asyncio.CancelledError:
                    # grpc.aio raises CancelledError in a pending read when the call is
                    # cancelled; only a cancel() of ours ends quietly, a task cancel propagates
                    if self._cancelled and not _task_cancelling():
                        return
                    raise
                if msg is grpc.aio.EOF:
                    return
                if not self._accepted:
                    self._accepted, self._sent = True, None
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
        if not self.done:
            self.cancel()


#: grpc.aio's status for a call whose write failed because the call had already ended: it
#: replaces the server's status if that came first, or is replaced by it moments later
_WRITE_RACE = (grpc.StatusCode.INTERNAL, "Internal error from Core")
_SETTLE_S = 1.0


class _StatusWatch:
    """Every status grpc.aio gives one call, in order, so that the server's own status is
    known even when a write racing the end of the call hid it behind _WRITE_RACE."""

    def __init__(self, call: grpc.aio.Call) -> None:
        self._seen: list[tuple[grpc.StatusCode, str]] = []
        call.add_done_callback(self._on_done)  # called at each status grpc.aio sets
        self._call = call

    def _on_done(self, call: grpc.aio.Call) -> None:
        self._seen.append((_at_once(call.code()), _at_once(call.details())))

    async def settled(self) -> tuple[grpc.StatusCode, str]:
        """The finished call's status: the first that is not _WRITE_RACE, waiting at most
        _SETTLE_S for one (then _WRITE_RACE itself)."""
        code, details = await self._call.code(), await self._call.details()
        loop = asyncio.get_running_loop()
        give_up = loop.time() + _SETTLE_S
        while True:
            real = [s for s in self._seen if s != _WRITE_RACE]
            if real:
                return real[0]
            if loop.time() >= give_up:
                return code, details
            await asyncio.sleep(0.005)


def _at_once(coro):
    """The result of a coroutine that finishes without suspending (grpc.aio's status getters
    on a finished call, from a done callback, which cannot await)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    return None


def _task_cancelling() -> bool:
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return bool(cancelling and cancelling())
