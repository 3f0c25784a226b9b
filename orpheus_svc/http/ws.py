"""WebSocket text streaming, /v1/audio/speech/stream: StreamingSynthesize over a WebSocket.

Client -> server, JSON text frames:

    {"type": "config", "voice": "tara", "encoding": "pcm16", "sample_rate": 24000, "seed": 1}
        first, once; every field optional (encoding: pcm16 | wav | mulaw | alaw | ogg_opus |
        mp3 | flac; sample_rate 0 = the encoding's default)
    {"type": "text", "text": "Hel"}     a fragment of any size (mid-word is fine)
    {"type": "flush"}                   end the current segment now
    {"type": "end"}                     end of input (gRPC: half-close)
    {"type": "cancel"}                  stop now; the server answers "cancelled" and closes

Server -> client: binary frames carry the audio bytes, strictly in order (concatenated they
are the stream in the requested encoding); JSON text frames carry the events:

    {"type": "segment_start", "segment_index", "text", "sample_offset"}
    {"type": "segment_end", "segment_index", "text", "num_samples", "num_tokens", "finish_reason"}
    {"type": "summary", "session_id", "time_to_first_audio_ms", "audio_ms", "num_tokens",
     "num_segments", "num_samples", "wall_ms"}          last; then the server closes (1000)
    {"type": "error", "code": "INVALID_ARGUMENT", "message"}   then close (1008, or 1013
                                                       for RESOURCE_EXHAUSTED / UNAVAILABLE)

Closing the socket (or "cancel") mid-stream cancels the session's generations: their slots
are freed at the engine's next step, exactly like a cancelled gRPC call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json

from starlette.websockets import WebSocket, WebSocketDisconnect

from orpheus_svc.core.status import Status
from orpheus_svc.server.session import (AudioOut, FlushIn, SegmentEnded, SegmentStarted,
                                        SessionError, Summary, TextIn)

from .auth import authorize
from .errors import ApiError
from .sessions import require_runtime, run_session, session_options

_END = object()
_TRY_AGAIN = (Status.RESOURCE_EXHAUSTED, Status.UNAVAILABLE)


async def _send_error(ws: WebSocket, code: str, message: str) -> None:
    with contextlib.suppress(Exception):  # the client may be gone already
        await ws.send_json({"type": "error", "code": code, "message": message})
        await ws.close(1013 if code in _TRY_AGAIN else 1008)


def _event(out) -> dict:
    kind = {SegmentStarted: "segment_start", SegmentEnded: "segment_end", Summary: "summary"}
    fields = {k: v for k, v in dataclasses.asdict(out).items()
              if isinstance(v, (str, int, float)) and not k.startswith("_")}
    return {"type": kind[type(out)], **fields}


async def stream(ws: WebSocket) -> None:
    state = ws.app.state.server_state
    await ws.accept()
    try:
        await authorize(ws)
        first = await ws.receive_json()
        if not isinstance(first, dict) or first.get("type") != "config":
            raise ApiError(Status.FAILED_PRECONDITION, "the first message must be "
                           '{"type": "config", ...} (voice, encoding); text comes after it')
        seed = first.get("seed")
        encoding = first.get("encoding") or "pcm16"
        if not isinstance(encoding, str) or encoding not in _encodings():
            raise ApiError(Status.INVALID_ARGUMENT, f"encoding {encoding!r} is not offered; use one "
                           f"of {', '.join(_encodings())}")
        require_runtime(state)
        options = session_options(state, str(first.get("voice") or ""), encoding,
                                  int(first.get("sample_rate") or 0),
                                  int(seed) if seed is not None else None)
    except ApiError as exc:
        await _send_error(ws, exc.code, exc.message)
        return
    except (WebSocketDisconnect, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        await _send_error(ws, Status.INVALID_ARGUMENT, f"bad config message: {exc}")
        return

    inbox: asyncio.Queue = asyncio.Queue()
    pump = asyncio.create_task(_pump(ws, state, options, inbox))
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


async def _receive(ws: WebSocket, inbox: asyncio.Queue, pump: asyncio.Task) -> None:
    """Reads client messages for the whole call, so a close or a cancel is seen even after
    the end of input; either one cancels the pump (and so the session)."""
    try:
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                break
            try:
                data = json.loads(msg.get("text") or "")
                kind = data.get("type") if isinstance(data, dict) else None
            except json.JSONDecodeError:
                kind, data = None, None
            if kind == "cancel":
                with contextlib.suppress(Exception):
                    await ws.send_json({"type": "cancelled"})
                    await ws.close(1000)
                break
            if kind == "text" and isinstance(data.get("text"), str):
                inbox.put_nowait(TextIn(data["text"]))
            elif kind == "flush":
                inbox.put_nowait(FlushIn())
            elif kind == "end":
                inbox.put_nowait(_END)
            else:
                inbox.put_nowait(SessionError(Status.INVALID_ARGUMENT, (
                    "messages after the config are JSON objects with type text (and a string "
                    "'text'), flush, end or cancel")))
    except (WebSocketDisconnect, RuntimeError):
        pass
    pump.cancel()  # disconnected or cancelled: the session's finally frees its slots


async def _pump(ws: WebSocket, state, options, inbox: asyncio.Queue) -> None:
    async def inputs():
        while True:
            item = await inbox.get()
            if item is _END:
                return
            if isinstance(item, SessionError):
                raise item
            yield item

    outputs = run_session(state, options, inputs(), rpc="http.ws")
    try:
        async for out in outputs:
            if isinstance(out, AudioOut):
                if out.audio:
                    await ws.send_bytes(out.audio)
                continue
            await ws.send_json(_event(out))
            if isinstance(out, Summary):
                await ws.close(1000)
    except (SessionError, ApiError) as exc:  # ApiError: refused at server.max_sessions
        await _send_error(ws, exc.code, exc.message)
    finally:
        await outputs.aclose()
