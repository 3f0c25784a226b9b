"""GPU or host? The sim server's step counters over one load level.

A sim server started with ORPHEUS_SIM_STATS_FILE=<file> in its environment writes its
backend's stats() there 5 times a second (orpheus_svc/engine/sim/backend.py): steps, rows,
host-bound steps (steps where the host took longer than the modelled GPU step, so the host
set the pace), the host time beyond the model (and how much of it the engine thread's late
returns from its sleep caused), and a histogram of step periods. The bench
reads the file before and after a level and reports the difference, so every sim run says
whether the simulated GPU or the server's host was the limit. Pure Python: no grpc.
"""

from __future__ import annotations

import json
import time
from pathlib import Path


def read(path: str | None, not_before: float | None = None, wait_s: float = 1.5) -> dict | None:
    """The stats file's content, waiting (up to wait_s) for one written at or after
    `not_before` (time.time()); None if there is none to read."""
    if not path:
        return None
    deadline = time.time() + wait_s
    while True:
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            doc = None
        fresh = doc is not None and (not_before is None or doc.get("written_at", 0) >= not_before)
        if fresh or time.time() >= deadline:
            return doc if fresh else None
        time.sleep(0.05)


def bucket_upper_s(i: int, buckets: dict) -> float:
    """Upper edge of histogram bucket i (the last bucket has none: +inf)."""
    if i >= buckets["count"]:
        return float("inf")
    return buckets["first_s"] * buckets["ratio"] ** i


def hist_quantile_s(hist: dict[int, int], buckets: dict, q: float) -> float | None:
    """q-th percentile (0..100) of a bucketed distribution, as the upper edge of the bucket
    that holds it (good to the bucket width, 5%)."""
    n = sum(hist.values())
    if n == 0:
        return None
    rank = max(1, -(-q * n // 100))  # nearest rank, 1-based
    seen = 0
    for i in sorted(hist):
        seen += hist[i]
        if seen >= rank:
            return bucket_upper_s(i, buckets)
    return bucket_upper_s(max(hist), buckets)


WAKE_KEYS = ("host_bound_by_wake_steps", "host_excess_wake_s", "late_wakes", "late_wake_s")


def delta(before: dict | None, after: dict | None) -> dict | None:
    """What the sim did between two stats snapshots: steps, rows, host-bound steps and the
    host's excess time, and the step-period distribution (ms). None without both."""
    if not before or not after or before.get("pid") != after.get("pid"):
        return None

    def d(key):
        return after.get(key, 0) - before.get(key, 0)

    steps = d("steps")
    h0 = {int(k): v for k, v in (before.get("step_hist") or {}).items()}
    h1 = {int(k): v for k, v in (after.get("step_hist") or {}).items()}
    hist = {i: n - h0.get(i, 0) for i, n in h1.items() if n - h0.get(i, 0) > 0}
    buckets = after.get("step_buckets") or {"first_s": 1e-4, "ratio": 1.05, "count": 241}
    if after.get("max_step_s", 0) > before.get("max_step_s", 0):
        top = after["max_step_s"]  # the largest period so far happened in this level
    else:
        top = bucket_upper_s(max(hist), buckets) if hist else None  # an upper bound

    def ms(v):
        return None if v is None else round(v * 1000, 3)

    modelled = d("modelled_s")
    excess = d("host_excess_s")
    # why the host was late: the engine thread back late from the step's sleep (the OS or
    # the GIL kept it), or its own work (the rest); servers from before 2026-11-26 lack them
    wake = {k: round(d(k), 6) if k.endswith("_s") else d(k)
            for k in WAKE_KEYS} if "late_wakes" in after else {}
    return {
        **wake,
        "profile": after.get("profile"),
        "steps": steps,
        "rows": d("rows"),
        "mean_batch": d("rows") / steps if steps else None,
        "host_bound_steps": d("host_bound_steps"),
        "host_bound_fraction": d("host_bound_steps") / steps if steps else None,
        "host_excess_s": round(excess, 6),
        "modelled_s": round(modelled, 6),
        # share of the level's step time the GPU model would have needed: 1.0 = GPU-bound
        "gpu_share": modelled / (modelled + excess) if modelled + excess > 0 else None,
        "step_ms": {"n": sum(hist.values()),
                    **{f"p{q}": ms(hist_quantile_s(hist, buckets, q)) for q in (50, 95, 99)},
                    "max": ms(top)},
    }
