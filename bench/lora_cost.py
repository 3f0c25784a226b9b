"""What batched LoRA adapters cost a decode step (issue 34), on the CPU: one decode step of
32 rows with 0 (no pool), 0 (a pool, every row on the base model), 1, 4 and 16 adapters of
rank 16 spread over the rows round-robin, alternated in one run so that the ratios compare
like with like.

    PYTHONPATH=. python bench/lora_cost.py [--json out.json] [--reps 30] [--rows 32] [--threads 1]

One torch thread by default: on a shared machine two threads of small GEMMs wait on each
other whenever the OS takes one away, which swamps what is measured here.

Two paths, the same function (engine/model/lora.py): `grouped` (the torch backend and the
graph backend off CUDA: rows grouped by adapter on the host, batch-invariant GEMMs per
group) and `indexed` (what the graph engine runs inside its CUDA graph without Triton: each
row's A and B gathered from the pool, then batched matmuls). Model: hidden 512, 8 layers,
8/2 heads (bench/invariance_cost.py's wide one), random weights and adapters, float32, KV
slot pool of 512 positions, rows at random positions 100..500. CPU timings say nothing of a
GPU's: there the gathered shrink/expand is the Triton kernel, run by scripts/gpu-engine-check.sh
when a card is at hand.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import time

import torch

from orpheus_svc.engine.model.llama import SlotLlama
from orpheus_svc.engine.model.lora import FUSED, LoraRows
from orpheus_svc.models.demo import demo_spec, random_state_dict

SEQ = 512
RANK = 16
POOL = 16


def _spec():
    spec = dataclasses.replace(demo_spec(), hidden_size=512, intermediate_size=1536,
                               num_hidden_layers=8, num_attention_heads=8,
                               num_key_value_heads=2, head_dim=64, torch_dtype="float32")
    return spec


def _model(spec, pool: bool) -> SlotLlama:
    model = SlotLlama(spec, random_state_dict(spec, 0, torch.float32), num_slots=64,
                      max_seq_len=SEQ, dtype=torch.float32,
                      max_adapters=POOL if pool else 0, max_lora_rank=RANK)
    if pool:
        gen = torch.Generator().manual_seed(1)
        shapes = spec.tensor_shapes()
        for index in range(POOL):
            layers = {li: {m: (torch.randn(RANK, shapes[f"model.layers.{li}.{m}.weight"][1],
                                           generator=gen) * 0.01,
                               torch.randn(shapes[f"model.layers.{li}.{m}.weight"][0], RANK,
                                           generator=gen) * 0.01)
                           for names in FUSED.values() for m in names}
                      for li in range(spec.num_hidden_layers)}
            model.lora.install(index, layers, 2.0)
    return model


def _indexed() -> None:
    """Make every decode take the indexed path (as the graph engine on CUDA)."""
    def indexed(pool, adapters, repeat=1):
        if pool is None:
            return None
        return LoraRows.indexed(pool, torch.as_tensor(list(adapters)).repeat_interleave(repeat))
    LoraRows.grouped = classmethod(lambda cls, *a, **k: indexed(*a, **k))  # type: ignore


def _time(model, slots, tokens, positions, adapters, reps) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        model.decode(slots, tokens, positions, adapters=adapters)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def run(reps: int, rows: int) -> dict:
    rng = random.Random(0)
    spec = _spec()
    plain, pooled = _model(spec, False), _model(spec, True)
    slots = list(range(rows))
    tokens = [rng.randrange(128266, 156940) for _ in slots]
    positions = [rng.randrange(100, 500) for _ in slots]
    variants = {"no pool": (plain, None), "pool, all base": (pooled, [-1] * rows)}
    for n in (1, 4, 16):
        variants[f"{n} adapters"] = (pooled, [i % n for i in slots])
    results = {}
    original = LoraRows.grouped
    for path in ("grouped", "indexed"):
        if path == "indexed":
            _indexed()
        try:
            times = {k: [] for k in variants}
            for _ in range(3):  # warm-up
                for model, ad in variants.values():
                    _time(model, slots, tokens, positions, ad, 1)
            for _ in range(reps // 5):  # alternate in small blocks: the same window for each
                for k, (model, ad) in variants.items():
                    times[k] += _time(model, slots, tokens, positions, ad, 5)
        finally:
            LoraRows.grouped = original
        med = {k: statistics.median(v) for k, v in times.items()}
        base = med["no pool"]
        results[path] = {k: {"step_ms_median": round(v, 3), "over_base": round(v / base, 3)}
                         for k, v in med.items()}
        print(f"{path}: " + "  ".join(f"{k} {v:.2f} ms (x{v / base:.2f})"
                                      for k, v in med.items()), flush=True)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    doc = {"what": f"decode step of {args.rows} rows on the CPU with 0, 1, 4 and 16 LoRA "
                   f"adapters of rank {RANK} (issue 34)",
           "machine": "CPU (shared 2-core dev machine)", "torch": torch.__version__,
           "threads": torch.get_num_threads(), "rank": RANK, "pool": POOL, "rows": args.rows,
           "model": "hidden 512, 8 layers, 8/2 heads, float32",
           "results": run(args.reps, args.rows)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
