"""What the scheduler hands out: a step's complete output (StepOutput), how a generation
ended (finish_of), and its counters (SchedulerStats). Plain data; pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .events import Finish, FramePush
from .generation import Generation

GRAMMAR_ERROR = "the model emitted a token outside the audio grammar"


def finish_of(gen: Generation, error: str | None = None) -> Finish:
    """How `gen` ended, for the flusher to put on its final event: the reason (a
    generation ended before it was set, at a cancel, is "cancelled"), its counters, the
    error a person can act on, and its queue and first-token delays by the engine's clock."""
    if gen.finish_reason == "error" and error is None:
        error = GRAMMAR_ERROR
    return Finish(gen.finish_reason or "cancelled", gen.num_prompt_tokens,
                  gen.num_generated, gen.num_frames, error,
                  None if gen.admitted_at is None else gen.admitted_at - gen.arrival,
                  None if gen.first_token_at is None else gen.first_token_at - gen.arrival)


@dataclass
class StepOutput:
    """Everything one step's update decided, for the engine loop to move on.

    frames: per generation with new frames, their codes ([n, 7], read-only).
    finished: the generations that ended (finish_reason set, slot freed).
    pushes: the flusher's hand-off (one FramePush per generation with frames, a moved
        playout clock, or a clean end), with playout snapshots and Finishes in place.
    drops: (gen_id, Finish) of the generations that ended otherwise (a grammar break, a
        failed row): the flusher drops what it holds of them and sends the end.
    period_s: seconds since the previous step ended, or since this one began after the
        engine waited for work (the one step clock: metrics and the row budget read it)."""

    frames: list[tuple[Generation, np.ndarray]] = field(default_factory=list)
    finished: list[Generation] = field(default_factory=list)
    pushes: list[FramePush] = field(default_factory=list)
    drops: list[tuple[int, Finish]] = field(default_factory=list)
    period_s: float = 0.0


@dataclass
class SchedulerStats:
    active: int
    waiting: int
    free_slots: int
    used_slots: int
    total_slots: int
    submitted: int
    finished: int
    cancelled: int
    rejected: int
    steps: int
    tokens: int
    grammar_violations: int
    # sessions generating now whose listener has less than UNDERRUN_RISK_SECONDS of audio
    # buffered (after their first audio, core/sessions.py): they run dry soon unless they
    # get steps
    underrun_risk: int = 0
    # generations the real-time row budget lets run now (0: budget off or not measured yet)
    row_budget: int = 0
