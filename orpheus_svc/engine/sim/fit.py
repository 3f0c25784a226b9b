"""Fitting a served-step profile to a GPU run's server timings. Pure Python.

A device-only profile (profiles.py, fitted to the graph step's device time) prices what the
GPU does in a step. The real server's step is longer; the served-step terms of a
GpuProfile (served_extra_seconds) take the rest:

    step = device + prefill_launch_s + prefill_token_s x prompt tokens    (a step with prompts)
                  + max(host - device, 0)                                 (every step)
    host = host_scale x (h0 + h1 x rows)

h0 + h1 x rows is the line through the two levels' engine-thread CPU seconds per step
against their mean batch (the `engine-core` thread of /proc, as orpheus-bench records it):
the host's work for a step, which run-ahead hides up to the device's time. prefill_token_s
comes from another measurement of the same card (a batched prefill, per token, less what
the roofline already prices). The two fitted terms, prefill_launch_s and host_scale, are
chosen by the caller (bench/sim_fit.py) so that the sim of each level, run on a virtual
clock (bench/orpheus_bench/simserve.py), gives the run's step period and TTFB p95:
`misfit` is the figure it minimises, the largest relative miss over the four figures.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

from .profiles import GpuProfile


@dataclass(frozen=True)
class ServedLevel:
    """One level of a GPU run's server (orpheus-bench's run record, its `server` part)."""

    sessions: int
    wall_s: float
    steps: int
    mean_batch: float
    generations: int
    tokens: int
    engine_cpu_s: float             # the engine thread's CPU seconds over the level
    ttfb_p95_s: float
    ttfb_min_s: float

    @property
    def period_s(self) -> float:
        """The step period as orpheus-bench reports it: the level's wall time per step."""
        return self.wall_s / self.steps

    @property
    def host_s_per_step(self) -> float:
        return self.engine_cpu_s / self.steps

    @classmethod
    def from_run(cls, run: dict) -> "ServedLevel":
        """From one entry of a summary JSON's `runs` (bench/orpheus_bench/summary.py)."""
        srv = run["server"]
        cpu = sum(t["cpu_s"] for t in srv.get("threads", []) if t["name"] == "engine-core")
        return cls(sessions=run["sessions"], wall_s=run["wall_s"], steps=srv["steps"],
                   mean_batch=srv["mean_batch"], generations=srv["generations"],
                   tokens=srv["tokens"], engine_cpu_s=cpu,
                   ttfb_p95_s=run["ttfb_ms"]["p95"] / 1e3, ttfb_min_s=run["ttfb_ms"]["min"] / 1e3)


def host_line(levels: Sequence[ServedLevel]) -> tuple[float, float]:
    """(h0, h1): the engine thread's CPU seconds per step as h0 + h1 x mean batch, through
    the first and last level. ValueError for levels of one mean batch."""
    a, b = levels[0], levels[-1]
    if a.mean_batch == b.mean_batch:
        raise ValueError("levels of one mean batch cannot give the host's cost per row")
    h1 = (b.host_s_per_step - a.host_s_per_step) / (b.mean_batch - a.mean_batch)
    return a.host_s_per_step - h1 * a.mean_batch, h1


def prefill_token_extra_s(base: GpuProfile, batch: int, prompt: int, seconds: float) -> float:
    """Per prompt token, what a measured batched prefill (`batch` prompts of `prompt` tokens
    in `seconds`) took beyond `base`'s roofline price of it; 0 when the roofline is slower."""
    tokens = batch * prompt
    roofline = base.step_seconds(0, 0, batch, tokens, batch * prompt * prompt)
    return max(seconds - roofline, 0.0) / tokens


def served_profile(base: GpuProfile, name: str, prefill_launch_s: float,
                   prefill_token_s: float, host_scale: float,
                   line: tuple[float, float]) -> GpuProfile:
    """`base` with the served-step terms (module docstring), as profile `name`."""
    h0, h1 = line
    return dataclasses.replace(base, name=name, prefill_launch_s=prefill_launch_s,
                               prefill_token_s=prefill_token_s, host_step_s=host_scale * h0,
                               host_row_s=host_scale * h1)


def misfit(simulated: Sequence[tuple[float, float]], levels: Sequence[ServedLevel]) -> float:
    """The largest relative miss, |log(sim / run)|, over each level's (step period, TTFB
    p95): `simulated` holds the sim's pair per level, in the order of `levels`."""
    worst = 0.0
    for (period, p95), level in zip(simulated, levels, strict=True):
        for sim, run in ((period, level.period_s), (p95, level.ttfb_p95_s)):
            if sim <= 0 or run <= 0:
                return math.inf
            worst = max(worst, abs(math.log(sim / run)))
    return worst
