"""Session: one StreamingSynthesize call driven by hand (blocking client).

    with client.session(voice="tara") as s:
        s.send("Hello the")
        s.send("re. How are")
        s.flush()                        # end the current segment now
        s.end()                          # half-close: no more text
        for ev in s:                     # AudioChunk / SegmentStart / SegmentEnd / Summary
            ...

send / flush / end / cancel are thread-safe and never block on the network: the messages
queue up and gRPC's own thread writes them, so one thread may send while another reads.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Iterable, Iterator

import grpc
from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from . import _convert
from ._resume import Continuity, Resume, resumed_config, speakable
from ._retry import END, SESSION_HEADER, Attempts, ReplayInput, accepted
from .types import FLUSH, Encoding, Event, SegmentEnd, Summary, TTSError

_END = object()  # queue item: half-close the input


class _Requests:
    """One attempt's request iterator, consumed by gRPC on its own thread: the config, then
    the session's input items from the first (a retry replays them) until the input ends or
    a later attempt takes over.

    When the caller's iterable raises (or yields something that is not text), the call is
    cancelled and the exception is kept so that the response side re-raises it (instead of a
    bare CANCELLED status), and the input is never half-closed as if it had ended normally.
    """

    def __init__(self, session: "Session", attempt: int,
                 config: pb.StreamingSynthesizeRequest) -> None:
        self._session = session
        self._attempt = attempt
        self._config = config
        self._call = None
        self._call_set = threading.Event()

    def set_call(self, call) -> None:
        self._call = call
        self._call_set.set()

    def __iter__(self) -> Iterator[pb.StreamingSynthesizeRequest]:
        s = self._session
        yield self._config
        i = 0
        while True:
            try:
                req = s._input.get(self._attempt, i)
            except Exception:  # noqa: BLE001 - kept in s._input.error for the caller
                self._call_set.wait()
                self._call.cancel()
                return
            if req is END:  # the input ended, or a later attempt took over
                return
            i += 1
            yield req


def _session_id(call) -> str:
    return next((v for k, v in call.initial_metadata() or () if k == SESSION_HEADER), "")


def _drain(q: "queue.SimpleQueue[Any]") -> Iterator[Any]:
    while True:
        item = q.get()
        if item is _END:
            return
        yield item


class Session:
    """A running StreamingSynthesize call: ``send`` / ``flush`` / ``end`` / ``cancel`` on the
    input side, ``for ev in session`` on the output side.

    Made by ``Client.session(...)`` (or, fed from an iterable, by ``Client.stream``). The call
    starts at once. Leaving ``with`` cancels it if it has not finished.

    A call refused with UNAVAILABLE before the server accepted it is tried again (up to
    ``retries`` more times) with everything sent so far, in order (see ``_retry``); one
    that fails with UNAVAILABLE after it was accepted is resumed, within ``resume``, from
    its first segment that had not ended (see ``_resume``). Both happen while the events
    are read.
    """

    def __init__(self, stub, config: pb.StreamingSynthesizeRequest, call_kwargs: dict,
                 encoding: Encoding, sample_rate: int, source: Iterable | None = None,
                 retries: int = 0, resume: Resume | None = None) -> None:
        self._queue: queue.SimpleQueue[Any] | None = None
        if source is None:
            self._queue = queue.SimpleQueue()
            source = _drain(self._queue)
        self._stub = stub
        self._config = config
        self._kwargs = call_kwargs
        self._input = ReplayInput(source, _convert.fragment_request, keep=retries > 0,
                                  resume=resume is not None)
        self._attempts = Attempts(retries, call_kwargs.get("timeout"), resume=resume)
        self._view = Continuity(sample_rate)
        self._lock = threading.Lock()
        self._ended = False
        self._cancelled = False
        self._finished = False
        self._accepted = False     # a response to the current attempt arrived
        self._stop_wait = threading.Event()  # cancel() ends a backoff wait
        self._call = self._start()
        #: Audio encoding and output sample rate of this session's chunks.
        self.encoding = encoding
        self.sample_rate = sample_rate

    def _start(self):
        config = resumed_config(self._config, self._view.ended)
        requests = _Requests(self, self._attempts.number, config)
        call = self._stub.StreamingSynthesize(
            iter(requests), **dict(self._kwargs, timeout=self._attempts.timeout()))
        requests.set_call(call)
        return call

    # -- input -------------------------------------------------------------------------------

    def send(self, text: str) -> None:
        """Send a text fragment (any size; splitting mid-word is fine). Empty text is skipped."""
        if not isinstance(text, str):
            raise TypeError(f"send() takes str, got {type(text).__name__}")
        if text:
            self._put(text)

    def flush(self, id: str = "") -> None:  # noqa: A002 - the proto field's name
        """End the current segment now, even mid-sentence (the text so far is spoken).
        ``id`` comes back as ``flush_id`` on the SegmentStart/SegmentEnd of the segment it
        closes (see docs/api.md for a flush with nothing pending)."""
        self._put(_convert.flush_request(id) if id else FLUSH)

    def end(self) -> None:
        """Half-close: no more text. Calling it again is a no-op."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
            if self._queue is not None:
                self._queue.put(_END)

    def cancel(self) -> None:
        """Stop the call now; the server frees the session's slots. Iteration then ends
        without an error. Safe to call at any time, also after the call finished."""
        with self._lock:
            self._cancelled = True
            call = self._call
        self._stop_wait.set()
        call.cancel()
        self._release_writer()

    @property
    def done(self) -> bool:
        """True once the call has finished (summary received, error, or cancel)."""
        with self._lock:
            return self._finished or (self._call.done() and not self._may_retry(self._call))

    def _put(self, item: Any) -> None:
        if self._queue is None:
            raise RuntimeError("this session is fed from an iterable; send() is not available")
        with self._lock:
            if self._ended:
                raise RuntimeError("the session's input has ended (end() was called)")
            if self._cancelled:
                raise TTSError(grpc.StatusCode.CANCELLED, "the session was cancelled")
            if self._call.done() and not self._may_retry(self._call):
                raise TTSError(self._call.code() or grpc.StatusCode.UNKNOWN,
                               self._call.details() or "")
            self._queue.put(item)  # a refused call's retry replays it with the rest

    def _release_writer(self) -> None:
        # gRPC's writer thread blocks in the queue; an _END lets it finish once the call is over
        if self._queue is not None:
            self._queue.put(_END)

    # -- output ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Event]:
        return self.events()

    def events(self) -> Iterator[Event]:
        """The session's events in order; ends after the Summary, or quietly after cancel().
        A non-OK status raises TTSError (or the exception the text source raised)."""
        try:
            while True:
                call = self._call
                try:
                    for msg in call:
                        if not self._accepted:
                            self._accepted = True
                            self._attempts.accepted()
                            self._input.accept()
                        ev = _convert.event(msg)
                        if ev is None:
                            continue
                        ev = self._view.event(ev)
                        if isinstance(ev, SegmentEnd):
                            self._input.segment_ended(ev.text_end)
                        yield ev
                    return
                except grpc.RpcError as e:
                    if self._input.error is not None:
                        raise self._input.error from None
                    if self._cancelled:
                        return
                    if self._nothing_left(call):
                        yield self._view.local_summary(_session_id(call))
                        return
                    if self._retry(call):
                        continue
                    if self._cancelled:
                        return
                    raise TTSError.from_rpc_error(e) from None
        finally:
            self._finished = True
            self._call.cancel()  # no-op once finished; frees the slot if the caller stopped early
            self._release_writer()

    def _nothing_left(self, call) -> bool:
        """Whether a failed call leaves nothing to speak: every segment of a session that
        has been resumed (or would be now) ended and its input ended too. A new call could
        only be refused (the server wants text), so the session ends here, with the
        caller's own summary. A resumed call refused for want of text counts too."""
        code = call.code()
        resuming = self._view.resumes or (code == grpc.StatusCode.UNAVAILABLE
                                          and self._attempts.resume is not None
                                          and self._ending(call)[1])
        if not resuming or code not in (grpc.StatusCode.UNAVAILABLE,
                                        grpc.StatusCode.INVALID_ARGUMENT):
            return False
        return self._input.ended and not speakable(self._input.remaining())

    def _ending(self, call) -> tuple[bool, bool]:
        """How a finished attempt ended: (with UNAVAILABLE, accepted by the server)."""
        return (call.code() == grpc.StatusCode.UNAVAILABLE,
                accepted(self._accepted, call.initial_metadata()))

    def _may_retry(self, call) -> bool:
        """Whether a finished attempt may be followed by another (see _retry)."""
        return self._attempts.may_retry(*self._ending(call))

    def _retry(self, call) -> bool:
        """Start the next attempt after the backoff, if the way ``call`` ended allows one:
        a retry of a refused call, or a resume of an accepted one (from the cut)."""
        unavailable, was_accepted = self._ending(call)
        wait = self._attempts.next_wait(unavailable, was_accepted)
        if wait is None or self._stop_wait.wait(wait):
            return False
        with self._lock:
            if self._cancelled:
                return False
            if was_accepted:
                self._view.resumed()  # the caller's numbering goes on from here
            self._attempts.advance()
            self._accepted = False
            self._input.begin(self._attempts.number)
            self._call = self._start()
        return True

    # -- context manager ---------------------------------------------------------------------

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.done:
            self.cancel()
        self._release_writer()
