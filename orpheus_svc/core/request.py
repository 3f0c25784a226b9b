"""What a caller submits for one segment: the request and its sampling parameters.

Plain frozen data, the lowest of the core's generation modules: the backend contract
(core/step.py) carries requests, the batch arrays (core/batch.py) hold them per slot, and a
Generation (core/generation.py) is made from one; none of those is imported here.
"""

from __future__ import annotations

from dataclasses import dataclass

# Seeds are 64-bit (SamplingOptions.seed is a uint64; the torch sampler's counter RNG holds
# uint64): a session's segment seeds wrap around this (server/settings.py), the edges accept
# seeds below it (server/options.py SEED_MAX), and the engine reduces any integer modulo it
# (engine/loop.py), so no backend is handed one that overflows.
SEED_MODULUS = 1 << 64


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

        The edges apply it once, with the field for the client (server/options.py); the
        engine applies it again only as a guard for requests that reach it another way
        (engine/loop.py). A seed is any integer here: the engine takes it modulo 2^64, and
        the edges range-check it as a uint64."""
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
