"""Generation state: what the scheduler knows about one utterance segment being generated.

A Generation is created from a GenerationRequest when it is submitted and is owned by the
EngineLoop thread from then on: only the scheduler reads and writes it. A backend sees a
frozen snapshot of it per step instead (row(), core/step.py).
Progress is kept as counters rather than phases:

    num_prompt_tokens  prompt length (prefilled when num_generated > 0 or prefilled is set)
    num_generated      sampled tokens, the stop id included
    num_frames         complete 7-token frames (= audio produced, 2048 samples each)

Its grammar state (frame position, whether the stop id is legal) is its FrameParser's, so
the tokens the scheduler validates and the next token a backend may sample follow one
rule (core/grammar.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .grammar import FrameParser
from .step import StepRow

# StepRow(...) by field order without the NamedTuple's generated __new__ (a Python frame):
# half the cost, for every live row of every step.
_row = tuple.__new__


@dataclass(frozen=True)
class SamplingParams:
    """Per-generation sampling; defaults are Orpheus's recommended values."""

    temperature: float = 0.6
    top_p: float = 0.8
    repetition_penalty: float = 1.1
    seed: int | None = None

    def validate(self) -> None:
        if not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"temperature must be in [0, 2], got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 1.0 <= self.repetition_penalty <= 2.0:
            raise ValueError(f"repetition_penalty must be in [1, 2], got {self.repetition_penalty}")


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


@dataclass(eq=False)
class Generation:
    gen_id: int
    request: GenerationRequest
    arrival: float
    seed: int
    slot: int | None = None
    num_generated: int = 0
    num_frames: int = 0
    last_token: int | None = None
    cancelled: bool = False
    finish_reason: str | None = None
    # Consecutive steps this generation was runnable but left out of the batch (aging).
    steps_waited: int = 0
    # Frames produced while an earlier segment of the session was still generating;
    # they join the playout clock when this generation becomes the session's head.
    frames_not_in_playout: int = 0
    parser: FrameParser = field(default_factory=FrameParser)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.request.prompt_ids)

    @property
    def needs_prefill(self) -> bool:
        return self.num_generated == 0

    @property
    def frame_position(self) -> int:
        """Position (0..6) inside the frame of the next token to sample."""
        return self.parser.position

    @property
    def stop_allowed(self) -> bool:
        """Whether the next token may be the stop id (core/grammar.py)."""
        return self.parser.stop_allowed

    def row(self) -> StepRow:
        """This generation's work in the coming step, as the backend sees it (it must hold
        a slot). Decode feeds the last sampled token at its KV index. (Built for every live
        row every step: no property calls.)"""
        n = self.num_generated
        req = self.request
        p = self.parser
        if n == 0:
            return _row(StepRow, (self.gen_id, self.slot, req, self.seed, True, 0, None, 0,
                                  p.position, p.stop_allowed))
        return _row(StepRow, (self.gen_id, self.slot, req, self.seed, False, n,
                              self.last_token, len(req.prompt_ids) + n - 1, p.position,
                              p.stop_allowed))

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
