"""Histograms observed in the engine process and served by a front-end (split topology).

The engine's per-step histograms (`orpheus_engine_batch_size`, `orpheus_engine_step_seconds`,
`orpheus_codec_batch_windows`: server/metrics.py) are observed where the steps and decodes happen. In split mode that is
the engine process, which serves no metrics; it keeps plain bucket counts here and sends
them with every stats snapshot (ipc/wire.py, `EngineSnapshot.extra["histograms"]`), and
front-end 0 serves them (the others do not, so a sum over front-ends counts each once).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Sequence

# Upper bounds of the batch histograms (generations per step, windows per SNAC call).
BATCH_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
# Upper bounds of the step period (seconds). 0.01219 is real time: a row gets one token per
# step and a listener needs 82.03 tokens/s, so a longer step starves every running session
# (the StepPastRealTime alert reads this bucket: deploy/observability/).
REAL_TIME_STEP_S = 0.01219
STEP_BOUNDS = (0.002, 0.004, 0.006, 0.008, 0.010, REAL_TIME_STEP_S, 0.015, 0.02, 0.03, 0.05,
               0.1, 0.25, 1.0)


class BucketCounts:
    """A Prometheus-style histogram's state: counts per bucket (upper bounds inclusive, the
    last one +Inf), the sum and the number of observations. One thread observes; any
    thread may take `state()` (a copy)."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def state(self) -> list:
        """[counts, sum]: what crosses the process boundary (msgpack-able)."""
        return [list(self.counts), self.sum]


def cumulative(bounds: Sequence[float], state: list) -> tuple[list[tuple[str, int]], float]:
    """`state()` as Prometheus buckets: [(le, cumulative count), ..., ("+Inf", total)], sum."""
    counts, total = state
    out, running = [], 0
    for bound, n in zip([*map(_le, bounds), "+Inf"], counts):
        running += n
        out.append((bound, running))
    return out, total


def _le(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


class EngineHistograms:
    """The engine process's histograms, keyed as server/metrics.py ENGINE_HISTOGRAMS:
    `on_step` and `on_decode` are build_runtime's callbacks (engine and flusher thread),
    `state` what each stats snapshot carries."""

    def __init__(self) -> None:
        self.hists = {"batch_size": BucketCounts(BATCH_BOUNDS),
                      "step_seconds": BucketCounts(STEP_BOUNDS),
                      "codec_batch": BucketCounts(BATCH_BOUNDS)}
        self.on_decode = self.hists["codec_batch"].observe

    def on_step(self, batch: int, seconds: float) -> None:
        self.hists["batch_size"].observe(batch)
        self.hists["step_seconds"].observe(seconds)

    def state(self) -> dict:
        return {k: h.state() for k, h in self.hists.items()}
