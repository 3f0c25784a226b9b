"""Which way each FP8 projection multiplies at each bucket's row count: chosen once at
start-up, before the capture, and logged (engine/model/linear.py, "w8a8" or "weight_only").

On CUDA by measuring: layer 0's projection (qkv, o, gate_up, down; every layer's has the same
shape) is run both ways at each bucket's M on random input and the faster is kept, for
every layer. The W8A8 call is timed on an input quantised beforehand, as the step hands it
over (the kernel that produces a GEMM's input quantises it too: engine/graph/fused.py,
attention.py), so both paths are timed as the GEMM alone. Expected on an H200 (paper, not
measured): weight-only wins at small M, where the step reads weights and both read the same
E4M3 bytes, the weight-only GEMM with a split-K grid that fills the card; W8A8 wins once the
tensor-core FP8 arithmetic matters (somewhere around M = 64 .. 128); above
WEIGHT_ONLY_MAX_M there is no weight-only kernel and no measurement. The calls are timed
eagerly, between CUDA events; the measurement (a few hundred calls of tens of
microseconds, plus a compile per tile shape and split) costs seconds of start-up at most.

Elsewhere (the CPU, the tests) nothing is measured: `rule_path`, weight-only up to
RULE_MAX_M rows, W8A8 above, which is the choice the card is expected to make.
"""

from __future__ import annotations

import logging
from typing import Callable

import torch

from orpheus_svc.engine.model.linear import Fp8Linear

log = logging.getLogger(__name__)

PROJECTIONS = ("qkv", "o", "gate_up", "down")
RULE_MAX_M = 64

Measure = Callable[[Fp8Linear, int, str], float]


def rule_path(m: int) -> str:
    """The choice made without measuring (module docstring)."""
    return "weight_only" if m <= RULE_MAX_M else "w8a8"


def time_path(lin: Fp8Linear, m: int, path: str, reps: int = 20) -> float:
    """Milliseconds of one call of `lin` with `m` random rows by `path`, on CUDA (W8A8: its
    input quantised beforehand, module docstring): the median of `reps` calls between CUDA
    events, after three to compile and warm up."""
    dev = lin.qweight.device
    x = torch.randn((m, lin.qweight.shape[1]), device=dev).to(lin.out_dtype)
    with torch.inference_mode():
        q = lin.quantize(x) if path == "w8a8" else None
        for _ in range(3):
            lin.run(x, path, q)
        times = []
        for _ in range(reps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            lin.run(x, path, q)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def choose_fp8_paths(model, buckets, measure: Measure | None = None) -> dict:
    """Sets `paths` of every Fp8Linear of `model` (a SlotLlama) for each of `buckets`' row
    counts and returns {projection: {m: path}} ({} for a model without FP8 layers).
    `measure(lin, m, path) -> ms`: default time_path on CUDA, none (rule_path) elsewhere."""
    first = model.layers[0]
    names = [n for n in PROJECTIONS if isinstance(first[n], Fp8Linear)]
    if not names:
        return {}
    if measure is None and model.device.type == "cuda":
        measure = time_path
    chosen: dict[str, dict[int, str]] = {}
    timings: dict[str, dict[int, dict[str, float]]] = {}
    for name in names:
        lin = first[name]
        chosen[name] = {}
        for m in buckets:
            if not lin.weight_only_ok(m):
                path = "w8a8"
            elif measure is None:
                path = rule_path(m)
            else:
                ms = {p: measure(lin, m, p) for p in ("weight_only", "w8a8")}
                timings.setdefault(name, {})[m] = ms
                path = min(ms, key=ms.get)
            chosen[name][m] = path
    for layer in model.layers:
        for name in names:
            layer[name].paths.update(chosen[name])
    how = "measured" if measure is not None else f"by rule (weight-only up to {RULE_MAX_M} rows)"
    log.info("fp8: each projection's path per bucket, %s: %s", how, {
        name: {m: p + (f" ({timings[name][m]['weight_only']:.3f} vs "
                       f"{timings[name][m]['w8a8']:.3f} ms)" if m in timings.get(name, {})
                       else "")
               for m, p in per.items()} for name, per in chosen.items()})
    return chosen
