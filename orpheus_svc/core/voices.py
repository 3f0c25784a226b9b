"""The voice registry: which speaker names a model knows, their language, the default voice
and the emotion tags each voice was trained on. Pure Python (no torch, no grpc).

The voice list belongs to the model (docs/voices.md). A checkpoint or engine directory
carries it as `voices.json`:

    {
      "default": "pierre",                       optional; else the first voice
      "language": "fr",                          optional; language of voices that name none
      "emotion_tags": ["<laugh>", "<sigh>"],     optional; tags of voices that name none
      "voices": [
        "pierre",                                a bare name inherits language and tags
        {"name": "amelie", "language": "fr", "emotion_tags": ["<chuckle>"]}
      ]
    }

Names are matched case-insensitively ("Tara" finds "tara"); the prompt always gets the
name as the registry spells it, because that is the spelling the model was trained on.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .tokens import EMOTION_TAGS, VOICES

VOICES_FILE = "voices.json"
_LANGUAGE_RE = re.compile(r"^[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})*$")  # BCP 47, loosely
_TAG_RE = re.compile(r"^<[^<>\s]+>$")


class VoiceRegistryError(ValueError):
    """A voices.json or model.voices value is malformed; the message names the field."""


@dataclass(frozen=True)
class Voice:
    """One speaker: `name` as the model was trained on it, BCP 47 `language`, its tags, the
    LoRA adapter that speaks it (None: the base model; docs/lora.md), and whether it is a
    reference voice (cloned zero-shot from a clip by the base model: core/reference.py)."""

    name: str
    language: str
    emotion_tags: tuple[str, ...] = ()
    adapter: str | None = None
    reference: bool = False


@dataclass(frozen=True)
class VoiceRegistry:
    """The voices one model knows. `source` says where the list came from (for logs)."""

    voices: tuple[Voice, ...]
    default: str
    source: str = ""

    def __post_init__(self) -> None:
        if not self.voices:
            raise VoiceRegistryError(f"{self.source or 'voice list'}: no voices")
        keys = [v.name.casefold() for v in self.voices]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        if dupes:
            raise VoiceRegistryError(f"{self.source or 'voice list'}: voice names must differ "
                                     f"ignoring case; repeated: {', '.join(dupes)}")
        if self.default.casefold() not in keys:
            raise VoiceRegistryError(f"{self.source or 'voice list'}: default voice "
                                     f"{self.default!r} is not one of {', '.join(self.names)}")

    @property
    def names(self) -> list[str]:
        return [v.name for v in self.voices]

    @property
    def default_voice(self) -> Voice:
        found = self.resolve(self.default)
        assert found is not None  # checked in __post_init__
        return found

    @property
    def emotion_tags(self) -> list[str]:
        """Every voice's tags, each once, in first-seen order."""
        out: list[str] = []
        for v in self.voices:
            out.extend(t for t in v.emotion_tags if t not in out)
        return out

    def resolve(self, name: str | None) -> Voice | None:
        """The voice called `name` (any case, surrounding spaces ignored); empty or None
        means the default voice; None if the model has no such voice."""
        key = (name or "").strip().casefold() or self.default.casefold()
        return next((v for v in self.voices if v.name.casefold() == key), None)

    def unknown_message(self, name: str) -> str:
        """What to tell a client that asked for a voice this model does not have."""
        # cut: the name is echoed back to a client that may have sent megabytes of it
        return f"unknown voice {name[:60]!r}; known voices: {', '.join(self.names)}"


# The default voice of a model that names none: the first of Canopy's English voices. Use
# this name, never the literal, where a default voice is needed.
DEFAULT_VOICE = VOICES[0]


def english_registry(source: str = "the eight voices of Canopy's English checkpoints") -> VoiceRegistry:
    """tara, leah, jess, leo, dan, mia, zac, zoe (English, tara first: Canopy's order)."""
    return VoiceRegistry(tuple(Voice(n, "en", EMOTION_TAGS) for n in VOICES), DEFAULT_VOICE,
                         source)


def _tags(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)) or not all(isinstance(t, str) for t in raw):
        raise VoiceRegistryError(f"{where}: emotion_tags must be a list of strings like \"<laugh>\"")
    bad = [t for t in raw if not _TAG_RE.match(t)]
    if bad:
        raise VoiceRegistryError(f"{where}: emotion tags must look like <laugh>; got {bad}")
    return tuple(raw)


def is_language_tag(raw: Any) -> bool:
    """Whether `raw` reads as a BCP 47 language tag ("en", "zh-CN"; checked loosely)."""
    return isinstance(raw, str) and bool(_LANGUAGE_RE.match(raw))


def _language(raw: Any, where: str) -> str:
    if not is_language_tag(raw):
        raise VoiceRegistryError(f"{where}: language must be a BCP 47 tag like \"en\" or "
                                 f"\"zh-CN\", got {raw!r}")
    return raw


def _name(raw: Any, where: str) -> str:
    # The name goes into the prompt as "{name}: {text}", so a colon or a line break would
    # change what the model reads; spaces inside a name are allowed (fine-tunes use them).
    if not isinstance(raw, str) or not raw.strip() or raw != raw.strip() \
            or any(c in raw for c in ":\n\r<>"):
        raise VoiceRegistryError(f"{where}: a voice name must be non-empty text without "
                                 f"surrounding spaces, ':', '<', '>' or line breaks, got {raw!r}")
    return raw


def registry_from_dict(raw: Any, source: str) -> VoiceRegistry:
    """Parse the voices.json structure (module docstring); VoiceRegistryError names the field."""
    if not isinstance(raw, Mapping):
        raise VoiceRegistryError(f"{source}: expected a JSON object with a \"voices\" list")
    unknown = set(raw) - {"default", "language", "emotion_tags", "voices"}
    if unknown:
        raise VoiceRegistryError(f"{source}: unknown field(s) {', '.join(sorted(unknown))} "
                                 f"(known: default, language, emotion_tags, voices)")
    language = _language(raw.get("language", "en"), f"{source}: language")
    tags = _tags(raw.get("emotion_tags"), f"{source}: emotion_tags")
    entries = raw.get("voices")
    if not isinstance(entries, list) or not entries:
        raise VoiceRegistryError(f"{source}: \"voices\" must be a non-empty list")
    voices = []
    for i, entry in enumerate(entries):
        where = f"{source}: voices[{i}]"
        if isinstance(entry, str):
            voices.append(Voice(_name(entry, where), language, tags))
            continue
        if not isinstance(entry, Mapping) or "name" not in entry:
            raise VoiceRegistryError(f"{where}: expected a name or an object with \"name\"")
        extra = set(entry) - {"name", "language", "emotion_tags"}
        if extra:
            raise VoiceRegistryError(f"{where}: unknown field(s) {', '.join(sorted(extra))}")
        voices.append(Voice(_name(entry["name"], where),
                            _language(entry.get("language", language), f"{where}.language"),
                            _tags(entry["emotion_tags"], f"{where}.emotion_tags")
                            if "emotion_tags" in entry else tags))
    default = raw.get("default", voices[0].name)
    if not isinstance(default, str):
        raise VoiceRegistryError(f"{source}: default must be a voice name")
    registry = VoiceRegistry(tuple(voices), default, source)
    # Keep the registry's own spelling of the default, whatever case the file used.
    return VoiceRegistry(registry.voices, registry.default_voice.name, source)


def registry_to_dict(registry: VoiceRegistry) -> dict[str, Any]:
    """The voices.json form of `registry` (every field explicit)."""
    return {"default": registry.default,
            "voices": [{"name": v.name, "language": v.language,
                        "emotion_tags": list(v.emotion_tags)} for v in registry.voices]}


def with_adapter_voices(base: VoiceRegistry,
                        adapters: Sequence[tuple[str, VoiceRegistry]]) -> VoiceRegistry:
    """The base model's voices, then each adapter's (each Voice tagged with its adapter),
    with the base's default. VoiceRegistryError when a name is taken twice, ignoring case:
    a session picks a voice by name alone, so a name must say which weights speak it."""
    voices = list(base.voices)
    owner = {v.name.casefold(): "the base model" for v in base.voices}
    for name, registry in adapters:
        for v in registry.voices:
            key = v.name.casefold()
            if key in owner:
                raise VoiceRegistryError(
                    f"adapter {name!r}: voice {v.name!r} is already a voice of {owner[key]}; "
                    f"voice names must differ across the base model and every adapter")
            owner[key] = f"adapter {name!r}"
            voices.append(dataclasses.replace(v, adapter=name))
    return VoiceRegistry(tuple(voices), base.default, base.source)


def registry_from_setting(value: str, source: str = "model.voices") -> VoiceRegistry:
    """The inline form of the `model.voices` setting: comma-separated `name` or
    `name:language` items, the first one the default, e.g. "pierre:fr, amelie:fr".
    Voices without a language are English and get the English emotion tags."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise VoiceRegistryError(f"{source}: empty voice list")
    voices = []
    for item in items:
        name, _, lang = item.partition(":")
        name, lang = name.strip(), lang.strip() or "en"
        voices.append(Voice(_name(name, source), _language(lang, f"{source}: {item!r}"),
                            EMOTION_TAGS if lang == "en" else ()))
    return VoiceRegistry(tuple(voices), voices[0].name, source)
