"""What batch invariance costs the torch backend on the CPU (issue 33): one decode step of B
rows, all unseeded (the fast path), all seeded (invariant: own spans) and half of each,
alternated in one run so that the ratios compare like with like. A step with a seeded row
runs as TorchBackend.step runs it: inside invariant_step (matmul rows padded to blocks of 4)
and attending over a span rounded up to 512 keys.

    PYTHONPATH=. python bench/invariance_cost.py [--json out.json] [--reps 30]

Models: the demo (hidden 64, 2 layers: the server's CPU default) and a wider one (hidden
512, 8 layers, 8/2 heads), random weights, float32, KV slot pool of 512 positions; rows sit
at random positions 100..500 (a segment's prompt plus its audio so far). Prefill is not
timed (a step's prefill rows are a small share; invariant prompts run in their own group).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import time

import torch

from orpheus_svc.engine.model.invariant import invariant_step
from orpheus_svc.engine.model.llama import SlotLlama
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


def _time_step(model, slots, tokens, positions, invariant, reps) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        with invariant_step(any(invariant)):  # as TorchBackend.step runs it
            model.decode(slots, tokens, positions, invariant)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def run(reps: int) -> dict:
    rng = random.Random(0)
    results = {}
    for wide in (False, True):
        model = _model(wide)
        name = "wide" if wide else "demo"
        for b in (1, 7, 32, 64):
            slots = list(range(b))
            tokens = [rng.randrange(128266, 156940) for _ in slots]
            positions = [rng.randrange(100, 500) for _ in slots]
            variants = {"unseeded": [False] * b, "seeded": [True] * b,
                        "half": [i % 2 == 0 for i in slots]}
            times = {k: [] for k in variants}
            for _ in range(3):  # warm-up
                for inv in variants.values():
                    _time_step(model, slots, tokens, positions, inv, 1)
            for _ in range(reps // 5):  # alternate in small blocks: the same window for each
                for k, inv in variants.items():
                    times[k] += _time_step(model, slots, tokens, positions, inv, 5)
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
    doc = {"what": "torch backend decode step on the CPU, unseeded vs seeded rows (issue 33)",
           "torch": torch.__version__, "threads": torch.get_num_threads(),
           "results": run(args.reps)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
