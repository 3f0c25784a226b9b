"""GenerationHandle: one generation opened on the engine, and the EventRouter that feeds it.

    handle = runtime.open(request, on_event, loop)   # new id, route, submit: one place
    ...events arrive in order: AudioEvent* (the last final, with its Finish)
       or a single Rejected...
    handle.close()                                    # unroute; cancel if not ended

It lives in engine/, beside the EngineLoop whose new_id/submit/cancel it wraps, because it
is the engine's consumer-side contract: the server's sessions, offline synth and warm-up
(all above this layer) import it from here, and nothing here imports them, asyncio, grpc
or torch (a loop is only something with call_soon_threadsafe).

The EventRouter is the one sink of the EngineLoop (Rejected) and of the Flusher
(audio and ends). For a handle opened with an asyncio `loop`, all of a batch's events for
that loop travel in a single call_soon_threadsafe, so the loop wakes once per engine step
or decode batch, not once per event; a handle without a loop gets its events on the thread
that delivers the batch, or, without `on_event`, in its own queue read by `events()` from
a plain thread (warm-up).
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable, Iterator, Protocol, Sequence

from orpheus_svc.core.events import AudioEvent, EngineEvent, Rejected
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.status import Status
from orpheus_svc.core.errors import internal_message, new_error_id

log = logging.getLogger(__name__)

Handler = Callable[[EngineEvent], None]


def is_end(event: EngineEvent) -> bool:
    """The last event of a generation's stream: its final audio, or its rejection."""
    return isinstance(event, Rejected) or (isinstance(event, AudioEvent) and event.final)


class Engine(Protocol):
    """What a handle needs of the EngineLoop."""

    def new_id(self) -> int: ...

    def submit(self, request: GenerationRequest, gen_id: int | None = None) -> int: ...

    def cancel(self, gen_id: int) -> None: ...


class EventRouter:
    """Routes engine events to per-generation handlers; the sink of EngineLoop and Flusher.

    A handler registered with an asyncio `loop` runs on that loop: all of a batch's events
    for one loop travel in a single call_soon_threadsafe. Other handlers run on the thread
    that delivers the batch."""

    def __init__(self) -> None:
        self._handlers: dict[int, tuple[Handler, Any]] = {}
        self._lock = threading.Lock()
        self.on_audio_error: Callable[[Sequence[int], BaseException], str] = self._audio_error
        self.failed_audio = 0  # generations failed by a codec error (GetStatus, metrics)

    def register(self, gen_id: int, handler: Handler, loop: Any = None) -> None:
        with self._lock:
            self._handlers[gen_id] = (handler, loop)

    def unregister(self, gen_id: int) -> None:
        with self._lock:
            self._handlers.pop(gen_id, None)

    def routed(self) -> list[int]:
        """The generations routed now."""
        with self._lock:
            return list(self._handlers)

    def end_all(self, reason: str, code: Status = Status.UNAVAILABLE) -> list[int]:
        """End every routed generation from outside the engine (it is stalled or gone):
        each consumer gets Rejected(reason, code) as its end, and nothing of that
        generation after it (it is unrouted here). Returns their ids: the caller cancels
        them on the engine, whose slots then free if it ever steps again."""
        with self._lock:
            ended = list(self._handlers.items())
            self._handlers.clear()
        by_loop: dict[Any, list] = {}
        for gen_id, (handler, loop) in ended:
            by_loop.setdefault(loop, []).append((handler, Rejected(gen_id, reason, code)))
        self._deliver_by_loop(by_loop)
        return [gen_id for gen_id, _ in ended]

    def __call__(self, batch: Sequence[EngineEvent]) -> None:
        by_loop: dict[Any, list] = {}
        with self._lock:
            for ev in batch:
                entry = self._handlers.get(ev.gen_id)
                if entry is not None:
                    by_loop.setdefault(entry[1], []).append((entry[0], ev))
        self._deliver_by_loop(by_loop)

    @staticmethod
    def _deliver_by_loop(by_loop: dict[Any, list]) -> None:
        for loop, items in by_loop.items():
            if loop is None:
                _deliver(items)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(_deliver, items)

    def _audio_error(self, gen_ids: Sequence[int], exc: BaseException) -> str:
        """The Flusher's on_error: log with an id, count, and return the client's message
        (the flusher puts it on those generations' final events)."""
        error_id = new_error_id()
        self.failed_audio += len(gen_ids)
        log.error("audio decode failed (error id %s) for generations %s", error_id,
                  list(gen_ids), exc_info=exc)
        return internal_message("audio decode failed", error_id)


def _deliver(items: list) -> None:
    for handler, event in items:
        handler(event)


class GenerationHandle:
    """One generation, from submit to its end. Open it with Runtime.open (or directly:
    GenerationHandle(engine, router, request, ...)); it is routed and submitted at once.

    Events reach `on_event` in order (on `loop` when given, one wake-up per batch), ending
    with exactly one end event (is_end): nothing of the generation follows it. Without
    `on_event` they queue in the handle for `events()`.

    close() is idempotent and safe from the consumer at any time: it stops the routing
    and, when the end has not been seen yet, cancels the generation (its slot frees at the
    next engine step). Use the handle as a context manager to close it on every path."""

    def __init__(self, engine: Engine, router: EventRouter, request: GenerationRequest,
                 on_event: Handler | None = None, loop: Any = None) -> None:
        self._engine, self._router = engine, router
        self._queue: queue.SimpleQueue | None = None if on_event is not None else queue.SimpleQueue()
        self._on_event = on_event if on_event is not None else self._queue.put
        self.ended = False  # the end event was delivered (consumer side)
        self._closed = False
        self.gen_id = engine.new_id()
        router.register(self.gen_id, self._deliver, loop)
        engine.submit(request, self.gen_id)

    def _deliver(self, event: EngineEvent) -> None:
        if self.ended or self._closed:
            return  # nothing after the end
        if is_end(event):
            self.ended = True
        self._on_event(event)

    def events(self, timeout: float | None = None) -> Iterator[EngineEvent]:
        """The events of a handle opened without on_event, blocking, up to and including
        the end; TimeoutError when none arrives for `timeout` seconds."""
        if self._queue is None:
            raise RuntimeError("this handle delivers its events to on_event")
        while True:
            try:
                event = self._queue.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"generation {self.gen_id}: no event for {timeout} s") from None
            yield event
            if is_end(event):
                return

    def cancel(self) -> None:
        """Ask the engine to end the generation; its end event (reason "cancelled") follows,
        unless it ended on its own first."""
        if not self.ended:
            self._engine.cancel(self.gen_id)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._router.unregister(self.gen_id)
        if not self.ended:
            self._engine.cancel(self.gen_id)

    def __enter__(self) -> GenerationHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
