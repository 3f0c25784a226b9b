"""What the graph step's token choice costs on a card (engine/graph/choose.py): TorchChoice
(about 90 kernels) against TritonChoice (one) at 8 and 16 warps, each captured in a CUDA
graph as the step holds it, at several buckets, with every row sampling and with one row
in eight sampling (a bucket mostly of prompt tokens). Orpheus-3B shapes (hidden 3072, the
7 x 4096 audio rows and the stop row of the head), random bf16 logits and hidden states;
the audio GEMM is outside what is timed (both paths share it).

    PYTHONPATH=. python bench/choose_cost.py [--json out.json] [--buckets 1,8,64,256] [--reps 200]

Prints one JSON object: per (bucket, sampling share) the median replay time of each path in
microseconds and the share of sampling rows whose token the kernel and torch agree on
(float32 sums in different orders: a row within rounding of a boundary may differ).
"""

from __future__ import annotations

import argparse
import json
import statistics
from types import SimpleNamespace

import torch

from orpheus_svc.core.tokens import AUDIO_BASE, CODES_PER_POSITION, END_OF_SPEECH_ID, FRAME_TOKENS
from orpheus_svc.engine.graph.choose import TorchChoice, TritonChoice

HIDDEN = 3072
SLOTS = 300


def _inputs(bucket: int, every: int, dev):
    g = torch.Generator(device=dev).manual_seed(bucket * 10 + every)
    n = SLOTS + 1
    state = SimpleNamespace(
        seen=torch.rand((n, FRAME_TOKENS, CODES_PER_POSITION), device=dev, generator=g) < 0.05,
        params=torch.tensor([[0.6], [0.8], [1.1]], device=dev).repeat(1, n).contiguous(),
        seeds=torch.randint(0, 2**62, (n,), device=dev, generator=g),
        last_ids=torch.full((n,), AUDIO_BASE, dtype=torch.long, device=dev), dummy=SLOTS,
        true=torch.ones((), dtype=torch.bool, device=dev))
    hidden = torch.randn((bucket, HIDDEN), device=dev, generator=g).to(torch.bfloat16)
    audio = (torch.randn((bucket, FRAME_TOKENS * CODES_PER_POSITION), device=dev, generator=g)
             * 3).to(torch.bfloat16)
    ar = torch.arange(bucket, device=dev)
    rows = (ar % SLOTS, ar % FRAME_TOKENS, (ar % FRAME_TOKENS == 0).long(), ar * 7,
            (ar % every == 0).long())
    return hidden, audio, state, rows


def _time(choose, args, reps: int) -> tuple[float, torch.Tensor]:
    for _ in range(3):  # compile, plan
        choose(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ids = choose(*args)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times), ids.clone()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--buckets", default="1,8,64,256")
    ap.add_argument("--reps", type=int, default=200)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench/choose_cost.py measures a CUDA card; there is none here")
    dev = torch.device("cuda")
    lm_head = torch.randn((END_OF_SPEECH_ID + 1, HIDDEN), device=dev).to(torch.bfloat16)
    out = []
    with torch.inference_mode():
        for bucket in (int(b) for b in a.buckets.split(",")):
            for every in (1, 8):
                hidden, audio, state, rows = _inputs(bucket, every, dev)
                r = {"bucket": bucket, "sampling_share": 1 / every}
                results = {}
                for name, choice in (("torch", TorchChoice()), ("triton8", TritonChoice(8)),
                                     ("triton16", TritonChoice(16))):
                    s = SimpleNamespace(**{k: v.clone() if isinstance(v, torch.Tensor) else v
                                           for k, v in vars(state).items()})
                    r[f"{name}_us"], results[name] = _time(
                        choice.choose, (hidden, lm_head, audio, s, *rows), a.reps)
                picked = rows[-1] != 0
                r["agree"] = float((results["torch"] == results["triton8"])[picked]
                                   .float().mean())
                out.append(r)
                print(json.dumps(r), flush=True)
    doc = {"device": torch.cuda.get_device_name(dev), "runs": out}
    print(json.dumps(doc))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
