"""The real-time row budget: how many generations can run at once with every one of them
still faster than its listener. Pure arithmetic over the engine's own measured steps.

A listener plays 82.03 tokens' worth of audio per second (7 tokens per 2048-sample frame
at 24 kHz). A batch of n rows gets real time only while a step takes at most 1/82.03 s;
past that (the GPU's "real-time batch", docs/capacity.md) every row of the batch falls
behind together, listeners run dry and the flusher sends frame by frame. Running fewer
rows is then strictly better: the rows that wait are later segments, whose audio is heard
only after what is already buffered.

The budget is what the engine delivers divided by what one row needs:

    cap = tokens per second delivered (smoothed over WINDOW_S) / (82.03 x (1 + headroom))

It needs no model of the backend: it is the engine's measured throughput, host time
included (a host-bound step is as slow for the listener as a GPU-bound one). It assumes
throughput does not grow with the batch, so it errs low: below the real-time batch a
bigger batch does deliver more, the next estimate sees it, and the cap climbs to the point
where a step takes 1 / target. The scheduler applies it at admission (core/scheduler.py):
later segments wait in the queue while the running ones fill the budget; a generation whose
listener is waiting for it, or will be within MIN_SLACK_S, is admitted regardless.
"""

from __future__ import annotations

import math

from .tokens import FRAME_SECONDS, FRAME_TOKENS

REALTIME_TOKENS_PER_S = FRAME_TOKENS / FRAME_SECONDS  # 82.03: one listener's rate
WINDOW_S = 0.5  # smoothing window of the throughput estimate (about 40 steps on a GPU)
# A later segment needed within this many seconds is admitted even over the budget: time
# for its prefill and first frame (about 7 steps) with a wide margin.
MIN_SLACK_S = 1.0


class RowBudget:
    """Smoothed engine throughput -> how many rows can run at real time x (1 + headroom)."""

    def __init__(self, headroom: float) -> None:
        if not (math.isfinite(headroom) and headroom >= 0):
            raise ValueError(f"headroom must be >= 0, got {headroom!r}")
        self.target = REALTIME_TOKENS_PER_S * (1.0 + headroom)  # tokens/s each row needs
        self.tokens_per_s = 0.0  # smoothed; 0 until the first observation

    def observe(self, tokens: int, seconds: float) -> None:
        """One step made `tokens` tokens in `seconds`, measured from the end of the step
        before it (so the host's time between steps counts). Steps that follow an idle
        wait must not be observed: their time is not the engine's."""
        if seconds <= 0:
            return
        rate = tokens / seconds
        if not self.tokens_per_s:
            self.tokens_per_s = rate
            return
        weight = min(seconds / WINDOW_S, 1.0)
        self.tokens_per_s += weight * (rate - self.tokens_per_s)

    @property
    def cap(self) -> float:
        """Rows that can run at the target rate; 0 before anything was measured (then only
        the generations that are due run, and the first steps measure the engine)."""
        return self.tokens_per_s / self.target
