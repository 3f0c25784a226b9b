"""A request's session settings, validated once for every edge (gRPC, HTTP, WebSocket).

Each edge turns its wire format into plain values (a voice name, an encoding name, a rate,
the sampling fields it was given) and calls `session_options`, so a request means the same
on both edges and a refusal carries the same message. Numbers are range-checked here, on
the values as the client sent them, before anything converts them: a JSON client can send
a seed of -1 or 2^64, which the gRPC edge's uint64 cannot even carry, and both must end
INVALID_ARGUMENT rather than in an overflow further in.
"""

from __future__ import annotations

from dataclasses import dataclass

from orpheus_svc.audio.pcm import allowed_rates, default_rate
from orpheus_svc.core.generation import SamplingParams
from orpheus_svc.core.normalize import has_normalizer
from orpheus_svc.core.status import Status
from orpheus_svc.core.voices import english_registry

from .session import SessionError, SessionOptions
from .state import ServerState

SEED_MAX = (1 << 64) - 1  # SamplingOptions.seed is a uint64
RATE_MAX = (1 << 31) - 1  # AudioFormat.sample_rate_hz is an int32


@dataclass(frozen=True)
class SamplingChoice:
    """The sampling fields a request set; None = the server's default (config.sampling)."""

    temperature: float | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None


def check_range(name: str, value: int, low: int, high: int) -> None:
    """SessionError(INVALID_ARGUMENT) unless low <= value <= high (value an int, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        # repr() of an int of thousands of digits raises (Python's int-to-str limit)
        shown = f"an integer of {value.bit_length()} bits" \
            if isinstance(value, int) and value.bit_length() > 100 else repr(value)[:40]
        raise SessionError(Status.INVALID_ARGUMENT,
                           f"{name} must be an integer in {low}..{high}, got {shown}")


def session_options(state: ServerState, voice: str, encoding: str, sample_rate: int,
                    sampling: SamplingChoice, *, allow_wav: bool,
                    normalize: bool | None = None) -> SessionOptions:
    """Validated options, or SessionError(INVALID_ARGUMENT) saying what to change.

    `encoding` is a name of orpheus_svc.audio.pcm.ENCODINGS; `sample_rate` 0 = the
    encoding's default; `allow_wav` is false on streaming calls of the gRPC edge."""
    voices = state.runtime.voices if state.runtime is not None else english_registry()
    entry = voices.resolve(voice)  # any case; empty = the model's default voice
    if entry is None:
        raise SessionError(Status.INVALID_ARGUMENT, voices.unknown_message(voice))
    if encoding == "wav" and not allow_wav:
        raise SessionError(Status.INVALID_ARGUMENT,
                           "WAV is only offered by Synthesize; stream PCM16 or MULAW here")
    check_range("sample_rate_hz", sample_rate, 0, RATE_MAX)
    rate = sample_rate or default_rate(encoding)
    allowed = allowed_rates(encoding)
    if rate not in allowed:
        raise SessionError(Status.INVALID_ARGUMENT, (
            f"sample_rate_hz {rate} is not supported for {encoding.upper()}; "
            f"use one of {', '.join(map(str, allowed))}"))
    if sampling.seed is not None:
        check_range("seed", sampling.seed, 0, SEED_MAX)
    d = state.config.sampling
    params = SamplingParams(
        temperature=d.temperature if sampling.temperature is None else sampling.temperature,
        top_p=d.top_p if sampling.top_p is None else sampling.top_p,
        repetition_penalty=(d.repetition_penalty if sampling.repetition_penalty is None
                            else sampling.repetition_penalty),
        seed=sampling.seed)
    try:
        params.validate()
    except ValueError as exc:
        raise SessionError(Status.INVALID_ARGUMENT, f"sampling: {exc}") from exc
    # normalize_text unset: the server's default; never for a language without a normaliser
    wanted = state.config.text.normalize if normalize is None else normalize
    return SessionOptions(entry.name, encoding, rate, params,  # the model's own spelling
                          normalize_text=wanted and has_normalizer(entry.language),
                          language=entry.language)
