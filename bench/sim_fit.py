"""Fit the sim's served-step terms to a GPU run's server, and show the sim beside the run.

    python bench/sim_fit.py [--run bench/results/gpu-engine-h200] [--base h200-bf16]

Reads the run's serve.summary.json (two levels of the real server under orpheus-bench) and
gpu-engine.json (the batched prefill of the `hf` section: the per-token price), and
searches a grid, narrowed each round, for the prefill launch cost and the host's scale
(orpheus_svc/engine/sim/fit.py) whose sim of both levels (bench/orpheus_bench/simserve.py,
on a virtual clock, a few seconds of CPU per pair) misses the run's step periods and TTFB
p95s least. Prints the fitted terms and, per level, the run's figures beside the sim's. The profile
`h200-server` in orpheus_svc/engine/sim/profiles.py holds this script's numbers for the
H200 run; rerun it after the next card run and copy them there.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orpheus_bench.simserve import Level, simulate  # noqa: E402
from orpheus_svc.engine.sim.fit import (  # noqa: E402
    ServedLevel,
    host_line,
    misfit,
    prefill_token_extra_s,
    served_profile,
)
from orpheus_svc.engine.sim.profiles import get_profile  # noqa: E402

RUN = Path(__file__).resolve().parent / "results" / "gpu-engine-h200"
# The search: prefill launch cost in seconds, host scale; each round narrows around the best.
LAUNCH_GRID = (0.0, 0.02, 0.03, 0.04, 0.05, 0.06)
SCALE_GRID = (0.5, 0.75, 1.0, 1.25)


def read_run(run_dir: Path) -> tuple[list[ServedLevel], dict]:
    serve = json.loads((run_dir / "serve.summary.json").read_text())
    engine = json.loads((run_dir / "gpu-engine.json").read_text())
    return [ServedLevel.from_run(r) for r in serve["runs"]], engine["hf"]


def level_figures(profile, levels) -> list:
    return [simulate(profile, Level(sessions=lv.sessions)) for lv in levels]


def fit(run_dir: Path = RUN, base_name: str = "h200-bf16", rounds: int = 3,
        name: str = "h200-server") -> dict:
    levels, hf = read_run(run_dir)
    base = get_profile(base_name)
    token_s = prefill_token_extra_s(base, hf["batch"], hf["context"], hf["prefill_and_first_s"])
    line = host_line(levels)

    def score(launch: float, scale: float) -> float:
        sims = level_figures(served_profile(base, name, launch, token_s, scale, line), levels)
        return misfit([(s.step_period_s, s.ttfb_p95_s) for s in sims], levels)

    launches, scales = LAUNCH_GRID, SCALE_GRID
    best = (math.inf, 0.0, 1.0)
    for r in range(rounds):
        for launch in launches:
            for scale in scales:
                best = min(best, (score(launch, scale), launch, scale))
        _, launch, scale = best
        dl, ds = (launches[1] - launches[0]) / 2, (scales[1] - scales[0]) / 2
        launches = tuple(max(launch + k * dl, 0.0) for k in (-1, 0, 1))
        scales = tuple(max(scale + k * ds, 0.0) for k in (-1, 0, 1))
    worst, launch, scale = best
    profile = served_profile(base, name, launch, token_s, scale, line)
    sims = level_figures(profile, levels)
    return {
        "base": base_name, "run": str(run_dir),
        "fit": {"prefill_launch_s": round(launch, 6), "prefill_token_s": round(token_s, 9),
                "host_scale": round(scale, 4), "host_step_s": round(profile.host_step_s, 6),
                "host_row_s": round(profile.host_row_s, 9),
                "largest_miss": f"{math.expm1(worst):+.1%} (|log| {worst:.3f})"},
        "levels": [{"sessions": lv.sessions,
                    "run": {"step_period_ms": round(lv.period_s * 1e3, 2),
                            "mean_batch": round(lv.mean_batch, 1),
                            "ttfb_p95_ms": round(lv.ttfb_p95_s * 1e3, 1),
                            "ttfb_min_ms": round(lv.ttfb_min_s * 1e3, 1),
                            "steps": lv.steps, "wall_s": round(lv.wall_s, 2),
                            "generations": lv.generations, "tokens": lv.tokens},
                    "sim": {**sim.summary(), "ttfb_min_ms": round(min(sim.ttfb_s) * 1e3, 1)}}
                   for lv, sim in zip(levels, sims)],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=RUN)
    ap.add_argument("--base", default="h200-bf16")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    print(json.dumps(fit(args.run, args.base, args.rounds), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
