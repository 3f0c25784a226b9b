"""Runs one StreamSession for the HTTP edge with the gRPC edge's validation and bookkeeping.

Validation is server/options.py `session_options` (voice from the model's registry,
encoding and rate, sampling, numeric ranges), the module the gRPC servicer calls too, so a
request means the same on both edges and fails with the same message. Counters (sessions,
outcomes, errors, audio seconds, time to first audio) go to the same ServerState the gRPC
edge and GetStatus use.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import AsyncIterator

import structlog

from orpheus_svc.core.status import Status
from orpheus_svc.server import options as shared
from orpheus_svc.server.session import Input, Output, SessionError, SessionOptions, StreamSession, Summary
from orpheus_svc.server.state import OpenCall, ServerState

from .errors import ApiError

log = structlog.get_logger("orpheus_svc.http")

def session_options(state: ServerState, voice: str, encoding: str, sample_rate: int = 0,
                    seed: int | None = None, whole: bool = False,
                    count: bool = True) -> SessionOptions:
    """Validated options, or ApiError(INVALID_ARGUMENT) saying what to change. `whole`:
    the audio goes out in one piece at the end (SessionOptions.whole). `sample_rate` and
    `seed` are the integers the client sent, range-checked by the shared validation.
    `count`: count a refusal in the errors (false when an open call will count it as
    its outcome, as a WebSocket's does)."""
    try:
        options = shared.session_options(state, voice, encoding, sample_rate,
                                         shared.SamplingChoice(seed=seed), allow_wav=True)
    except SessionError as exc:
        if count:
            state.count_error(exc.code)
        param = "voice" if "voice" in exc.message else "seed" if exc.message.startswith("seed") \
            else None
        raise ApiError(exc.code, exc.message, param) from exc
    return dataclasses.replace(options, whole=whole)


def open_call(state: ServerState, rpc: str) -> OpenCall:
    """Count a call as open (it shows in GetStatus and counts against server.max_sessions)
    or refuse it: ApiError(RESOURCE_EXHAUSTED). The caller closes it (state.close_call)."""
    call = OpenCall(uuid.uuid4().hex[:12], rpc, asyncio.current_task())
    refusal = state.open_call(call)
    if refusal is not None:
        state.count_error(Status.RESOURCE_EXHAUSTED)
        log.warning("call refused", rpc=rpc, session_id=call.session_id,
                    status="RESOURCE_EXHAUSTED", reason=refusal)
        raise ApiError(Status.RESOURCE_EXHAUSTED, refusal)
    return call


def require_runtime(state: ServerState, count: bool = True):
    """The Runtime, or ApiError(UNAVAILABLE) while loading or draining (`count`: as for
    session_options)."""
    runtime = state.runtime_or_none()
    if runtime is None:
        if count:
            state.count_error(Status.UNAVAILABLE)
        raise ApiError(Status.UNAVAILABLE, "the model is still loading or the server is shutting "
                       "down; retry shortly (health reports SERVING when ready)")
    return runtime


async def run_session(state: ServerState, options: SessionOptions, inputs: AsyncIterator[Input],
                      rpc: str, call: OpenCall | None = None) -> AsyncIterator[Output]:
    """The session's outputs; closing this generator early cancels the session's
    generations (their slots are freed at the engine's next step).

    The call counts against server.max_sessions like a gRPC call (ApiError
    RESOURCE_EXHAUSTED beyond it) and is watched by the same watchdog: the idle timeout
    ends the input (a WebSocket that sends nothing), and a consumer that has not asked
    for the next output for session.stalled_consumer_timeout_seconds has its task
    cancelled. The task is re-read at every output, because Starlette streams a response
    body from another task than the endpoint's.

    `call`: one the caller opened already (open_call; a WebSocket opens its call when it
    is accepted, so it is counted before its config); closed here either way."""
    runtime = require_runtime(state)
    if call is None:
        call = open_call(state, rpc)
    session = StreamSession(runtime, options, state.config.text, session_id=call.session_id)
    call.session = session
    outputs = session.run(inputs)
    loop = asyncio.get_running_loop()
    outcome = "ok"
    log.info("session started", rpc=rpc, session_id=session.session_id, voice=options.voice,
             encoding=options.encoding, rate=options.sample_rate)
    try:
        async for out in outputs:
            if isinstance(out, Summary):
                state.add_audio_seconds(out.num_samples / options.sample_rate)
                if out.time_to_first_audio_ms > 0:
                    state.observe_ttfa(out.time_to_first_audio_ms / 1000)
                log.info("session finished", session_id=session.session_id,
                         ttfa_ms=round(out.time_to_first_audio_ms, 1), audio_ms=round(out.audio_ms),
                         tokens=out.num_tokens, segments=out.num_segments)
            call.task = asyncio.current_task()
            call.writing_since = loop.time()  # the watchdog's stalled-consumer clock
            yield out
            call.writing_since = None
            call.writes += 1
    except SessionError as exc:
        outcome = exc.cause or exc.code
        log.info("session refused", session_id=session.session_id, code=exc.code, reason=exc.message)
        raise
    except BaseException:
        outcome = call.cut_by or "cancelled"
        if call.cut_by:
            reason = (call.stall_reason(state.config.session.stalled_consumer_timeout_seconds)
                      if call.stalled else "idle (session.idle_timeout_seconds)")
            log.warning("call ended", rpc=rpc, session_id=session.session_id,
                        status="DEADLINE_EXCEEDED", reason=reason)
        raise
    finally:
        await outputs.aclose()  # cancels generations still running: slots freed next step
        state.close_call(call, outcome)
