"""Reference voices: a voice cloned zero-shot from a clip and its transcript (pure).

The prompt of a reference voice (canopylabs/orpheus-3b-0.1-pretrained's zero-shot layout):

    reference_prefix: the same for every text spoken in this voice (what a KV prefix holds)
      [START_OF_HUMAN] encode(transcript) [END_OF_TEXT, END_OF_HUMAN]
      [START_OF_AI, START_OF_SPEECH] audio_token_ids [END_OF_SPEECH, END_OF_AI]
    the text's turn
      [START_OF_HUMAN] encode(text) [END_OF_TEXT, END_OF_HUMAN, START_OF_AI, START_OF_SPEECH]
                                                               generation starts here ^

BOS: `encode` puts BOS 128000 in front of every text it encodes (models/tokenizer.py), so
each turn reads [START_OF_HUMAN, BOS, ...], the transcript's and the text's alike. That is
how Canopy's zero-shot notebook for the pretrained checkpoint builds it (the transcript and
the text each through the HF tokenizer with its defaults, which add BOS), and how its
fine-tuning data tokenises every text turn; a prompt with one BOS only, or none in the
second turn, is one the checkpoint has not seen.

No voice name goes in front of the text (build_prompt's "{voice}: "): the zero-shot items
carry none; the voice is the clip. The audio ids are the clip's SNAC codes as the model
emits them (core/tokens.py frames_to_token_ids), every encoded frame in order: some data
preparation scripts drop repeated frames from their training targets, the notebook's
prompt keeps them, and so does this one.

The transcript goes in as given (stripped), not through text normalisation: it has to say
what the clip says, and the checkpoint was trained on such transcripts.

Everything a reference voice may be is checked here, once; each refusal is a
ReferenceVoiceError whose `field` names what is wrong ("name", "clip", "transcript",
"language"), as a SessionError's does. What decodes and encodes the clip is audio/clip.py
and audio/snac_encoder.py.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from .prompt import PROMPT_SUFFIX, Encode, max_tokens_for_text
from .tokens import (
    END_OF_AI_ID,
    END_OF_SPEECH_ID,
    FRAME_TOKENS,
    SAMPLE_RATE,
    SAMPLES_PER_FRAME,
    START_OF_HUMAN_ID,
    token_ids_to_frames,
)
from .voices import Voice, VoiceRegistry, is_language_tag


# -- limits ----------------------------------------------------------------------------------

# Under a second (12 frames, 82 audio tokens) the model hears too little of a voice to take it
# up; zero-shot training scripts drop reference clips shorter than that too. 10-20 s is the
# length to aim for (docs/voices.md).
MIN_CLIP_SECONDS = 1.0
# 30 s = 352 frames = 2,464 audio tokens, about 283 MB of KV for Orpheus-3B in bf16
# (ORPHEUS_3B_KV_BYTES_PER_TOKEN). Every segment in the voice carries the prefix in its slot:
# with engine.max_seq_len 4096, a 30 s reference and its transcript leave about 1,400 tokens
# (17 s of audio) for the text's turn and its speech; longer clips add little voice and take
# the slot.
MAX_CLIP_SECONDS = 30.0
# Frames of a clip the limits allow: the encoder pads the tail to a whole frame
# (audio/snac_encoder.py), so a clip of n samples is ceil(n / 2048) frames.
MIN_CLIP_FRAMES = math.ceil(MIN_CLIP_SECONDS * SAMPLE_RATE / SAMPLES_PER_FRAME)  # 12
MAX_CLIP_FRAMES = math.ceil(MAX_CLIP_SECONDS * SAMPLE_RATE / SAMPLES_PER_FRAME)  # 352
# A clip's file or bytes: 30 s of 96 kHz stereo float32 WAV is 23 MB; compressed clips are
# far smaller. Bounds what a registration reads before it knows the clip's length.
MAX_CLIP_BYTES = 32 * 1024 * 1024
# A clip sent in an admin request's bytes (LoadReferenceVoiceRequest.clip_audio): under gRPC's
# 4 MiB message limit with room for the other fields. 30 s of 24 kHz mono 16-bit WAV is
# 1.4 MB, of 44.1 kHz mono 2.6 MB, and compressed clips far less; a larger file goes by path.
MAX_CLIP_AUDIO_BYTES = 3 * 1024 * 1024
# Fast read speech runs about 20 characters a second (spaces and punctuation counted), so
# 30 s holds some 600; a transcript much longer than that cannot be the clip's.
MAX_TRANSCRIPT_CHARS = 1000

# Silence: the clip is cut into 50 ms windows and a window counts as sound when its RMS is at
# least -45 dBFS. Speech recorded at any usable level sits at -35..-15 dBFS RMS; 16-bit
# dither and a quiet room's noise floor at -60..-70 dBFS. A clip needs at least half a second
# of sound: fewer windows means silence, or a level too low to carry a voice.
SILENCE_WINDOW_SECONDS = 0.05
SILENCE_DBFS = -45.0
MIN_SOUND_SECONDS = 0.5

# A reference voice's name: what clients pick and ListVoices shows; the adapters' rule
# (core/lora_config.py), safe in a URL, a log line and a metric label.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

# KV bytes one prompt token costs: layers x KV heads x head dim x 2 (K and V) x element size.
ORPHEUS_3B_KV_BYTES_PER_TOKEN = 28 * 8 * 128 * 2 * 2  # bf16: 114,688 B


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, element_bytes: int) -> int:
    """The KV cache bytes one token takes in every layer (K and V)."""
    return layers * kv_heads * head_dim * 2 * element_bytes


class ReferenceVoiceError(ValueError):
    """A reference voice cannot be made as given; `field` names what is at fault ("name",
    "clip", "transcript", "language"); the message says what to do. Bad input: the edges
    answer INVALID_ARGUMENT (a name taken by another voice is the voice catalog's refusal,
    not this one)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


# -- checks ----------------------------------------------------------------------------------

def check_name(name: Any) -> str:
    """`name` when it may name a reference voice, else ReferenceVoiceError("name")."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ReferenceVoiceError("name", f"reference voice name {str(name)[:80]!r} must be 1 "
                                          f"to 64 letters, digits, '_', '.' or '-', starting "
                                          f"with a letter or digit")
    return name


def check_transcript(transcript: Any) -> str:
    """The transcript stripped, when it is one (1..MAX_TRANSCRIPT_CHARS characters)."""
    if not isinstance(transcript, str) or not transcript.strip():
        raise ReferenceVoiceError("transcript", "the transcript is missing: give the words "
                                                "the clip says, as spoken")
    text = transcript.strip()
    if len(text) > MAX_TRANSCRIPT_CHARS:
        raise ReferenceVoiceError("transcript", f"the transcript is {len(text)} characters; "
                                                f"at most {MAX_TRANSCRIPT_CHARS} (a clip is at "
                                                f"most {MAX_CLIP_SECONDS:g} s)")
    return text


def check_language(language: Any) -> str:
    """`language` when it is a BCP 47 tag ("en", "zh-CN")."""
    if not is_language_tag(language):
        raise ReferenceVoiceError("language", f"language must be a BCP 47 tag like \"en\" or "
                                              f"\"zh-CN\", got {str(language)[:40]!r}")
    return language


def sound_seconds(pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> float:
    """How much of `pcm` (mono, float in [-1, 1]) is sound, not silence: the 50 ms windows
    whose RMS reaches SILENCE_DBFS, in seconds (a partial last window counts as a window)."""
    x = np.asarray(pcm, dtype=np.float64).reshape(-1)
    window = max(1, round(SILENCE_WINDOW_SECONDS * sample_rate))
    if x.size == 0:
        return 0.0
    padded = np.zeros(math.ceil(x.size / window) * window)
    padded[:x.size] = x
    sizes = np.full(padded.size // window, window)
    sizes[-1] = x.size - (sizes.size - 1) * window
    rms = np.sqrt(np.sum(padded.reshape(-1, window) ** 2, axis=1) / sizes)
    threshold = 10.0 ** (SILENCE_DBFS / 20.0)
    return float(np.sum(rms >= threshold) * window / sample_rate)


def check_clip(pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> None:
    """ReferenceVoiceError("clip") unless `pcm` (mono float in [-1, 1]) is a usable clip:
    some audio, finite, MIN_CLIP_SECONDS..MAX_CLIP_SECONDS long, not silent."""
    x = np.asarray(pcm)
    if x.ndim != 1:
        raise ReferenceVoiceError("clip", f"the clip must be mono samples, got shape {x.shape}")
    if x.size == 0:
        raise ReferenceVoiceError("clip", "the clip holds no audio")
    if not np.all(np.isfinite(x)):
        raise ReferenceVoiceError("clip", "the clip has samples that are not finite numbers")
    seconds = x.size / sample_rate
    if seconds < MIN_CLIP_SECONDS:
        raise ReferenceVoiceError("clip", f"the clip is {seconds:.2f} s; at least "
                                          f"{MIN_CLIP_SECONDS:g} s (10-20 s is best)")
    if seconds > MAX_CLIP_SECONDS:
        raise ReferenceVoiceError("clip", f"the clip is {seconds:.1f} s; at most "
                                          f"{MAX_CLIP_SECONDS:g} s (10-20 s is best): cut it")
    sound = sound_seconds(x, sample_rate)
    if sound < MIN_SOUND_SECONDS:
        raise ReferenceVoiceError("clip", f"the clip is silent: {sound:.2f} s of it is above "
                                          f"{SILENCE_DBFS:g} dBFS, at least "
                                          f"{MIN_SOUND_SECONDS:g} s must be")


def check_audio_tokens(token_ids: Sequence[int]) -> tuple[int, ...]:
    """The clip's audio token ids as a tuple, when they are whole frames of audio ids at
    their positions and MIN_CLIP_FRAMES..MAX_CLIP_FRAMES frames long."""
    try:
        frames = token_ids_to_frames(list(token_ids))
    except (TypeError, ValueError) as exc:
        raise ReferenceVoiceError("clip", f"the clip's audio tokens are not SNAC frames: "
                                          f"{exc}") from None
    n = len(frames)
    if not MIN_CLIP_FRAMES <= n <= MAX_CLIP_FRAMES:
        raise ReferenceVoiceError("clip", f"the clip is {n} frames; {MIN_CLIP_FRAMES} to "
                                          f"{MAX_CLIP_FRAMES} ({MIN_CLIP_SECONDS:g} to "
                                          f"{MAX_CLIP_SECONDS:g} s)")
    return tuple(int(t) for t in token_ids)


# -- the voice and its prompt ----------------------------------------------------------------

@dataclass(frozen=True)
class ReferenceVoice:
    """A voice cloned from a clip: its `name`, the clip's `transcript`, the clip as audio
    token ids (whole SNAC frames, as the model emits them) and its BCP 47 `language`.
    Checked when made (ReferenceVoiceError), so every ReferenceVoice can be spoken."""

    name: str
    transcript: str
    audio_token_ids: tuple[int, ...]
    language: str = "en"

    def __post_init__(self) -> None:
        check_name(self.name)
        object.__setattr__(self, "transcript", check_transcript(self.transcript))
        object.__setattr__(self, "audio_token_ids", check_audio_tokens(self.audio_token_ids))
        check_language(self.language)

    @property
    def frames(self) -> int:
        return len(self.audio_token_ids) // FRAME_TOKENS

    @property
    def seconds(self) -> float:
        """The clip's length as encoded (whole frames)."""
        return self.frames * SAMPLES_PER_FRAME / SAMPLE_RATE


# Both turns end as build_prompt's does (core/prompt.py PROMPT_SUFFIX: end of text, end of
# human, start of AI, start of speech); the reference's AI turn then holds its audio.
REFERENCE_AUDIO_END = (END_OF_SPEECH_ID, END_OF_AI_ID)


def reference_prefix(encode: Encode, reference: ReferenceVoice) -> list[int]:
    """The part of a reference voice's prompt that no text changes (module docstring): the
    transcript's turn and the clip's audio turn. build_reference_prompt starts with it."""
    return [START_OF_HUMAN_ID, *encode(reference.transcript), *PROMPT_SUFFIX,
            *reference.audio_token_ids, *REFERENCE_AUDIO_END]


def text_turn(encode: Encode, text: str) -> list[int]:
    """The prompt after the prefix: `text`'s turn, ending where generation starts."""
    return [START_OF_HUMAN_ID, *encode(text), *PROMPT_SUFFIX]


def build_reference_prompt(encode: Encode, reference: ReferenceVoice, text: str) -> list[int]:
    """Orpheus prompt ids for `text` in `reference`'s voice (`encode` adds BOS to each turn):
    reference_prefix(...) + text_turn(...)."""
    return reference_prefix(encode, reference) + text_turn(encode, text)


# -- the model.reference_voices setting ------------------------------------------------------

@dataclass(frozen=True)
class ReferenceSource:
    """One entry of `model.reference_voices`: a voice to make at start-up from the clip at
    `clip` (an absolute path) and its transcript."""

    name: str
    clip: str
    transcript: str
    language: str = "en"


_SOURCE_FIELDS = ("name", "clip", "transcript", "language")


def reference_sources(value: Any, where: str = "model.reference_voices"
                      ) -> tuple[ReferenceSource, ...]:
    """The entries of `model.reference_voices`, in order. Accepted forms:

        [{name: ..., clip: /abs/path.wav, transcript: ..., language: en}, ...]   YAML
        '[{"name": ..., "clip": ..., "transcript": ...}]'        environment or --set (JSON)

    ValueError naming the entry and field at fault ("model.reference_voices[1].transcript:
    ..."). The clip files are not opened here (audio/clip.py reads them)."""
    if value is None or value == "" or value == [] or value == ():
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(f"{where}: expected a JSON list of {{\"name\", \"clip\", "
                             f"\"transcript\", \"language\"}} objects") from None
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{where}: expected a list of {{name, clip, transcript, language}}, "
                         f"got {str(value)[:80]!r}")
    out: list[ReferenceSource] = []
    seen: set[str] = set()
    for i, entry in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(entry, Mapping):
            raise ValueError(f"{at}: expected {{name, clip, transcript, language}}, got "
                             f"{str(entry)[:80]!r}")
        unknown = sorted(str(k) for k in set(entry) - set(_SOURCE_FIELDS))
        if unknown:
            raise ValueError(f"{at}: unknown field(s) {', '.join(unknown)} (known: "
                             f"{', '.join(_SOURCE_FIELDS)})")
        try:
            name = check_name(entry.get("name"))
            transcript = check_transcript(entry.get("transcript"))
            language = check_language(entry.get("language", "en"))
        except ReferenceVoiceError as exc:
            raise ValueError(f"{at}.{exc.field}: {exc.message}") from None
        clip = entry.get("clip")
        if not isinstance(clip, str) or not clip.strip():
            raise ValueError(f"{at}.clip: expected the clip's file (an absolute path), got "
                             f"{clip!r}")
        expanded = os.path.expanduser(clip.strip())
        if not os.path.isabs(expanded):
            raise ValueError(f"{at}.clip: {clip!r} must be an absolute path (a relative one "
                             f"would depend on the server's working directory)")
        if name.casefold() in seen:
            raise ValueError(f"{at}.name: {name!r} is named twice")
        seen.add(name.casefold())
        out.append(ReferenceSource(name, os.path.normpath(expanded), transcript, language))
    return tuple(out)


# -- serving: the voice list and the slot --------------------------------------------------

# The text every reference voice must leave room for in a slot, with its whole token budget
# (core/prompt.py max_tokens_for_text: 3.6 s of audio, 308 tokens): a voice whose prefix
# leaves less could not say even a short sentence to its end.
ROOM_TEXT = "Hello there."


def check_room(encode: Encode, reference: ReferenceVoice, max_seq_len: int) -> int:
    """The tokens a slot of `max_seq_len` has left after `reference`'s prefix; each segment's
    text turn and speech share them (core/prompt.py fit_to_slot cuts the budget to fit).
    ReferenceVoiceError("clip") when ROOM_TEXT's turn and full budget do not fit:

        |<------------------------------ max_seq_len ------------------------------>|
        | reference_prefix | text_turn(ROOM_TEXT) | max_tokens_for_text(ROOM_TEXT) |1|
    """
    prefix = len(reference_prefix(encode, reference))
    need = len(text_turn(encode, ROOM_TEXT)) + max_tokens_for_text(ROOM_TEXT) + 1
    room = max_seq_len - prefix
    if room < need:
        raise ReferenceVoiceError("clip", (
            f"reference voice {reference.name!r}: its clip ({reference.seconds:.1f} s) and "
            f"transcript take {prefix} prompt tokens, leaving {max(room, 0)} of the slot's "
            f"{max_seq_len} (engine.max_seq_len); a segment needs at least {need}: cut the "
            f"clip or raise engine.max_seq_len"))
    return room


def with_reference_voices(base: VoiceRegistry, references: Sequence[ReferenceVoice],
                          adapters: Sequence[tuple[str, VoiceRegistry]] = (),
                          where: str = "model.reference_voices") -> VoiceRegistry:
    """`base`'s voices, then each reference voice (Voice.reference set, no emotion tags: the
    zero-shot prompt carries none), with `base`'s default. ValueError naming the entry
    ("model.reference_voices[1].name: ...") when a reference voice takes the name of a base
    voice, of a voice of an adapter in `adapters` ((name, voices) pairs) or of an earlier
    reference voice, ignoring case: a session picks a voice by name alone."""
    owner = {v.name.casefold(): "a voice of the base model" for v in base.voices}
    for adapter, registry in adapters:
        owner.update((v.name.casefold(), f"a voice of adapter {adapter!r}")
                     for v in registry.voices)
    voices = list(base.voices)
    for i, ref in enumerate(references):
        key = ref.name.casefold()
        if key in owner:
            raise ValueError(f"{where}[{i}].name: {ref.name!r} is already {owner[key]}; "
                             f"name the reference voice differently")
        owner[key] = "a reference voice"
        voices.append(Voice(ref.name, ref.language, (), None, reference=True))
    return VoiceRegistry(tuple(voices), base.default, base.source)
