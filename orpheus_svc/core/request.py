"""What a caller submits for one segment: the request and its sampling parameters.

Plain frozen data, the lowest of the core's generation modules: the backend contract
(core/step.py) carries requests, the batch arrays (core/batch.py) hold them per slot, and a
Generation (core/generation.py) is made from one; none of those is imported here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

# Seeds are 64-bit (SamplingOptions.seed is a uint64; the sampler's counter RNG holds
# uint64): the edges accept seeds below this (server/settings.py SEED_MAX), and every seed
# that reaches a backend has gone through reduce_seed, so none overflows.
SEED_MODULUS = 1 << 64


def reduce_seed(seed: int) -> int:
    """Any integer as the 64-bit seed a backend is given (modulo 2^64): the one reduction
    (a session's segment seeds, SamplingParams.for_segment; the engine's edge,
    engine/loop.py)."""
    return int(seed) % SEED_MODULUS


class SamplingError(ValueError):
    """A SamplingParams field out of range; `field` names it, so no caller reads the text."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class SamplingParams:
    """Per-generation sampling; defaults are Orpheus's recommended values."""

    temperature: float = 0.6
    top_p: float = 0.8
    repetition_penalty: float = 1.1
    seed: int | None = None

    def validate(self) -> None:
        """The one rule for what sampling a backend may be given: SamplingError otherwise.

        The edges apply it once, with the field for the client (server/settings.py); the
        engine applies it again only as a guard for requests that reach it another way
        (engine/loop.py); the config loader to config.sampling at start-up. A seed is any
        integer here: the engine reduces it (reduce_seed), and the edges range-check it as
        a uint64."""
        # "not low <= x <= high": NaN fails every comparison, so NaN is refused too
        if not 0.0 <= self.temperature <= 2.0:
            raise SamplingError("temperature",
                                f"temperature must be in [0, 2], got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise SamplingError("top_p", f"top_p must be in (0, 1], got {self.top_p}")
        if not 1.0 <= self.repetition_penalty <= 2.0:
            raise SamplingError("repetition_penalty", "repetition_penalty must be in [1, 2], "
                                f"got {self.repetition_penalty}")
        seed = self.seed
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise SamplingError("seed", f"seed must be an integer, got {seed!r}")

    def for_segment(self, index: int) -> "SamplingParams":
        """The sampling of a session's segment `index`: a seeded session's segment i runs
        with seed + i (reduced to 64 bits), so its segments do not repeat one another's
        draws; an unseeded one is itself."""
        if self.seed is None:
            return self
        return dataclasses.replace(self, seed=reduce_seed(self.seed + index))


@dataclass(frozen=True)
class GenerationRequest:
    """What a caller submits: one segment of one session, ready to run."""

    session_id: str
    segment_index: int
    prompt_ids: tuple[int, ...]
    max_tokens: int
    sampling: SamplingParams = SamplingParams()
    # Typical audio length, used only to estimate when later segments of the session
    # will be needed (playout deadlines); never a limit.
    expected_frames: int = 0
    # The W3C traceparent of the span this generation belongs to ("" = not traced): the
    # split topology's engine process continues the trace with it (telemetry/engine.py).
    trace: str = ""
    # The LoRA adapter slot the generation runs on (engine/model/lora.py), -1 for the base
    # model: the slot of its voice's adapter (runtime.py), never a name or a path a client chose.
    adapter: int = -1
    # prompt_ids[:prefix_len] is a reference voice's prefix (core/reference.py), the same
    # for every segment in that voice: a backend with a prefix pool copies its KV instead
    # of computing it, and one without computes it in a call of its own (so the bits are
    # the same either way). 0: no prefix. `prefix_cached`: set by EngineLoop at admission
    # when the backend's pool holds it, so the scheduler's prefill budget counts only the
    # rest.
    prefix_len: int = 0
    prefix_cached: bool = False

    @property
    def prefill_tokens(self) -> int:
        """The prompt tokens a prefill of this request computes."""
        return len(self.prompt_ids) - (self.prefix_len if self.prefix_cached else 0)
