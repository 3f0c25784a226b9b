"""The scheduler's settings (engine.* in the config file) and its batch order. Pure Python.

Batch order (docs/architecture.md, "Where each idea lives"), smaller keys run first:
    0. aged:   runnable but left out for >= aging_steps steps in a row (so nothing starves)
    1. TTFB:   the listener hears silence until this generation's first frame; oldest first
    2. others: least playout slack first (core/playout.py); a session seconds ahead yields
               to one about to run dry, and a session's later segment comes after the one
               being played
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .checks import is_finite, is_int, require
from .generation import Generation
from .playout import SessionPlayout


def deadline_priority(gen: Generation, session: SessionPlayout, now: float,
                      settings: "SchedulerSettings") -> tuple:
    """The batch order of the module docstring, as a sort key (smaller runs first). The
    playout horizon relies on its shape: a key (2, slack) carries the slack in seconds."""
    if gen.steps_waited >= settings.aging_steps:
        return (0, -gen.steps_waited)
    if session.listener_waiting(gen, now):
        return (1, gen.arrival)
    return (2, session.slack(gen, now))


# A batch order: (generation, its session's playout, now, settings) -> sort key.
PriorityFn = Callable[[Generation, SessionPlayout, float, "SchedulerSettings"], tuple]



@dataclass(frozen=True)
class SchedulerSettings:
    """The scheduler's settings. The names are the config file's (engine.<name>,
    docs/configuration.md); each field checks itself here and nowhere else."""

    max_batch_size: int = 32
    max_waiting: int = 64
    aging_steps: int = 64
    # Prompt tokens prefilled in one step; the oldest candidate always goes, however long.
    max_prefill_tokens: int = 4096
    # Playout horizon (0 = off): a generation whose listener has more than this many seconds
    # buffered ahead sits the step out (and does not age), so sessions far ahead of playback
    # do not lengthen everyone's steps.
    max_ahead_seconds: float = 0.0
    # Real-time row budget (core/budget.py): admit a later segment only while the running
    # generations fit what the engine measurably runs at real time x (1 + headroom); one
    # whose listener waits, or will within a second, is admitted regardless. Off by
    # default; the GPU deployment turns it on. Headroom 1.0 (2 x real time) matches the
    # flusher's chunk growth of 1.0, which keeps a listener fed only while its generation
    # runs at >= (1 + growth) x real time early on (audio/settings.py).
    row_budget: bool = False
    row_budget_headroom: float = 1.0
    # The batch order. Not a config setting: the server always runs deadline_priority; the
    # baselines of the scheduling comparison are injected by the benchmark
    # (bench/orpheus_bench/policies.py).
    priority: PriorityFn = deadline_priority

    def __post_init__(self) -> None:
        for name, floor in (("max_batch_size", 1), ("max_waiting", 0), ("aging_steps", 1),
                            ("max_prefill_tokens", 1)):
            value = getattr(self, name)
            require(is_int(value) and value >= floor, self, name, f"must be >= {floor}")
        require(is_finite(self.max_ahead_seconds) and self.max_ahead_seconds >= 0, self,
                "max_ahead_seconds", "must be >= 0")
        require(isinstance(self.row_budget, bool), self, "row_budget", "must be true or false")
        require(is_finite(self.row_budget_headroom) and 0 <= self.row_budget_headroom <= 4,
                self, "row_budget_headroom", "must be between 0 and 4")
        require(callable(self.priority), self, "priority", "must be a function")
