"""The split topology's engine process continues each traced generation's trace.

    front-end: orpheus.segment span --(traceparent on the SUBMIT command: ipc/wire.py)-->
    engine process: orpheus.engine.generation   (CONSUMER, child of that segment span)
        from the command's arrival to the generation's final event; events: admitted,
        first_token; its own resource (orpheus.process = "engine", its pid)

What the hot threads pay, and only while tracing is on: the command thread stores the
traceparent and two clock readings for a request that carries one (`submitted`); the
thread that sends a batch of events looks for final events among them (`ended`: an append
for each traced end). The spans are built on a thread of their own, a few times a second,
from the waits the engine already carries on each Finish (core/events.py).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Sequence

from orpheus_svc.threads import os_named

from .tracing import Tracing

BUILD_INTERVAL_S = 0.2


class EngineSpans:
    """EngineServer's observer (ipc/engine.py): `submitted` for each command, `ended` for
    each event batch sent; `close` builds what is left and stops the thread."""

    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing
        self._pending: dict[int, tuple] = {}  # gen_id -> (traceparent, wall ns, monotonic, req)
        self._ended: deque = deque()           # (gen_id, Finish, monotonic)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=os_named(self._run), name="trace-spans",
                                        daemon=True)
        self._thread.start()

    def submitted(self, gen_id: int, request: Any) -> None:
        if request.trace:
            self._pending[gen_id] = (request.trace, time.time_ns(), time.monotonic(), request)

    def ended(self, events: Sequence[Any]) -> None:
        pending = self._pending
        for ev in events:
            if getattr(ev, "final", False) and ev.gen_id in pending:
                self._ended.append((ev.gen_id, ev.finish, time.monotonic()))

    def _run(self) -> None:
        while not self._stop.wait(BUILD_INTERVAL_S):
            self.build()

    def build(self) -> None:
        """Build the spans of the generations that ended since the last call."""
        from opentelemetry.trace import SpanKind

        while self._ended:
            gen_id, fin, t_end = self._ended.popleft()
            entry = self._pending.pop(gen_id, None)
            if entry is None:
                continue
            traceparent, wall0, mono0, req = entry
            ns = lambda t: wall0 + int((t - mono0) * 1e9)  # noqa: E731
            attrs = {"orpheus.session_id": req.session_id,
                     "orpheus.segment.index": req.segment_index, "orpheus.gen_id": gen_id,
                     "orpheus.prompt_tokens": len(req.prompt_ids)}
            if fin is not None:
                attrs.update({"orpheus.finish_reason": fin.reason,
                              "orpheus.tokens": fin.num_generated, "orpheus.frames": fin.num_frames})
            span = self.tracing.tracer.start_span(
                "orpheus.engine.generation", context=self.tracing.parent_of(traceparent),
                kind=SpanKind.CONSUMER, start_time=wall0, attributes=attrs)
            if fin is not None and fin.queued_s is not None:
                span.add_event("admitted", timestamp=ns(mono0 + fin.queued_s))
                if fin.first_token_s is not None:
                    span.add_event("first_token", timestamp=ns(mono0 + fin.first_token_s))
            span.end(end_time=ns(t_end))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.build()
