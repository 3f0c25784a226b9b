"""One call's session, run the same way by every edge (the gRPC servicer, the HTTP speech
route and the WebSocket).

    edge: opens the call (ServerState.open_call), reads its wire format
      |
    SessionCall(state, call, settings)   the runtime check, then the settings, the
      |                                  StreamSession and the "session started" line
    async for out in run.outputs(inputs):
        the edge writes `out`            the stalled-consumer clock runs while the edge
      |                                  holds an output; the summary is counted and logged
      |                                  once the edge has taken it
    edge: ends the call with its own status (gRPC status, HTTP JSON error, WebSocket close)

Refusals are SessionError (with `field` where a setting is at fault); each edge maps them
to its wire format and keeps its own call outcome and closing log line.

What operators see of a call is made here too, once for both edges: its span and its
segments' (server/traces.py, when tracing is on: the edge passes the caller's trace context
in a CallOrigin), the per-generation histograms (admission wait, time to first token) and
the late-audio counter (server/lateness.py). All of it at segment and call ends, plus one
clock reading and a comparison per audio chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import AsyncIterator, Callable, Union

import structlog

from orpheus_svc.core.status import Status
from orpheus_svc.runtime import Runtime

from .lateness import ListenerClock
from orpheus_svc.core.errors import OK, SessionError, classify

from .session import AudioOut, Input, Output, SegmentEnded, StreamSession, Summary
from .settings import SessionSettings
from .state import OpenCall, ServerState
from .traces import CallOrigin, CallTrace

log = structlog.get_logger("orpheus_svc.session")

NOT_SERVING = ("the model is still loading or the server is shutting down; "
               "retry shortly (health reports SERVING when ready)")

# Settings, or a function that validates them: called after the runtime check, so a server
# that is loading answers UNAVAILABLE whatever the request says.
Settings = Union[SessionSettings, Callable[[], SessionSettings]]


def require_runtime(state: ServerState) -> Runtime:
    """The runtime, or SessionError(UNAVAILABLE) while the model loads or the server drains."""
    runtime = state.runtime_or_none()
    if runtime is None:
        raise SessionError(Status.UNAVAILABLE, NOT_SERVING)
    return runtime


class SessionCall:
    """The session of an open call: built (runtime check, settings, StreamSession, start
    log) on construction, which raises SessionError for a refusal; run by `outputs`.
    `origin`: the caller's trace context and API key name (the edge reads them)."""

    def __init__(self, state: ServerState, call: OpenCall, settings: Settings,
                 origin: CallOrigin | None = None) -> None:
        self.state, self.call = state, call
        tracing = getattr(state, "tracing", None)
        self.trace = None if tracing is None else CallTrace(
            tracing, origin or CallOrigin(), call.rpc, call.session_id, call.opened_at)
        try:
            runtime = require_runtime(state)
            self.settings = settings() if callable(settings) else settings
        except SessionError as exc:
            if self.trace is not None:
                self.trace.end(exc.code, message=exc.message)
            raise
        self.session = StreamSession(runtime, self.settings, state.config.text,
                                     session_id=call.session_id)
        call.session = self.session  # the watchdog's idle clock reads it
        self.listener = None if self.settings.whole else ListenerClock()
        if self.trace is not None:
            self.trace.settings(self.settings)
            self.session.on_open = self.trace.segment_opened
        s = self.settings
        log.info("session started", rpc=call.rpc, session_id=call.session_id, voice=s.voice,
                 encoding=s.encoding, rate=s.sample_rate, normalize=s.normalize_text)

    async def outputs(self, inputs: AsyncIterator[Input]) -> AsyncIterator[Output]:
        """The session's outputs. Closing this generator early cancels the session's
        generations (their slots are freed at the engine's next step)."""
        call, loop = self.call, asyncio.get_running_loop()
        t0 = time.monotonic()
        summary = None
        try:
            async with contextlib.aclosing(self.session.run(inputs)) as outs:
                async for out in outs:
                    if isinstance(out, AudioOut):
                        self._audio_sent(out)
                    elif isinstance(out, SegmentEnded):
                        self._segment_ended(out)
                    # re-read at every output: Starlette streams a response body from another
                    # task than its endpoint's, and the watchdog cancels the one writing
                    call.task = asyncio.current_task()
                    call.writing_since = loop.time()  # the watchdog's stalled-consumer clock
                    yield out
                    call.writing_since = None
                    call.writes += 1
                    if isinstance(out, Summary):  # counted once it is on its way to the client
                        summary = out
                        self._finished(out)
        except SessionError as exc:
            self._end(classify(exc).traced, summary, exc.message)
            raise
        except BaseException as exc:
            # cut by a time limit (the watchdog set cut_by), cancelled by the client, a
            # generator closed early (the edge stopped reading), or a bug
            outcome = classify(exc, cut_by=call.cut_by,
                               cancelled=isinstance(exc, (asyncio.CancelledError, GeneratorExit)))
            self._end(outcome.traced, summary, call.cut_by)
            raise
        self._end(OK.outcome, summary)
        log.debug("session closed", session_id=call.session_id,
                  wall_s=round(time.monotonic() - t0, 3))

    def _audio_sent(self, out: AudioOut) -> None:
        """An audio chunk goes to the edge: late for its listener? (server/lateness.py)"""
        if self.listener is None or not out.num_samples:
            return
        late = self.listener.sent(time.monotonic(), out.num_samples / self.settings.sample_rate,
                                  self.session.segment(out.segment_index).t_cut)
        if late and self.state.metrics is not None:
            self.state.metrics.late_audio.inc(late)

    def _segment_ended(self, out: SegmentEnded) -> None:
        """A segment's last audio goes to the edge: its generation's engine-side waits to
        the histograms, its span to the trace."""
        seg = self.session.segment(out.segment_index)
        fin, metrics = seg.finish, self.state.metrics
        if fin is not None and metrics is not None:
            metrics.observe_generation(seg.index, fin.queued_s, fin.first_token_s)
        if self.trace is not None:
            self.trace.segment_ended(seg, time.monotonic(), self.settings.sample_rate)

    def _end(self, outcome: str, summary: Summary | None, message: str | None = None) -> None:
        if self.trace is not None:
            self.trace.end(outcome, self.session, summary,
                           self.listener.late_s if self.listener else 0.0, message)
            self.trace = None  # once

    def _finished(self, out: Summary) -> None:
        self.state.add_audio_seconds(out.num_samples / self.settings.sample_rate)
        if out.time_to_first_audio_ms > 0:
            self.state.observe_ttfa(out.time_to_first_audio_ms / 1000)
        log.info("session finished", session_id=self.call.session_id,
                 ttfa_ms=round(out.time_to_first_audio_ms, 1), audio_ms=round(out.audio_ms),
                 tokens=out.num_tokens, segments=out.num_segments)
