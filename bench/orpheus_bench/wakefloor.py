"""The machine's own floor for the sim's `host_bound_steps`: a host with (almost) nothing to do.

    PYTHONPATH=bench taskset -c 0 python -m orpheus_bench.wakefloor --steps 14000 --step-ms 10

One thread paces "steps" with the sim backend's own rule (orpheus_svc/engine/sim/backend.py
`pace_step`: a step ends d after the last one ended, or when it is called if that is later;
the thread sleeps until the end), and between steps does `--work-ms` of busy work in place of the
server's bookkeeping. No other thread, no GIL contention, no gRPC. A step is host-bound,
as in the sim, when it is called after the previous end + d.

What it answers: how many host-bound steps the machine alone produces (its timer and
scheduler latency, a VM's vCPU stalls) in a run as long as a load test's. If a host that does
no work misses some steps, no server on that machine can show 0. Pin it to the core the
server would use, on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Callable

from orpheus_svc.engine.sim.backend import pace_step

#: Returns from sleep later than these (ms) are counted separately.
LATE_MS = (1, 2, 5, 9)


def spin_until(clock: Callable[[], float], t: float) -> None:
    """Busy work (the host's bookkeeping stand-in) until clock() reaches t."""
    while clock() < t:
        pass


def pace(steps: int, step_s: float, work_s: float = 0.0,
         clock: Callable[[], float] = time.perf_counter,
         sleep: Callable[[float], None] = time.sleep,
         work: Callable[[Callable[[], float], float], None] = spin_until) -> dict:
    """Run `steps` paced steps of `step_s` with `work_s` of work after each; the sim's counts."""
    lates: list[float] = []
    host_bound, excess, last_end = 0, 0.0, None
    for _ in range(steps):
        # the first step starts when called (the sim's idle start), the rest by its rule
        end, over = pace_step(last_end, clock(), step_s)
        if over > 0:
            host_bound += 1
            excess += over
        last_end = end
        wait = end - clock()
        if wait > 0:
            sleep(wait)
            lates.append(max(0.0, clock() - end))
        if work_s > 0:
            work(clock, clock() + work_s)
    return summarize(steps, step_s, work_s, host_bound, excess, lates)


def summarize(steps: int, step_s: float, work_s: float, host_bound: int, excess: float,
              lates: list[float]) -> dict:
    s = sorted(lates)

    def pct(q: float) -> float | None:
        return round(s[min(len(s) - 1, int(len(s) * q))] * 1e6) if s else None
    return {"steps": steps, "step_ms": step_s * 1e3, "work_ms": work_s * 1e3,
            "host_bound_steps": host_bound, "host_excess_s": round(excess, 6),
            "sleeps": len(s), "late_sum_s": round(sum(s), 6),
            **{f"late_over_{ms}ms": sum(1 for x in s if x > ms / 1e3) for ms in LATE_MS},
            "late_p50_us": pct(0.5), "late_p99_us": pct(0.99), "late_p999_us": pct(0.999),
            "late_max_ms": round(s[-1] * 1e3, 3) if s else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="orpheus-bench-wakefloor", description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=14000, help="a 512-session six-turn run: ~14,000")
    p.add_argument("--step-ms", type=float, default=10.0,
                   help="the modelled step (h100-fp8, 512 rows at ~300 tokens: ~10.6 ms)")
    p.add_argument("--work-ms", type=float, default=0.0, help="busy work between steps")
    p.add_argument("--json", default=None, help="also write the result here")
    args = p.parse_args(argv)
    from orpheus_bench.report import machine, write_json

    doc = {"tool": "orpheus-bench-wakefloor", "machine": machine(),
           "affinity": sorted(os.sched_getaffinity(0)),
           **pace(args.steps, args.step_ms / 1e3, args.work_ms / 1e3)}
    print(json.dumps(doc))
    if args.json:
        write_json(args.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
