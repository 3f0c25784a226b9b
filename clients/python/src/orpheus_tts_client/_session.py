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
from .types import FLUSH, Encoding, Event, TTSError

_END = object()  # queue item: half-close the input


class _Requests:
    """The request iterator gRPC consumes on its own thread: the config, then the text items
    of ``source`` (a caller's iterable, or the session's queue).

    When the caller's iterable raises, the call is cancelled and the exception is kept so
    that the response side re-raises it (instead of a bare CANCELLED status), and the input
    is never half-closed as if it had ended normally.
    """

    def __init__(self, config: pb.StreamingSynthesizeRequest, source: Iterable) -> None:
        self._config = config
        self._source = source
        self.error: BaseException | None = None
        self._call = None
        self._call_set = threading.Event()

    def set_call(self, call) -> None:
        self._call = call
        self._call_set.set()

    def __iter__(self) -> Iterator[pb.StreamingSynthesizeRequest]:
        yield self._config
        try:
            for item in self._source:
                req = _convert.fragment_request(item)
                if req is not None:
                    yield req
        except Exception as e:  # noqa: BLE001 - handed to the caller's thread
            self.error = e
            self._call_set.wait()
            self._call.cancel()


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
    """

    def __init__(self, stub, config: pb.StreamingSynthesizeRequest, call_kwargs: dict,
                 encoding: Encoding, sample_rate: int, source: Iterable | None = None) -> None:
        self._queue: queue.SimpleQueue[Any] | None = None
        if source is None:
            self._queue = queue.SimpleQueue()
            source = _drain(self._queue)
        self._requests = _Requests(config, source)
        self._lock = threading.Lock()
        self._ended = False
        self._cancelled = False
        self._call = stub.StreamingSynthesize(iter(self._requests), **call_kwargs)
        self._requests.set_call(self._call)
        #: Audio encoding and output sample rate of this session's chunks.
        self.encoding = encoding
        self.sample_rate = sample_rate

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
        self._cancelled = True
        self._call.cancel()
        self._release_writer()

    @property
    def done(self) -> bool:
        """True once the call has finished (summary received, error, or cancel)."""
        return self._call.done()

    def _put(self, item: Any) -> None:
        if self._queue is None:
            raise RuntimeError("this session is fed from an iterable; send() is not available")
        with self._lock:
            if self._ended:
                raise RuntimeError("the session's input has ended (end() was called)")
            if self._call.done():
                if self._cancelled:
                    raise TTSError(grpc.StatusCode.CANCELLED, "the session was cancelled")
                raise TTSError(self._call.code() or grpc.StatusCode.UNKNOWN,
                               self._call.details() or "")
            self._queue.put(item)

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
            for msg in self._call:
                ev = _convert.event(msg)
                if ev is not None:
                    yield ev
        except grpc.RpcError as e:
            if self._requests.error is not None:
                raise self._requests.error from None
            if self._cancelled:
                return
            raise TTSError.from_rpc_error(e) from None
        finally:
            self._call.cancel()  # no-op once finished; frees the slot if the caller stopped early
            self._release_writer()

    # -- context manager ---------------------------------------------------------------------

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._call.done():
            self.cancel()
        self._release_writer()
