"""Offline synthesis through the same EngineLoop and flusher the server uses (no gRPC)."""

from __future__ import annotations

import queue
import sys
import uuid
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from orpheus_svc.audio.pcm import float_to_pcm16
from orpheus_svc.core.events import AudioEvent, EngineEvent, Finished, Rejected
from orpheus_svc.core.generation import SamplingParams
from orpheus_svc.core.normalize import has_normalizer, normalize_text
from orpheus_svc.core.tokens import SAMPLE_RATE
from orpheus_svc.runtime import Runtime
from orpheus_svc.server.segmenter import SentenceBuffer


class SynthesisError(RuntimeError):
    pass


@dataclass
class SynthResult:
    pcm: np.ndarray  # float32, 24 kHz
    segments: list[str]
    num_tokens: int

    @property
    def seconds(self) -> float:
        return len(self.pcm) / SAMPLE_RATE


def synthesize(runtime: Runtime, text: str, voice: str = "", seed: int | None = None,
               progress: bool = False, normalize: bool | None = None) -> SynthResult:
    """Speak `text` (segmented like streamed text); all segments generate concurrently.
    `normalize` None follows text.normalize (English voices only, as in the server)."""
    entry = runtime.voices.resolve(voice)  # any case; empty = the model's default voice
    if entry is None:
        raise SynthesisError(runtime.voices.unknown_message(voice))
    voice = entry.name
    if normalize is None:
        normalize = runtime.config.text.normalize
    normalize = normalize and has_normalizer(entry.language)
    buf = SentenceBuffer(max_chars=runtime.config.text.max_segment_chars, language=entry.language)
    segments = buf.push(text) + buf.close()
    if not segments:
        raise SynthesisError("text is empty")
    events: queue.SimpleQueue[EngineEvent] = queue.SimpleQueue()
    session = f"synth-{uuid.uuid4().hex[:8]}"
    s = runtime.config.sampling
    ids = []
    for i, seg in enumerate(segments):
        sampling = SamplingParams(s.temperature, s.top_p, s.repetition_penalty,
                                  None if seed is None else seed + i)
        gid = runtime.engine.new_id()
        runtime.router.register(gid, events.put)
        spoken = normalize_text(seg, entry.language) if normalize else seg
        runtime.engine.submit(runtime.request(session, i, voice, spoken, sampling), gid)
        ids.append(gid)
    audio: dict[int, list[np.ndarray]] = {g: [] for g in ids}
    tokens, pending = 0, set(ids)
    bar = _bar(progress, len(segments))
    try:
        while pending:
            ev = events.get()
            if isinstance(ev, Rejected):
                raise SynthesisError(ev.reason)
            if isinstance(ev, Finished):
                if ev.reason == "error":
                    raise SynthesisError(ev.error or "generation failed")
                tokens += ev.num_generated
            elif isinstance(ev, AudioEvent):
                audio[ev.gen_id].append(ev.pcm)
                if bar is not None:
                    bar.set_postfix_str(f"{sum(len(p) for a in audio.values() for p in a) / SAMPLE_RATE:.1f} s audio")
                if ev.final:
                    pending.discard(ev.gen_id)
                    if bar is not None:
                        bar.update(1)
    finally:
        for gid in ids:
            runtime.router.unregister(gid)
            if gid in pending:
                runtime.engine.cancel(gid)
        if bar is not None:
            bar.close()
    pcm = np.concatenate([p for g in ids for p in audio[g]] or [np.zeros(0, np.float32)])
    return SynthResult(pcm=pcm, segments=segments, num_tokens=tokens)


def write_wav(path: Path, pcm: np.ndarray, rate: int = SAMPLE_RATE) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(float_to_pcm16(pcm))


def _bar(enabled: bool, total: int):
    if not enabled:
        return None
    from tqdm import tqdm
    return tqdm(total=total, unit="segment", file=sys.stderr, desc="synthesizing")
