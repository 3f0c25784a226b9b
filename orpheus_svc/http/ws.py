"""WebSocket text streaming, /v1/audio/speech/stream: StreamingSynthesize over a WebSocket.

Client -> server, JSON text frames:

    {"type": "config", "voice": "tara", "encoding": "pcm16", "sample_rate": 24000, "seed": 1,
     "word_timestamps": true}
        first, once; every field optional (encoding: pcm16 | wav | mulaw | alaw | ogg_opus |
        mp3 | flac; sample_rate 0 = the encoding's default; word_timestamps false)
    {"type": "text", "text": "Hel"}     a fragment of any size (mid-word is fine)
    {"type": "flush"}                   end the current segment now
    {"type": "end"}                     end of input (gRPC: half-close)
    {"type": "cancel"}                  stop now; the server answers "cancelled" and closes

Server -> client: binary frames carry the audio bytes, strictly in order (concatenated they
are the stream in the requested encoding); JSON text frames carry the events:

    {"type": "segment_start", "segment_index", "text", "sample_offset"}
    {"type": "segment_end", "segment_index", "text", "num_samples", "num_tokens", "finish_reason"}
    {"type": "word_timings", "segment_index", "final", "words": [{"text", "char_start",
     "char_end", "start_sample", "end_sample", "final"}, ...]}
        only with word_timestamps: as the gRPC WordTimings (docs/api.md), estimates before a
        segment's first audio frame, final times before its segment_end if they moved
    {"type": "summary", "session_id", "time_to_first_audio_ms", "audio_ms", "num_tokens",
     "num_segments", "num_samples", "wall_ms"}          last; then the server closes (1000)
    {"type": "error", "code": "INVALID_ARGUMENT", "message"}   then close (1008, or 1013
                                                       for RESOURCE_EXHAUSTED / UNAVAILABLE)

Every socket ends with a close frame, after the summary (1000) or an error event, however it
ends: a bad message, no config within http.ws_config_timeout_seconds, the idle timeout (a
summary of what was spoken, then the DEADLINE_EXCEEDED error), or a client that stopped
reading (the stalled-consumer timeout: the error event and close are queued behind the
unread audio, limits.BoundedWebSocket). The call is open, and in GetStatus, from the
moment the socket is accepted.

Closing the socket (or "cancel") mid-stream cancels the session's generations: their slots
are freed at the engine's next step, exactly like a cancelled gRPC call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json

import structlog
from starlette.websockets import WebSocket, WebSocketDisconnect

from orpheus_svc.core.errors import SessionError, internal_message, new_error_id
from orpheus_svc.core.status import Status
from orpheus_svc.server import settings as shared
from orpheus_svc.server.calls import Settings
from orpheus_svc.server.session import (AudioOut, FlushIn, SegmentEnded, SegmentStarted,
                                        Summary, TextIn, WordsOut)
from orpheus_svc.server.state import OpenCall, ServerState

from . import jsonwire
from .auth import authorize
from .errors import ApiError
from .limits import URGENT, refused
from .sessions import call_origin, open_call, run_session

log = structlog.get_logger("orpheus_svc.http")

_END = object()
_TRY_AGAIN = (Status.RESOURCE_EXHAUSTED, Status.UNAVAILABLE)
# The error event and close are written even to a client that reads nothing
# (limits.BoundedWebSocket); this only bounds a server that would not do so.
_CLOSE_WAIT_S = 2.0


async def _send_error(ws: WebSocket, code: str, message: str,
                      close_code: int | None = None) -> None:
    """The error event, then the close; never raises (the client may be gone already)."""
    async def send() -> None:
        event = {"type": "error", "code": str(code), "message": message}
        await ws.send({"type": "websocket.send", URGENT: True, "text": json.dumps(event)})
        await ws.close(close_code or (1013 if code in _TRY_AGAIN else 1008))
    with contextlib.suppress(Exception):
        await asyncio.wait_for(send(), _CLOSE_WAIT_S)


def _event(out) -> dict:
    if isinstance(out, WordsOut):
        return {"type": "word_timings", "segment_index": out.segment_index, "final": out.final,
                "words": [dataclasses.asdict(w) for w in out.words]}
    kind = {SegmentStarted: "segment_start", SegmentEnded: "segment_end", Summary: "summary"}
    fields = {k: v for k, v in dataclasses.asdict(out).items()
              if isinstance(v, (str, int, float)) and not k.startswith("_")}
    return {"type": kind[type(out)], **fields}


async def stream(ws: WebSocket) -> None:
    state = ws.app.state.server_state
    await ws.accept()
    call: OpenCall | None = None
    try:
        try:
            await authorize(ws)
            call = open_call(state, "http.ws")  # counted (GetStatus) before its config
            settings = _settings(state, await _config(ws, state))
        except ApiError as exc:
            await _send_error(ws, exc.code, exc.message)
            if call is not None:
                state.close_call(call, exc.code)
            return
        except WebSocketDisconnect:  # left before its config
            if call is not None:
                state.close_call(call, "cancelled")
            return
        await _serve(ws, state, settings, call)
    except Exception as exc:  # noqa: BLE001 - a bug here must still end with a close frame
        error_id = new_error_id()
        log.error("websocket failed", error_id=error_id, exc_info=exc)
        await _send_error(ws, Status.INTERNAL, internal_message("internal error", error_id),
                          close_code=1011)
    finally:
        if call is not None:
            state.close_call(call, "cancelled")  # no-op when the session closed it


async def _config(ws: WebSocket, state: ServerState) -> dict:
    """The first message, within http.ws_config_timeout_seconds; it must be the config."""
    timeout = state.config.http.ws_config_timeout_seconds
    try:
        msg = await asyncio.wait_for(ws.receive(), timeout or None)
    except asyncio.TimeoutError:
        refused(state, "ws_config_timeout", timeout_s=timeout)
        raise ApiError(Status.DEADLINE_EXCEEDED, f"no config message within {timeout:g} s of "
                       "connecting (http.ws_config_timeout_seconds); send "
                       '{"type": "config", ...} first') from None
    if msg["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(msg.get("code", 1000))
    if msg.get("text") is None:
        raise ApiError(Status.INVALID_ARGUMENT, "messages are JSON text frames; the first is "
                       '{"type": "config", ...}')
    first = jsonwire.decode(msg["text"], "the config message")
    if not isinstance(first, dict) or first.get("type") != "config":
        raise ApiError(Status.FAILED_PRECONDITION, "the first message must be "
                       '{"type": "config", ...} (voice, encoding); text comes after it')
    return first


def _settings(state: ServerState, first: dict) -> Settings:
    """The config's settings: its JSON types checked here (ApiError), the rest validated by
    the call runner after its runtime check, as a gRPC call's are (server/calls.py); a
    refusal there is the open call's outcome and ends the socket with the error event."""
    encoding = first.get("encoding") or "pcm16"
    if not isinstance(encoding, str) or encoding not in _encodings():
        raise ApiError(Status.INVALID_ARGUMENT, f"encoding {str(encoding)[:40]!r} is not "
                       f"offered; use one of {', '.join(_encodings())}", "encoding")
    voice = first.get("voice") or ""
    if not isinstance(voice, str):
        raise ApiError(Status.INVALID_ARGUMENT, "'voice' must be a string", "voice")
    sample_rate = jsonwire.integer(first, "sample_rate", "config ") or 0
    seed = jsonwire.integer(first, "seed", "config ")
    words = first.get("word_timestamps", False)
    if not isinstance(words, bool):
        raise ApiError(Status.INVALID_ARGUMENT, "'word_timestamps' must be true or false",
                       "word_timestamps")
    return lambda: shared.session_settings(state, voice, encoding, sample_rate,
                                           shared.SamplingChoice(seed=seed), allow_wav=True,
                                           word_timestamps=words)


async def _serve(ws: WebSocket, state: ServerState, settings: Settings, call: OpenCall) -> None:
    inbox: asyncio.Queue = asyncio.Queue()
    pump = asyncio.create_task(_pump(ws, state, settings, inbox, call))
    receiver = asyncio.create_task(_receive(ws, inbox, pump))
    try:
        await pump
    except asyncio.CancelledError:
        if not receiver.done():
            raise  # this handler itself is being cancelled
    finally:
        receiver.cancel()


def _encodings() -> tuple[str, ...]:
    from orpheus_svc.audio.pcm import ENCODINGS
    return tuple(e for e in ENCODINGS if e != "aac")  # aac is not in the gRPC API either


_AFTER_CONFIG = ("messages after the config are JSON objects with type text (and a string "
                 "'text'), flush, end or cancel")


def _message(msg: dict):
    """A client message after the config, as the session's input (or a SessionError)."""
    if msg.get("text") is None:
        return SessionError(Status.INVALID_ARGUMENT, _AFTER_CONFIG + "; got a binary frame")
    try:
        data = jsonwire.decode(msg["text"], "the message")
    except ApiError as exc:
        return SessionError(exc.code, exc.message)
    kind = data.get("type") if isinstance(data, dict) else None
    if kind == "text" and isinstance(data.get("text"), str):
        return TextIn(data["text"])
    if kind == "flush":
        return FlushIn()
    if kind == "end":
        return _END
    if kind == "cancel":
        return kind
    if kind == "config":
        return SessionError(Status.FAILED_PRECONDITION,
                            "the config may only be sent once, as the first message")
    return SessionError(Status.INVALID_ARGUMENT, _AFTER_CONFIG)


async def _receive(ws: WebSocket, inbox: asyncio.Queue, pump: asyncio.Task) -> None:
    """Reads client messages for the whole call, so a close or a cancel is seen even after
    the end of input; either one cancels the pump (and so the session)."""
    try:
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                break
            item = _message(msg)
            if item == "cancel":
                with contextlib.suppress(Exception):
                    await ws.send_json({"type": "cancelled"})
                    await ws.close(1000)
                break
            inbox.put_nowait(item)
    except (WebSocketDisconnect, RuntimeError):
        pass
    pump.cancel()  # disconnected or cancelled: the session's finally frees its slots


async def _pump(ws: WebSocket, state: ServerState, settings: Settings, inbox: asyncio.Queue,
                call: OpenCall) -> None:
    async def inputs():
        while True:
            item = await inbox.get()
            if item is _END:
                return
            if isinstance(item, SessionError):
                raise item
            yield item

    outputs = run_session(state, settings, inputs(), rpc="http.ws", call=call,
                          origin=call_origin(ws))
    try:
        async for out in outputs:
            if isinstance(out, AudioOut):
                if out.audio:
                    await ws.send_bytes(out.audio)
                continue
            await ws.send_json(_event(out))
        # the summary went out and the session ended normally (an idle timeout raises
        # after its summary: the error event below tells the client why it ended)
        await ws.close(1000)
    except SessionError as exc:  # refused (its config, a loading server) or failed
        await outputs.aclose()
        await _send_error(ws, exc.code, exc.message)
    except (WebSocketDisconnect, OSError, RuntimeError):
        # a send found the client gone (uvicorn: ClientDisconnected, an OSError; Starlette:
        # RuntimeError once the socket closed): not an error; the session is closed below
        log.info("client left", rpc="http.ws", session_id=call.session_id)
    except asyncio.CancelledError:
        if call.cut_by is None:
            raise  # the client left or cancelled (the receiver ended the pump)
        # the watchdog cut it: a write of audio waited past the stalled-consumer timeout
        asyncio.current_task().uncancel()
        await outputs.aclose()  # its generations are cancelled, the call closed (logged)
        reason = call.stall_reason(state.config.session.stalled_consumer_timeout_seconds)
        await _send_error(ws, Status.DEADLINE_EXCEEDED, reason)
    finally:
        await outputs.aclose()
