"""SNAC at the step's standard, checked and timed on a GPU (audio/snac_graphs.py and friends).

    python bench/snac_gpu.py --output snac.json            # on a CUDA machine (~1-2 min)
    python bench/snac_gpu.py --device cpu --quick          # the script's own dry run
    python bench/snac_gpu.py --snac hubertsiuzdak/snac_24khz   # trained weights (SNR)

Three codecs on the same weights (random-init 24 kHz SNAC unless --snac):
  eager32   float32, torch Snake, eager, no graphs (the codec as it ran before)
  eager16   bfloat16, fused Triton Snake, eager
  graph16   bfloat16, fused Triton Snake, CUDA graphs (flusher.codec_graphs)

Prints one JSON object:
  checks    graph16 vs eager16 on the same codes (noise off: max abs difference; a padded
            bucket against the exact size; seeded rows with noise on: graph vs eager);
            bfloat16 vs float32 SNR on the signal part (tests/audio/test_snac_precision.py)
  launches  count_call_launches (fused and not) for one call of the timed shape
  timing    median ms per call for each codec at rows x (steps, keep) shapes of the
            flusher's steady state: 75-step windows (16-frame chunks with 6 + 5 steps of
            context) keeping 64 steps, at 1, 4 and the 256-frame cap's 13 rows
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orpheus_svc.audio.codec import load_snac, write_random_snac
from orpheus_svc.audio.snac_launches import count_call_launches


def _windows(rows: int, frames: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 4096, (frames, 7)) for _ in range(rows)]


def _snr(got: np.ndarray, want: np.ndarray) -> float:
    """SNR of `got` against `want`'s varying part (its mean taken off both)."""
    mean = float(np.mean(want))
    sig = want.astype(np.float64) - mean
    err = got.astype(np.float64) - mean - sig
    return 10 * np.log10(float(np.sum(sig ** 2)) / max(float(np.sum(err ** 2)), 1e-30))


def _call(codec, windows, keep, first: int, steps: int, **kw) -> np.ndarray:
    z = codec.latents(windows)[..., first:first + steps]
    return codec.decode_latents(z, keep=keep, **kw)


def _time(codec, windows, keep, first, steps, repeats: int) -> float:
    for _ in range(3):  # warm-up; graph16 captures on its 2nd call of a shape
        _call(codec, windows, keep, first, steps)
    ms = []
    for _ in range(repeats):
        t = time.perf_counter()
        _call(codec, windows, keep, first, steps)
        ms.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ms)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--snac", default=None, help="a SNAC checkpoint (default: random-init)")
    ap.add_argument("--quick", action="store_true", help="fewer shapes and repeats")
    ap.add_argument("--output", default=None)
    args = ap.parse_args()
    dev = torch.device(args.device)
    half = torch.bfloat16
    with tempfile.TemporaryDirectory() as tmp:
        path = args.snac or str(write_random_snac(tmp, seed=7))
        eager32 = load_snac(path, device=dev, noise=False, fused_snake=False)
        eager16 = load_snac(path, device=dev, dtype=half, noise=False)
        graph16 = load_snac(path, device=dev, dtype=half, noise=False, graphs=64)
        seeded_e = load_snac(path, device=dev, dtype=half, noise=True, seed=3)
        seeded_g = load_snac(path, device=dev, dtype=half, noise=True, seed=3, graphs=64)
    frames, first, steps = 19, 2, 75  # 19 frames hold 76 steps; the window is 75 of them
    keep = (6 * 512, 70 * 512)
    out: dict = {"device": str(torch.cuda.get_device_name(dev)) if dev.type == "cuda" else "cpu",
                 "fused_snake": graph16.fused_snake, "checks": {}, "timing": {}}
    checks = out["checks"]
    w = _windows(5, frames, 1)
    e = _call(eager16, w, keep, first, steps)
    g = [_call(graph16, w, keep, first, steps) for _ in range(3)]  # eager, capture, replay
    checks["graph_vs_eager_max_abs"] = max(float(np.abs(x - e).max()) for x in g)
    exact = _call(graph16, w[:4], keep, first, steps)  # 4 rows: a bucket of its own
    checks["padded_vs_exact_max_abs"] = float(np.abs(g[-1][:4] - exact).max())
    seeds = [5, None, 6, None, 7]
    se = _call(seeded_e, w, keep, first, steps, noise_seeds=seeds)
    sg = [_call(seeded_g, w, keep, first, steps, noise_seeds=seeds) for _ in range(3)]
    checks["seeded_graph_vs_eager_max_abs"] = max(float(np.abs(x[[0, 2, 4]] - se[[0, 2, 4]]).max())
                                                  for x in sg)
    f32 = _call(eager32, w, keep, first, steps)
    checks["bf16_vs_f32_signal_snr_db"] = min(_snr(e[r], f32[r]) for r in range(len(w)))
    if graph16.graphs is not None:
        r = graph16.graphs
        checks["graphs"] = {"captures": r.num_captures, "replays": r.num_replays,
                            "eager": r.num_eager}
    launches = {}
    for fused in (True, False):
        c = count_call_launches(eager16, _windows(13, frames, 2), keep, fused=fused)
        launches["fused" if fused else "torch_snake"] = {k: c[k] for k in
                                                         ("latents", "decode", "total")}
    out["launches"] = launches
    repeats = 5 if args.quick else 30
    for rows in ((1, 13) if args.quick else (1, 4, 13)):
        ws = _windows(rows, frames, 10 + rows)
        out["timing"][f"{rows}x{steps}"] = {
            name: round(_time(codec, ws, keep, first, steps, repeats), 3)
            for name, codec in (("eager32", eager32), ("eager16", eager16), ("graph16", graph16))}
    text = json.dumps(out, indent=2)
    print(text)
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
