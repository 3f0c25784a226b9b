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
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import AsyncIterator, Callable, Union

import structlog

from orpheus_svc.core.status import Status
from orpheus_svc.runtime import Runtime

from .session import Input, Output, SessionError, StreamSession, Summary
from .settings import SessionSettings
from .state import OpenCall, ServerState

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
    log) on construction, which raises SessionError for a refusal; run by `outputs`."""

    def __init__(self, state: ServerState, call: OpenCall, settings: Settings) -> None:
        runtime = require_runtime(state)
        self.settings = settings() if callable(settings) else settings
        self.state, self.call = state, call
        self.session = StreamSession(runtime, self.settings, state.config.text,
                                     session_id=call.session_id)
        call.session = self.session  # the watchdog's idle clock reads it
        s = self.settings
        log.info("session started", rpc=call.rpc, session_id=call.session_id, voice=s.voice,
                 encoding=s.encoding, rate=s.sample_rate, normalize=s.normalize_text)

    async def outputs(self, inputs: AsyncIterator[Input]) -> AsyncIterator[Output]:
        """The session's outputs. Closing this generator early cancels the session's
        generations (their slots are freed at the engine's next step)."""
        call, loop = self.call, asyncio.get_running_loop()
        t0 = time.monotonic()
        async with contextlib.aclosing(self.session.run(inputs)) as outs:
            async for out in outs:
                # re-read at every output: Starlette streams a response body from another
                # task than its endpoint's, and the watchdog cancels the one writing
                call.task = asyncio.current_task()
                call.writing_since = loop.time()  # the watchdog's stalled-consumer clock
                yield out
                call.writing_since = None
                call.writes += 1
                if isinstance(out, Summary):  # counted once it is on its way to the client
                    self._finished(out)
        log.debug("session closed", session_id=call.session_id,
                  wall_s=round(time.monotonic() - t0, 3))

    def _finished(self, out: Summary) -> None:
        self.state.add_audio_seconds(out.num_samples / self.settings.sample_rate)
        if out.time_to_first_audio_ms > 0:
            self.state.observe_ttfa(out.time_to_first_audio_ms / 1000)
        log.info("session finished", session_id=self.call.session_id,
                 ttfa_ms=round(out.time_to_first_audio_ms, 1), audio_ms=round(out.audio_ms),
                 tokens=out.num_tokens, segments=out.num_segments)
