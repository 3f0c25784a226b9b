"""What one call runs with: `SessionSettings`, built and validated once at the edge.

    gRPC SynthesisConfig / SynthesizeRequest --+
    HTTP speech JSON, WebSocket config --------+--> server/options.py --> SessionSettings
    offline synth (synth.py) ------------------+    (validated, every default filled)
                                                        |
                      StreamSession --> Runtime.request --> EngineLoop (trust it as it is)

Every field holds a value: nothing downstream fills a default or re-checks a range.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from orpheus_svc.core.request import SEED_MODULUS, SamplingParams


@dataclass(frozen=True)
class SessionSettings:
    """A call's validated settings (server/options.py `session_settings` builds them).

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

    def segment_sampling(self, index: int) -> SamplingParams:
        """The sampling of the session's segment `index`: a seeded session's segment i runs
        with seed + i (modulo 2^64), so its segments do not repeat one another's draws."""
        if self.sampling.seed is None:
            return self.sampling
        return dataclasses.replace(self.sampling, seed=(self.sampling.seed + index) % SEED_MODULUS)
