"""The HTTP edge's side of a call: refusals in OpenAI's JSON shape, and the call itself run
by the runner the gRPC servicer uses too (server/calls.py `SessionCall`).

Validation is server/settings.py `session_settings` (voice from the model's registry,
encoding and rate, sampling, numeric ranges), the module the gRPC servicer calls too, so a
request means the same on both edges and fails with the same message; the refusal names its
field, which becomes the JSON error's `param`. Counters (sessions, outcomes, errors, audio
seconds, time to first audio) go to the same ServerState the gRPC edge and GetStatus use.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import AsyncIterator

import structlog

from orpheus_svc.core.status import Status
from orpheus_svc.server import calls
from orpheus_svc.server import settings as shared
from orpheus_svc.server.calls import Settings
from orpheus_svc.core.errors import OK, SessionError, classify
from orpheus_svc.server.session import Input, Output
from orpheus_svc.server.settings import SessionSettings
from orpheus_svc.server.state import OpenCall, ServerState
from orpheus_svc.server.traces import CallOrigin

from .auth import api_key_name
from .errors import ApiError

log = structlog.get_logger("orpheus_svc.http")


def api_error(exc: SessionError) -> ApiError:
    """A SessionError as this edge answers it: the setting it names is the error's `param`."""
    return ApiError(exc.code, exc.message, exc.field)


def session_settings(state: ServerState, voice: str, encoding: str, sample_rate: int = 0,
                     seed: int | None = None, whole: bool = False,
                     word_timestamps: bool = False) -> SessionSettings:
    """Validated settings, or ApiError(INVALID_ARGUMENT) saying what to change, counted in
    the errors (no call is open yet to count it). `whole`: the audio goes out in one piece
    at the end (SessionSettings.whole). `sample_rate` and `seed` are the integers the
    client sent, range-checked by the shared validation."""
    try:
        return shared.session_settings(state, voice, encoding, sample_rate,
                                       shared.SamplingChoice(seed=seed), allow_wav=True,
                                       whole=whole, word_timestamps=word_timestamps)
    except SessionError as exc:
        state.count_error(exc.code)
        raise api_error(exc) from exc


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


def require_runtime(state: ServerState):
    """The Runtime, or ApiError(UNAVAILABLE) while loading or draining, counted in the
    errors (no call is open yet to count it)."""
    try:
        return calls.require_runtime(state)
    except SessionError as exc:
        state.count_error(exc.code)
        raise api_error(exc) from exc


def call_origin(conn) -> CallOrigin | None:
    """The caller's trace context (traceparent, tracestate headers) and API key name, for
    the call's span; None while tracing is off (nothing is read then)."""
    if conn.app.state.server_state.tracing is None:
        return None
    return CallOrigin.of(conn.headers.items(), api_key_name(conn))


async def run_session(state: ServerState, settings: Settings, inputs: AsyncIterator[Input],
                      rpc: str, call: OpenCall | None = None,
                      origin: CallOrigin | None = None) -> AsyncIterator[Output]:
    """The session's outputs; closing this generator early cancels the session's
    generations (their slots are freed at the engine's next step). A refusal or failure
    is a SessionError (its `field` for api_error), counted as the call's outcome.

    The call counts against server.max_sessions like a gRPC call (ApiError
    RESOURCE_EXHAUSTED beyond it) and is watched by the same watchdog: the idle timeout
    ends the input (a WebSocket that sends nothing), and a consumer that has not asked
    for the next output for session.stalled_consumer_timeout_seconds has its task
    cancelled (SessionCall.outputs keeps that clock).

    `settings`: as SessionCall takes them (a function: validated after the runtime
    check). `call`: one the caller opened already (open_call; a WebSocket opens its call
    when it is accepted, so it is counted before its config); closed here either way.
    `origin`: call_origin of the request (its trace context, for the call's span)."""
    if call is None:
        call = open_call(state, rpc)
    outcome = OK.outcome
    try:
        run = calls.SessionCall(state, call, settings, origin)
        async with contextlib.aclosing(run.outputs(inputs)) as outputs:
            async for out in outputs:
                yield out
    except SessionError as exc:
        outcome = classify(exc).outcome
        log.info("session refused", session_id=call.session_id, code=exc.code, reason=exc.message)
        raise
    except BaseException as exc:
        # a time limit, or the edge stopped (the client left, the response was cut): what
        # a raising body means here, where bugs surface as the error the route answers
        outcome = classify(exc, cut_by=call.cut_by, cancelled=True).outcome
        if call.cut_by:
            reason = (call.stall_reason(state.config.session.stalled_consumer_timeout_seconds)
                      if call.stalled else "idle (session.idle_timeout_seconds)")
            log.warning("call ended", rpc=rpc, session_id=call.session_id,
                        status="DEADLINE_EXCEEDED", reason=reason)
        raise
    finally:
        state.close_call(call, outcome)  # after the session's generations were cancelled
