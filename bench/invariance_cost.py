"""What batch invariance costs the torch backend on the CPU: one decode step of B rows as
TorchBackend.step runs it (forward and token choice), all unseeded (the fast path), all
seeded and half of each (both batch-invariant, every row: 16-row GEMM calls, the span
rounded up to 512 keys; StepPlan.seeded), alternated in one run so that the ratios compare
like with like.

    PYTHONPATH=. python bench/invariance_cost.py [--json out.json] [--reps 30]

Models: the demo (hidden 64, 2 layers: the server's CPU default) and a wider one (hidden
512, 8 layers, 8/2 heads), random weights, float32, KV slot pool of 512 positions; rows sit
at random positions 100..500 (a segment's prompt plus its audio so far). Prefill is not
timed (a step's prefill rows are a small share; invariant prompts run in their own group).
The repetition penalty's seen marks are put back after each step, so every step repeats.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import random
import statistics
import time

import torch

from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.step import StepPlan, StepRow
from orpheus_svc.engine.model import invariant
from orpheus_svc.engine.model.llama import SlotLlama
from orpheus_svc.engine.torch.backend import TorchBackend
from orpheus_svc.models.demo import demo_spec, random_state_dict

SEQ = 512


def _model(wide: bool) -> SlotLlama:
    spec = demo_spec()
    if wide:
        spec = dataclasses.replace(spec, hidden_size=512, intermediate_size=1536,
                                   num_hidden_layers=8, num_attention_heads=8,
                                   num_key_value_heads=2, head_dim=64)
    spec = dataclasses.replace(spec, torch_dtype="float32")
    return SlotLlama(spec, random_state_dict(spec, 0, torch.float32), num_slots=64,
                     max_seq_len=SEQ, dtype=torch.float32)


def _plan(rng: random.Random, b: int, seeded) -> StepPlan:
    """b decode rows at random positions; row s seeded where seeded[s]."""
    rows = []
    for s in range(b):
        pos = rng.randrange(100, 500)
        req = GenerationRequest(f"b{s}", 0, (128259, 128000, 40, 128009), 4000,
                                SamplingParams(seed=s if seeded[s] else None))
        rows.append(StepRow(s, s, req, s, False, pos - 3, 128266 + (pos % 7) * 4096 + s,
                            pos, pos % 7, pos % 7 == 0))
    return StepPlan(0, decode=rows)


def _time_step(backend, plan, reps) -> list[float]:
    seen = backend.seen.seen.clone()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        backend.step(plan)
        out.append((time.perf_counter() - t0) * 1000)
        backend.seen.seen.copy_(seen)
    return out


def run(reps: int, sizes=(1, 8, 32, 64)) -> dict:
    results = {}
    for wide in (False, True):
        backend = TorchBackend(_model(wide))
        name = "wide" if wide else "demo"
        for b in sizes:
            variants = {"unseeded": [False] * b, "seeded": [True] * b,
                        "half": [i % 2 == 0 for i in range(b)]}
            plans = {k: _plan(random.Random(b), b, v) for k, v in variants.items()}
            times = {k: [] for k in variants}
            for _ in range(3):  # warm-up
                for plan in plans.values():
                    _time_step(backend, plan, 1)
            for _ in range(reps // 5):  # alternate in small blocks: the same window for each
                for k, plan in plans.items():
                    times[k] += _time_step(backend, plan, 5)
            med = {k: statistics.median(v) for k, v in times.items()}
            results[f"{name}/b{b}"] = {
                "step_ms_median": {k: round(v, 3) for k, v in med.items()},
                "seeded_over_unseeded": round(med["seeded"] / med["unseeded"], 3),
                "half_over_unseeded": round(med["half"] / med["unseeded"], 3)}
            print(f"{name:5} B={b:3}  unseeded {med['unseeded']:7.3f} ms  seeded "
                  f"{med['seeded']:7.3f} ms (x{med['seeded'] / med['unseeded']:.2f})  half "
                  f"{med['half']:7.3f} ms (x{med['half'] / med['unseeded']:.2f})", flush=True)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json")
    args = ap.parse_args()
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        pass
    doc = {"what": "torch backend decode step on the CPU, unseeded vs seeded rows",
           "torch": torch.__version__, "threads": torch.get_num_threads(),
           "cpu": platform.processor() or platform.machine(),
           "capability": torch.backends.cpu.get_cpu_capability(),
           "amx": " amx_tile" in flags, "gemm": "one call per row",
           "results": run(args.reps)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
