"""Offline synthesis through the server's own StreamSession, EngineLoop and flusher (no gRPC)."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import uuid
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from orpheus_svc.audio.pcm import float_to_pcm16
from orpheus_svc.core.errors import SessionError
from orpheus_svc.core.tokens import SAMPLE_RATE
from orpheus_svc.runtime import Runtime
from orpheus_svc.server.settings import SamplingChoice, build_settings
from orpheus_svc.server.session import AudioOut, Input, SegmentEnded, StreamSession, Summary, TextIn


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
    """Speak `text` through a StreamSession, the server's own session code, fed a list
    instead of a client stream: segmented like streamed text, all segments generating at
    once (none waits for a listener). `normalize` None follows text.normalize (English
    voices only, as in the server). The PCM is the session's PCM16 output as float32,
    so the WAV written from it holds exactly the samples a client would get."""
    try:  # the servers' own validation and defaults (server/settings.py)
        settings = build_settings(runtime.config, runtime.voices, voice, "pcm16", SAMPLE_RATE,
                                  SamplingChoice(seed=seed), allow_wav=False,
                                  normalize=normalize)
    except SessionError as exc:
        raise SynthesisError(exc.message) from None
    # no per-call text limit offline, and every segment in flight (a segment is >= 1 char)
    text_config = dataclasses.replace(
        runtime.config.text, max_text_chars=max(runtime.config.text.max_text_chars, len(text)),
        max_segments_in_flight=max(1, len(text)))
    session = StreamSession(runtime, settings, text_config, f"synth-{uuid.uuid4().hex[:8]}")
    try:
        return asyncio.run(_collect(session, [TextIn(text)], _bar(progress)))
    except SessionError as exc:
        raise SynthesisError(exc.message) from None


async def _collect(session: StreamSession, inputs: list[Input], bar) -> SynthResult:
    async def source():
        for item in inputs:
            yield item

    pcm: list[np.ndarray] = []
    segments: list[str] = []
    num_samples, num_tokens = 0, 0
    try:
        async for out in session.run(source()):
            if isinstance(out, AudioOut):
                pcm.append(np.frombuffer(out.audio, dtype="<i2").astype(np.float32) / 32767.0)
                num_samples += out.num_samples
                if bar is not None:
                    bar.set_postfix_str(f"{num_samples / SAMPLE_RATE:.1f} s audio")
            elif isinstance(out, SegmentEnded):
                segments.append(out.text)
                if bar is not None:
                    bar.update(1)
            elif isinstance(out, Summary):
                num_tokens = out.num_tokens
    finally:
        if bar is not None:
            bar.close()
    return SynthResult(pcm=np.concatenate(pcm or [np.zeros(0, np.float32)]).astype(np.float32),
                       segments=segments, num_tokens=num_tokens)


def write_wav(path: Path, pcm: np.ndarray, rate: int = SAMPLE_RATE) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(float_to_pcm16(pcm))


def _bar(enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm
    return tqdm(unit="segment", file=sys.stderr, desc="synthesizing")
