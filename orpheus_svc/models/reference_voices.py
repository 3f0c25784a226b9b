"""The reference voices `model.reference_voices` names, made at start-up (docs/voices.md,
"Reference voices"): the SNAC encoder is loaded once, every clip is read, checked and
encoded, and the encoder is dropped. The runtime (runtime.py build_runtime) calls it once,
before the adapter catalog, and lists the voices beside the base model's.
"""

from __future__ import annotations

import logging
import os

import torch

from orpheus_svc.audio.snac_encoder import load_snac_encoder, make_reference_voice
from orpheus_svc.core.reference import ReferenceVoice, ReferenceVoiceError, reference_sources

log = logging.getLogger(__name__)


class ReferenceStartupError(ValueError):
    """A configured reference voice cannot be made; the message names the entry and field."""


def load_reference_voices(value, snac: str | os.PathLike[str],
                          device: str | torch.device = "cpu") -> tuple[ReferenceVoice, ...]:
    """The voices of `value` (the model.reference_voices setting, core/reference.py
    reference_sources), in order, encoded with SNAC checkpoint `snac` on `device`.
    Start-up config is trusted like model.adapters: its clip paths need not lie inside
    model.reference_dirs. ReferenceStartupError naming `model.reference_voices[i].<field>`
    when one cannot be made (then none is returned: start-up stops)."""
    sources = reference_sources(value)
    if not sources:
        return ()
    encoder = load_snac_encoder(snac, device)
    try:
        voices = []
        for i, source in enumerate(sources):
            try:
                ref = make_reference_voice(encoder, source.name, source.clip,
                                           source.transcript, source.language)
            except ReferenceVoiceError as exc:
                raise ReferenceStartupError(f"model.reference_voices[{i}].{exc.field}: "
                                            f"{exc.message}") from None
            log.info("reference voice %s: %.1f s clip, %d audio tokens", ref.name, ref.seconds,
                     len(ref.audio_token_ids))
            voices.append(ref)
        return tuple(voices)
    finally:
        encoder.close()
