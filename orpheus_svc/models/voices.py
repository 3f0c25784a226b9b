"""Where a served model's voice list comes from (docs/voices.md), first match wins:

  1. the `model.voices` setting: a path to a voices.json, or an inline list
     ("pierre:fr, amelie:fr"; the first is the default);
  2. `voices.json` in the checkpoint directory (model.path), then in the engine directory
     (engine.trtllm_engine_dir; orpheus-build-engine copies it there with the tokenizer);
  3. a preset for a known published checkpoint, found by its hub id (model.path as given,
     or the `models--owner--name` folder of a hub-cache snapshot path) or by a local
     directory named like the repository (/models/3b-fr-ft-research_release);
  4. the eight English voices (Canopy's English checkpoints and their fine-tunes), with a
     warning when the checkpoint is not one of Canopy's English ones.

No torch and no network here: a hub id is only compared by name, never downloaded.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

from orpheus_svc.core.voices import (
    VOICES_FILE,
    Voice,
    VoiceRegistry,
    VoiceRegistryError,
    english_registry,
    registry_from_dict,
    registry_from_setting,
)
from orpheus_svc.files import read_mapping

log = logging.getLogger(__name__)

ENGLISH_CHECKPOINTS = ("canopylabs/orpheus-3b-0.1-ft", "canopylabs/orpheus-tts-0.1-finetune-prod",
                       "canopylabs/orpheus-3b-0.1-pretrained",
                       "canopylabs/orpheus-tts-0.1-pretrained")


def _preset(hub_id: str, *groups: tuple[str, tuple[str, ...]]) -> VoiceRegistry:
    # Emotion tags: the multilingual cards we could read do not list them per language,
    # so none are claimed (a voices.json or model.voices can add them).
    voices = tuple(Voice(name, lang) for lang, names in groups for name in names)
    return VoiceRegistry(voices, voices[0].name, f"preset for {hub_id}")


# Canopy's multilingual research release (April 2025). Provenance of every name is in
# docs/voices.md: the model cards themselves could not be read from this project's
# sources, so these come from the public code that serves those checkpoints.
MULTILINGUAL_PRESETS: dict[str, VoiceRegistry] = {
    "canopylabs/3b-fr-ft-research_release":
        _preset("canopylabs/3b-fr-ft-research_release", ("fr", ("pierre", "amelie", "marie"))),
    "canopylabs/3b-de-ft-research_release":
        _preset("canopylabs/3b-de-ft-research_release", ("de", ("jana", "thomas", "max"))),
    "canopylabs/3b-es_it-ft-research_release":
        _preset("canopylabs/3b-es_it-ft-research_release",
                ("es", ("javi", "sergio", "maria")), ("it", ("pietro", "giulia", "carlo"))),
    "canopylabs/3b-ko-ft-research_release":
        _preset("canopylabs/3b-ko-ft-research_release", ("ko", ("유나", "준서"))),
    "canopylabs/3b-hi-ft-research_release":
        _preset("canopylabs/3b-hi-ft-research_release", ("hi", ("ऋतिका",))),
    "canopylabs/3b-zh-ft-research_release":
        _preset("canopylabs/3b-zh-ft-research_release", ("zh", ("长乐", "白芷"))),
}

_HUB_CACHE_RE = re.compile(r"models--([^/\\]+?)--([^/\\]+)")


def hub_id_of(ref: str | None) -> str | None:
    """"owner/name" for a hub id (with or without @revision) or a path inside a hub-cache
    snapshot (.../models--owner--name/snapshots/<rev>); None otherwise."""
    if not ref:
        return None
    m = _HUB_CACHE_RE.search(str(ref))
    if m:
        return f"{m.group(1)}/{m.group(2)}"
    text = str(ref).partition("@")[0]
    if text.count("/") == 1 and not text.startswith((".", "/", "~")) \
            and not Path(os.path.expanduser(text)).exists():
        return text
    return None


def read_voices_file(path: Path) -> VoiceRegistry:
    """Parse one voices.json; VoiceRegistryError names the file and the field."""
    raw = read_mapping(path, VoiceRegistryError, expected='a JSON object with a "voices" list')
    return registry_from_dict(raw, str(path))


def write_voices_file(directory: Path, registry: VoiceRegistry) -> Path:
    """Write `registry` as <directory>/voices.json (the format read_voices_file reads)."""
    from orpheus_svc.core.voices import registry_to_dict

    path = Path(directory) / VOICES_FILE
    path.write_text(json.dumps(registry_to_dict(registry), indent=2, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    return path


def load_voice_registry(*, setting: str | None = None, model_ref: str | None = None,
                        model_dir: Path | None = None,
                        engine_dir: Path | None = None) -> VoiceRegistry:
    """The served model's voices (module docstring for the order). `model_ref` is model.path
    as configured, `model_dir` the local directory it resolved to (if any)."""
    if setting:
        candidate = Path(os.path.expanduser(setting))
        if candidate.is_dir():
            candidate = candidate / VOICES_FILE
        if candidate.suffix == ".json" or candidate.is_file():
            return read_voices_file(candidate)
        return registry_from_setting(setting)
    for directory in (model_dir, engine_dir):
        if directory is not None and (Path(directory) / VOICES_FILE).is_file():
            return read_voices_file(Path(directory) / VOICES_FILE)
    for ref in (model_ref, str(model_dir) if model_dir else None):
        hub_id = hub_id_of(ref)
        if hub_id in MULTILINGUAL_PRESETS:
            return MULTILINGUAL_PRESETS[hub_id]
        # a local copy kept under the repository's own name (/models/3b-fr-ft-research_release)
        name = Path(str(ref)).name if ref else ""
        by_name = [reg for hub, reg in MULTILINGUAL_PRESETS.items() if hub.split("/")[1] == name]
        if by_name:
            return by_name[0]
    registry = english_registry()
    hub_id = hub_id_of(model_ref) or hub_id_of(str(model_dir) if model_dir else None)
    if model_ref and hub_id not in ENGLISH_CHECKPOINTS:
        log.warning("%s has no %s and is not a checkpoint with known voices: serving the "
                    "English voices (%s). If the model was trained on other speakers, add a "
                    "voices.json or set model.voices.", model_ref, VOICES_FILE,
                    ", ".join(registry.names))
    return registry
