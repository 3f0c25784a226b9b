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
import time
from typing import Any, AsyncIterator, Awaitable, Callable

import grpc
import grpc.aio
from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from . import _convert
from ._resume import Continuity, Resume, SentLog, resumed_config, speakable
from ._retry import SESSION_HEADER, Attempts, accepted
from .types import Encoding, Event, SegmentEnd, TTSError


class AsyncSession:
    """A running StreamingSynthesize call: ``send`` / ``flush`` / ``end`` / ``cancel`` on the
    input side, ``async for ev in session`` on the output side.

    Made by ``AsyncClient.session(...)``. The config message goes out with the first
    ``send`` / ``flush`` / ``end``, the first read, or ``async with`` entry, whichever is first.
    Leaving ``async with`` cancels the call if it has not finished (a no-op after the summary).

    A call refused with UNAVAILABLE before the server accepted it is tried again (up to
    ``retries`` more times) with everything written so far, in order (see ``_retry``); one
    that fails with UNAVAILABLE after it was accepted is resumed, within ``resume``, from
    its first segment that had not ended (see ``_resume``). The reader does both, as it
    meets the end of the call; a write to the failed call meanwhile is kept for the new
    attempt instead of failing.
    """

    def __init__(self, open_call: Callable[[float | None], grpc.aio.StreamStreamCall],
                 config: pb.StreamingSynthesizeRequest, encoding: Encoding, sample_rate: int,
                 *, retries: int = 0, timeout: float | None = None,
                 resume: Resume | None = None) -> None:
        self._open_call = open_call  # timeout -> a new StreamingSynthesize call
        self._attempts = Attempts(retries, timeout, resume=resume)
        self._call, self._status = self._open()
        self._first_config = config
        self._config: pb.StreamingSynthesizeRequest | None = config  # None once sent
        # what was written after the config, kept for a new attempt (None: none can come)
        self._log = SentLog(resume is not None) if retries or resume else None
        self._view = Continuity(sample_rate)
        self._accepted = False  # a response to the current attempt arrived
        # the last server status an attempt ended with, and the one the session gives when
        # grpc.aio lost an accepted attempt's (see _retry_locked)
        self._last_status: tuple[grpc.StatusCode, str] | None = None
        self._lost_status: tuple[grpc.StatusCode, str] | None = None
        self._lock = asyncio.Lock()  # grpc.aio allows one write at a time
        self._wake = asyncio.Event()  # set by cancel(): ends a retry's backoff, a write
        self._gave_up = False  # the reader will not retry the call (writes raise its status)
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
            try:
                await self._unless_cancelled(self._call.done_writing())
            except (grpc.RpcError, asyncio.InvalidStateError):
                if not self._retry_pending():  # the reader's retry half-closes its call
                    await self._raise_status()

    def cancel(self) -> None:
        """Stop the call now; the server frees the session's slots. Iteration then ends
        without an error. Safe to call at any time, also after the call finished."""
        self._cancelled = True
        self._wake.set()  # ends a retry's backoff and any write waiting
        self._call.cancel()

    @property
    def done(self) -> bool:
        """True once the call has finished (summary received, error, or cancel). A call
        refused in a way that allows another attempt is not done: reading the events
        retries it."""
        if self._finished or self._cancelled:
            return True
        if not self._call.done() or self._status.settling():
            return False
        code, _ = self._status.known()
        return not self._attempts.may_retry(code == grpc.StatusCode.UNAVAILABLE,
                                            self._was_accepted(self._call))

    def _was_accepted(self, call: grpc.aio.StreamStreamCall) -> bool:
        """Whether the server accepted ``call`` (a finished one): see _retry.accepted."""
        return accepted(self._accepted, _at_once(call.initial_metadata()))

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
        await self._send_locked(config, log=False)  # a new attempt sends its own config

    async def _send_locked(self, req: pb.StreamingSynthesizeRequest, log: bool = True) -> None:
        if self._log is not None and log:
            self._log.add(req)
        try:
            await self._unless_cancelled(self._call.write(req))
        except (grpc.RpcError, asyncio.InvalidStateError):
            if not self._retry_pending():  # the reader's retry sends req with the rest
                await self._raise_status()

    def _retry_pending(self) -> bool:
        """After a write failed: whether the reader may still retry the call. Only the reader
        decides, because only it has seen every response the call got before it ended (a
        response not read yet means the server accepted the call)."""
        return (not self._cancelled and not self._gave_up and self._log is not None
                and self._attempts.may_retry(True, self._accepted))

    async def _unless_cancelled(self, op: Awaitable[None]) -> None:
        """Await a write or half-close, but stop waiting at cancel(): grpc.aio can leave a
        write waiting forever on a call cancelled before its headers went out, and fails one
        in flight with CancelledError, which is not this task being cancelled."""
        task = asyncio.ensure_future(op)
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait((task, woken), return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            if not task.done():  # cancel() was called, or this task is being cancelled
                task.cancel()
        try:
            task.result()
        except asyncio.CancelledError:
            if self._cancelled:
                raise asyncio.InvalidStateError("the session was cancelled") from None
            raise

    async def _retry_locked(self, failed: grpc.aio.StreamStreamCall) -> str | None:
        """The reader, after ``failed`` ended with every response read: "retried" if the
        session goes on in a new attempt, made here with the config and what the log keeps
        (see _retry, _resume); "finished" if nothing is left to speak (_nothing_left);
        None if the call's status is the session's. Holds the write lock, so no write
        overtakes the replay."""
        if self._cancelled:
            return None
        await failed.code()  # finished: its headers, if any, are in
        was_accepted = self._was_accepted(failed)
        if self._log is None:
            return None
        # every response was read (_responses): the server's status, if a racing
        # write hid it, replaces the placeholder now
        status = await self._status.settled()
        code = status[0]
        if status != _WRITE_RACE:
            self._last_status = status
        elif self._attempts.resume is not None and (
                was_accepted or self._attempts.was_accepted):
            # A session that is being resumed whose call ended under a write: the
            # server's own status is lost, and what ends a call while text is still
            # going out is most likely its replica going away. Resumed, within bounds;
            # if that gives up, the caller gets UNAVAILABLE (_raise_status).
            code = grpc.StatusCode.UNAVAILABLE
            before = f"{self._last_status[1]}; " if self._last_status else ""
            self._lost_status = (code, before + "a resumed call ended while text was "
                                 "being sent, and gRPC lost its status")
        if self._nothing_left(code, was_accepted):
            return "finished"
        wait = self._attempts.next_wait(code == grpc.StatusCode.UNAVAILABLE, was_accepted)
        if wait is None:
            return None
        try:
            await asyncio.wait_for(self._wake.wait(), wait)
        except asyncio.TimeoutError:
            pass
        if self._cancelled:
            return None
        if was_accepted:
            self._view.resumed()  # the caller's numbering goes on from here
        self._attempts.advance()
        self._accepted = False
        self._call, self._status = self._open()
        try:
            for req in [resumed_config(self._first_config, self._view.ended),
                        *self._log.replay()]:
                await self._unless_cancelled(self._call.write(req))
            if self._ended:
                await self._unless_cancelled(self._call.done_writing())
        except (grpc.RpcError, asyncio.InvalidStateError):
            # this attempt ended too: the reader reads what it got (its status comes
            # only after that) and decides again; the log still holds the replay
            if self._cancelled:
                return None
        return "retried"

    def _nothing_left(self, code: grpc.StatusCode, was_accepted: bool) -> bool:
        """Whether a failed call leaves nothing to speak: every segment of a session that
        has been resumed (or would be now) ended, and so did its input. A new call could
        only be refused (the server wants text), so the session ends with the caller's own
        summary. A resumed call refused for want of text counts too."""
        resuming = self._view.resumes or (code == grpc.StatusCode.UNAVAILABLE and was_accepted
                                          and self._attempts.resume is not None)
        return (bool(resuming) and self._ended and code in (grpc.StatusCode.UNAVAILABLE,
                                                           grpc.StatusCode.INVALID_ARGUMENT)
                and not speakable(self._log.replay()))

    async def _raise_status(self, all_read: bool = False) -> None:
        """The call has ended (a write or read failed): raise its status as TTSError.
        ``all_read``: the reader has read every response, so a status hidden behind a
        write race is not held back behind audio and is worth the wait."""
        if self._cancelled:
            raise TTSError(grpc.StatusCode.CANCELLED, "the session was cancelled")
        await self._call.code()
        code, details = await self._status.settled(
            wait=all_read or not self._was_accepted(self._call))
        if (code, details) == _WRITE_RACE and self._lost_status is not None:
            code, details = self._lost_status
        raise TTSError(code or grpc.StatusCode.UNKNOWN, details or "")

    # -- output ------------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[Event]:
        return self.events()

    async def events(self) -> AsyncIterator[Event]:
        """The session's events in order; ends after the Summary, or quietly after cancel().
        A non-OK status raises TTSError."""
        if self._config is not None:
            await self.start()
        reading: tuple[grpc.aio.StreamStreamCall, AsyncIterator[Any]] | None = None
        try:
            while True:
                call = self._call
                if reading is None or reading[0] is not call:
                    reading = (call, _responses(call))
                try:
                    msg = await reading[1].__anext__()
                except StopAsyncIteration:
                    return
                except grpc.RpcError as e:
                    if self._cancelled:
                        return
                    async with self._lock:
                        outcome = await self._retry_locked(call)
                    if outcome == "retried":
                        continue
                    self._gave_up = True
                    if outcome == "finished":
                        yield self._view.local_summary(await _session_id(call))
                        return
                    if self._cancelled:
                        return
                    if e.code() == grpc.StatusCode.INTERNAL:
                        await self._raise_status(all_read=True)  # the server's, if a write hid it
                    raise TTSError.from_rpc_error(e) from None
                except asyncio.CancelledError:
                    # grpc.aio raises CancelledError in a pending read when the call is
                    # cancelled; only a cancel() of ours ends quietly, a task cancel propagates
                    if self._cancelled and not _task_cancelling():
                        return
                    raise
                if not self._accepted:
                    self._accepted = True
                    self._attempts.accepted()
                    if self._log is not None:
                        self._log.accept()
                ev = _convert.event(msg)
                if ev is None:
                    continue
                ev = self._view.event(ev)
                if isinstance(ev, SegmentEnd) and self._log is not None:
                    self._log.segment_ended(ev.text_end)
                yield ev
        finally:
            self._finished = True

    # -- context manager ---------------------------------------------------------------------

    async def __aenter__(self) -> "AsyncSession":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        # not `done`: a reader that left its loop early has finished, its call has not
        if not (self._finished and self._call.done()):
            self.cancel()


#: grpc.aio's status for a call whose write failed because the call had already ended: it
#: replaces the server's status if that came first, or is replaced by it moments later
_WRITE_RACE = (grpc.StatusCode.INTERNAL, "Internal error from Core")
#: how long a refused call waits for the server's status to replace _WRITE_RACE
_SETTLE_S = 0.5


class _StatusWatch:
    """The statuses grpc.aio sets on one call, so that the server's own status is known even
    when a write racing the end of the call hid it behind _WRITE_RACE. grpc.aio runs done
    callbacks at every status it sets (grpcio 1.63) or only at the first (1.85): the first
    is kept here, and the current one is read when asked."""

    def __init__(self, call: grpc.aio.Call, clock: Callable[[], float] = time.monotonic) -> None:
        self._call = call
        self._clock = clock
        self._first: tuple[grpc.StatusCode, str] | None = None
        self._ended_at: float | None = None
        call.add_done_callback(self._on_done)

    def _on_done(self, call: grpc.aio.Call) -> None:
        if self._first is None:
            self._first = (_at_once(call.code()), _at_once(call.details()))
            self._ended_at = self._clock()

    def settling(self) -> bool:
        """Is the finished call's status still _WRITE_RACE, within _SETTLE_S of its end? The
        server's status may yet replace it (a refusal that allows a retry), so the session
        is not known to be done; after that, _WRITE_RACE is taken as the call's status."""
        return (self.known() == _WRITE_RACE and self._ended_at is not None
                and self._clock() - self._ended_at < _SETTLE_S)

    def known(self) -> tuple[grpc.StatusCode, str]:
        """A finished call's status as far as known now: the first status set, unless that
        was _WRITE_RACE; else the current one."""
        current = (_at_once(self._call.code()), _at_once(self._call.details()))
        for status in (self._first, current):
            if status is not None and status[0] is not None and status != _WRITE_RACE:
                return status
        return current

    async def settled(self, wait: bool = True) -> tuple[grpc.StatusCode, str]:
        """The finished call's status; if it is _WRITE_RACE, wait at most _SETTLE_S (with
        ``wait``) for the server's to replace it."""
        await self._call.code()
        loop = asyncio.get_running_loop()
        give_up = loop.time() + (_SETTLE_S if wait else 0.0)
        while True:
            status = self.known()
            if status != _WRITE_RACE or loop.time() >= give_up:
                return status
            await asyncio.sleep(0.005)


def _responses(call: grpc.aio.StreamStreamCall) -> AsyncIterator[Any]:
    """The call's responses through its async iterator, not ``read()``: once a write that
    raced the end of the call has set _WRITE_RACE, ``read()`` refuses to read on, so the
    messages the server sent before its status stay in gRPC's core, and the status, which
    comes only after them, never replaces the placeholder. The iterator reads every message
    there is, then raises the call's status."""
    return call.__aiter__()


async def _session_id(call: grpc.aio.StreamStreamCall) -> str:
    return next((v for k, v in await call.initial_metadata() or () if k == SESSION_HEADER), "")


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
