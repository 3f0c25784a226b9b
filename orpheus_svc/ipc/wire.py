"""The split topology's wire format: pure msgpack encode/decode, no sockets.

Front-end -> engine (one message per command):

    [SUBMIT, gen_id, request]   request: GenerationRequest's fields by name, its sampling
                                a map of SamplingParams' (temperature, top_p, ...)
    [CANCEL, gen_id]

Engine -> one front-end (one message per event batch, so its asyncio loop still wakes
once per engine step or decode batch):

    [EVENTS, [event, ...]]   event: [REJECTED, gen_id, reason, status name]
                                    [AUDIO, gen_id, float32 PCM bytes, sample_offset, final,
                                            finish or None]
                                    finish: [reason, prompt tokens, generated, frames, error,
                                             queued s, first token s]
    [STATS, {...}]           the engine's latest stats snapshot and what a front-end needs
                             to serve (the heartbeat too; see EngineSnapshot)
    [LOST, [gen_id, ...], reason]   generations the engine gave up delivering to this
                             front-end (it fell behind; ipc/engine.py): each ends UNAVAILABLE

Generation ids are unique across front-ends and across a front-end's restarts; ids below
REMOTE_BASE are the engine process's own (warm-up):

    bit  63 .. 40     39 .. 32       31 .. 0
         index + 1    incarnation    counter (wraps; no generation lives 2^32 opens long)
                      (mod 256)

A restarted front-end (app/supervision.py) keeps its index and opens ids of its new
incarnation, so nothing the engine still holds of the dead process can be taken for its.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

import msgpack
import numpy as np

from orpheus_svc.core.events import AudioEvent, EngineEvent, Finish, Rejected
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.output import SchedulerStats
from orpheus_svc.core.status import Status
from orpheus_svc.core.reference import ReferenceVoice
from orpheus_svc.core.voices import Voice, VoiceRegistry

REMOTE_BASE = 1 << 40
INCARNATION_SHIFT = 32
INCARNATIONS = 256   # incarnation numbers wrap: the engine compares them for equality only
ID_SPAN = 1 << INCARNATION_SHIFT  # ids one incarnation opens before its counter wraps

SUBMIT, CANCEL = 0, 1
EVENTS, STATS, LOST = 0, 1, 2
_REJECTED, _AUDIO = 1, 2


def frontend_of(gen_id: int) -> int | None:
    """The front-end index that opened `gen_id`, or None for the engine's own ids."""
    return gen_id // REMOTE_BASE - 1 if gen_id >= REMOTE_BASE else None


def first_id(index: int, incarnation: int = 0) -> int:
    """The first id front-end `index` opens in its `incarnation` (0: its first process)."""
    return (index + 1) * REMOTE_BASE + (incarnation % INCARNATIONS << INCARNATION_SHIFT)


def incarnation_of(gen_id: int) -> int:
    """The incarnation (mod INCARNATIONS) of the front-end process that opened `gen_id`."""
    return (gen_id >> INCARNATION_SHIFT) % INCARNATIONS


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


# -- commands --------------------------------------------------------------------------------

def encode_submit(gen_id: int, req: GenerationRequest) -> bytes:
    return _pack([SUBMIT, gen_id, dataclasses.asdict(req)])


def encode_cancel(gen_id: int) -> bytes:
    return _pack([CANCEL, gen_id])


def decode_command(data: bytes) -> tuple[int, int, GenerationRequest | None]:
    """(kind, gen_id, request or None)."""
    msg = _unpack(data)
    if msg[0] == CANCEL:
        return CANCEL, msg[1], None
    _, gen_id, fields = msg
    req = GenerationRequest(**{**fields, "prompt_ids": tuple(fields["prompt_ids"]),
                               "sampling": SamplingParams(**fields["sampling"])})
    return SUBMIT, gen_id, req


# -- events ----------------------------------------------------------------------------------

def _event(ev: EngineEvent) -> list:
    if isinstance(ev, AudioEvent):
        f = ev.finish
        pcm = np.ascontiguousarray(ev.pcm, dtype=np.float32).tobytes()
        return [_AUDIO, ev.gen_id, pcm, ev.sample_offset, ev.final,
                None if f is None else [f.reason, f.num_prompt_tokens, f.num_generated,
                                        f.num_frames, f.error, f.queued_s, f.first_token_s]]
    return [_REJECTED, ev.gen_id, ev.reason, ev.code.name]


def encode_events(events: Sequence[EngineEvent]) -> bytes:
    return _pack([EVENTS, [_event(ev) for ev in events]])


def _decode_event(e: list) -> EngineEvent:
    if e[0] == _AUDIO:
        f = e[5]
        return AudioEvent(e[1], np.frombuffer(e[2], dtype=np.float32), e[3], e[4],
                          None if f is None else Finish(*f))
    return Rejected(e[1], e[2], Status[e[3]])


def encode_lost(gen_ids: Sequence[int], reason: str) -> bytes:
    return _pack([LOST, list(gen_ids), reason])


# -- the engine's snapshot -------------------------------------------------------------------

@dataclass(frozen=True)
class EngineInfo:
    """What a front-end needs of the engine process to build prompts and answer calls."""

    model_name: str
    is_demo: bool
    device: str
    backend: str
    tokenizer: str  # the prompt tokenizer: a tokenizer.json's path or a built-in one's name
                    # (engine/registry.py load_tokenizer)
    voices: VoiceRegistry
    max_batch_size: int
    # LoRA adapter name -> its pool slot (runtime.FrontRuntime.adapters): a front-end puts
    # the slot of a voice's adapter in the requests it builds
    adapters: dict = field(default_factory=dict)
    # the reference voices (runtime.FrontRuntime.references' values): a front-end puts a
    # reference voice's clip and transcript in front of the prompts it builds
    references: tuple = ()


@dataclass(frozen=True)
class EngineSnapshot:
    """The engine process's state as last published (about 4 times a second)."""

    warm: bool  # built and warmed up: front-ends may serve
    stats: SchedulerStats
    failed_rows: int = 0    # generations failed by a backend error
    failed_audio: int = 0   # generations failed by a codec error
    info: EngineInfo | None = None  # once warm
    pid: int = 0
    extra: dict = field(default_factory=dict)
    # how long the engine's current step has run when this was sent (0 between steps;
    # engine/watchdog.py): a front-end tells a slow engine from a stalled one by it
    stalled_s: float = 0.0


def _voices(reg: VoiceRegistry) -> list:
    return [[[v.name, v.language, list(v.emotion_tags), v.adapter, v.reference]
             for v in reg.voices], reg.default, reg.source]


def _references(refs) -> list:
    return [[r.name, r.transcript, list(r.audio_token_ids), r.language] for r in refs]


def encode_stats(snap: EngineSnapshot) -> bytes:
    info = snap.info
    return _pack([STATS, {
        "warm": snap.warm, "stats": dataclasses.asdict(snap.stats),
        "failed_rows": snap.failed_rows, "failed_audio": snap.failed_audio, "pid": snap.pid,
        "extra": snap.extra, "stalled_s": snap.stalled_s,
        "info": None if info is None else {
            "model_name": info.model_name, "is_demo": info.is_demo, "device": info.device,
            "backend": info.backend, "tokenizer": info.tokenizer,
            "voices": _voices(info.voices), "max_batch_size": info.max_batch_size,
            "adapters": info.adapters, "references": _references(info.references)}}])


def _decode_stats(d: dict) -> EngineSnapshot:
    info = d["info"]
    if info is not None:
        voices, default, source = info["voices"]
        info = EngineInfo(
            model_name=info["model_name"], is_demo=info["is_demo"], device=info["device"],
            backend=info["backend"], tokenizer=info["tokenizer"],
            voices=VoiceRegistry(tuple(Voice(n, lang, tuple(tags), adapter, reference)
                                       for n, lang, tags, adapter, reference in voices),
                                 default, source),
            max_batch_size=info["max_batch_size"], adapters=dict(info["adapters"]),
            references=tuple(ReferenceVoice(n, text, tuple(ids), lang)
                             for n, text, ids, lang in info["references"]))
    return EngineSnapshot(warm=d["warm"], stats=SchedulerStats(**d["stats"]),
                          failed_rows=d["failed_rows"], failed_audio=d["failed_audio"],
                          info=info, pid=d["pid"], extra=d["extra"],
                          stalled_s=d.get("stalled_s", 0.0))


def decode_message(data: bytes) -> tuple[int, Any]:
    """An engine -> front-end message: (EVENTS, [event]) | (STATS, EngineSnapshot) |
    (LOST, ([gen_id], reason))."""
    msg = _unpack(data)
    kind = msg[0]
    if kind == EVENTS:
        return EVENTS, [_decode_event(e) for e in msg[1]]
    if kind == STATS:
        return STATS, _decode_stats(msg[1])
    return LOST, (msg[1], msg[2])
