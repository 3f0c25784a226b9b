"""What one call runs with: `SessionSettings`, built and validated once for every edge.

    gRPC SynthesisConfig / SynthesizeRequest --+
    HTTP speech JSON, WebSocket config --------+--> session_settings --> SessionSettings
    offline synth (synth.py) ------------------+    (validated, every default filled)
                                                        |
                      StreamSession --> Runtime.request --> EngineLoop (trust it as it is)

Each edge turns its wire format into plain values (a voice name, an encoding name, a rate,
the sampling fields it was given: SamplingChoice) and calls `session_settings`; what comes
back has every default filled, here and nowhere else (config.sampling for the sampling a
request left unset), so a request means the same on every edge and a refusal carries the
same message. Each refusal is a SessionError(INVALID_ARGUMENT) whose `field` names the
setting, so no edge reads a message to learn which parameter failed. Nothing downstream
fills a default or re-checks a range.

Numbers are range-checked here, on the values as the client sent them, before anything
converts them: a JSON client can send a seed of -1 or 2^64, which the gRPC edge's uint64
cannot even carry, and both must end INVALID_ARGUMENT rather than in an overflow further in.
"""

from __future__ import annotations

from dataclasses import dataclass

from orpheus_svc.audio.pcm import allowed_rates, default_rate
from orpheus_svc.config import Config
from orpheus_svc.core.errors import SessionError
from orpheus_svc.core.normalize import has_normalizer
from orpheus_svc.core.request import SEED_MODULUS, SamplingError, SamplingParams
from orpheus_svc.core.status import Status
from orpheus_svc.core.voices import VoiceRegistry, english_registry

from .state import ServerState


@dataclass(frozen=True)
class SessionSettings:
    """A call's validated settings (`session_settings` builds them).

    `encoding` is a name of audio/pcm.py ENCODINGS and `sample_rate` one that encoding
    offers; `sampling` is complete (the request's own values, explicit zeros included, and
    config.sampling for what it left unset) and within SamplingParams.validate's ranges."""

    voice: str  # the model's own spelling of it
    encoding: str
    sample_rate: int
    sampling: SamplingParams
    # speak numbers, dates, currency... as words (core/normalize.py); never set for a voice
    # whose language has no normaliser
    normalize_text: bool = False
    language: str = "en"  # of the session's voice (BCP 47)
    # all the audio in one piece after the last segment, with its length in the header
    # (audio/pcm.py SessionEncoder): the HTTP edge's non-streamed responses
    whole: bool = False
    # send each segment's word timings (server/word_times.py); off: no extra work or output
    word_timestamps: bool = False

    def segment_sampling(self, index: int) -> SamplingParams:
        """The sampling of the session's segment `index` (SamplingParams.for_segment: a
        seeded session's segment i runs with seed + i)."""
        return self.sampling.for_segment(index)


SEED_MAX = SEED_MODULUS - 1  # SamplingOptions.seed is a uint64
RATE_MAX = (1 << 31) - 1  # AudioFormat.sample_rate_hz is an int32


@dataclass(frozen=True)
class SamplingChoice:
    """The sampling fields a request set, as it sent them; None = unset (config.sampling)."""

    temperature: float | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None


def check_range(name: str, value: int, low: int, high: int, field: str | None = None) -> None:
    """SessionError(INVALID_ARGUMENT) unless low <= value <= high (value an int, not a bool).
    `name` is how the message spells the setting; `field` (default: `name`) the error's field."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        # repr() of an int of thousands of digits raises (Python's int-to-str limit)
        shown = f"an integer of {value.bit_length()} bits" \
            if isinstance(value, int) and value.bit_length() > 100 else repr(value)[:40]
        raise SessionError(Status.INVALID_ARGUMENT,
                           f"{name} must be an integer in {low}..{high}, got {shown}",
                           field=field or name)


def session_settings(state: ServerState, voice: str, encoding: str, sample_rate: int,
                     sampling: SamplingChoice, *, allow_wav: bool,
                     normalize: bool | None = None, whole: bool = False,
                     word_timestamps: bool = False) -> SessionSettings:
    """A server call's settings, validated against the served model's voices (the English
    ones while none is loaded); see `build_settings`. A voice of a LoRA adapter being
    unloaded is refused with FAILED_PRECONDITION naming the adapter (docs/lora.md)."""
    runtime = state.runtime
    voices = runtime.voices if runtime is not None else english_registry()
    if runtime is not None and voices.resolve(voice) is None:
        refusal = runtime.voice_refusal(voice)  # its adapter is being unloaded
        if refusal is not None:
            raise SessionError(Status.FAILED_PRECONDITION, refusal, field="voice")
    return build_settings(state.config, voices, voice, encoding, sample_rate, sampling,
                          allow_wav=allow_wav, normalize=normalize, whole=whole,
                          word_timestamps=word_timestamps)


def build_settings(config: Config, voices: VoiceRegistry, voice: str, encoding: str,
                   sample_rate: int, sampling: SamplingChoice, *, allow_wav: bool,
                   normalize: bool | None = None, whole: bool = False,
                   word_timestamps: bool = False) -> SessionSettings:
    """Validated settings, or SessionError(INVALID_ARGUMENT, field=...) saying what to change.

    `voice` any case, "" = the model's default; `encoding` a name of audio/pcm.py ENCODINGS;
    `sample_rate` 0 = the encoding's default; `allow_wav` is false on streaming calls of the
    gRPC edge; `normalize` None = text.normalize; `whole` and `word_timestamps`: as
    SessionSettings. Checked in
    this order: voice, encoding, rate, seed, sampling."""
    entry = voices.resolve(voice)
    if entry is None:
        raise SessionError(Status.INVALID_ARGUMENT, voices.unknown_message(voice), field="voice")
    if encoding == "wav" and not allow_wav:
        raise SessionError(Status.INVALID_ARGUMENT,
                           "WAV is only offered by Synthesize; stream PCM16 or MULAW here",
                           field="encoding")
    check_range("sample_rate_hz", sample_rate, 0, RATE_MAX, field="sample_rate")
    rate = sample_rate or default_rate(encoding)
    allowed = allowed_rates(encoding)
    if rate not in allowed:
        raise SessionError(Status.INVALID_ARGUMENT, (
            f"sample_rate_hz {rate} is not supported for {encoding.upper()}; "
            f"use one of {', '.join(map(str, allowed))}"), field="sample_rate")
    if sampling.seed is not None:
        check_range("seed", sampling.seed, 0, SEED_MAX)
    params = _fill(sampling, config)
    try:
        params.validate()
    except SamplingError as exc:
        raise SessionError(Status.INVALID_ARGUMENT, f"sampling: {exc}", field=exc.field) from exc
    # a language without a normaliser is never normalised, whatever was asked
    wanted = config.text.normalize if normalize is None else normalize
    return SessionSettings(entry.name, encoding, rate, params,
                           normalize_text=wanted and has_normalizer(entry.language),
                           language=entry.language, whole=whole,
                           word_timestamps=word_timestamps)


def _fill(sampling: SamplingChoice, config: Config) -> SamplingParams:
    """The request's sampling with config.sampling for what it left unset: `is None`, never
    falsiness, since 0 is a value a client means (temperature 0 = greedy)."""
    d = config.sampling

    def pick(value, default):
        return default if value is None else value

    return SamplingParams(temperature=pick(sampling.temperature, d.temperature),
                          top_p=pick(sampling.top_p, d.top_p),
                          repetition_penalty=pick(sampling.repetition_penalty,
                                                  d.repetition_penalty),
                          seed=sampling.seed)
