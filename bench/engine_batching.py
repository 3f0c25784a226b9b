"""Torch backend: decode throughput vs batch size, and what the restricted LM head saves.

    python bench/engine_batching.py --quick [--output out.json]

Part 1 (tokens_per_s): a random Llama of >= 200M parameters with the real Orpheus vocabulary
(156,940 rows, tied head), B generations in B slots at different positions, timing whole
engine steps through TorchBackend (forward + constrained sampling), B in 1, 4, 16, 32.

Part 2 (lm_head_saving): the step time saved by computing only the legal head rows (4096 per
frame position, plus stop) instead of the full 156,940-row head, on the Orpheus-3B shapes:
one real-size decoder layer is timed and counted 28 times (the full 3B model in float32 does
not fit this machine's time budget), and both heads are timed at full size. Saving =
(full head - restricted head) / (28 x layer + full head). Everything is measured on this CPU,
side by side in one run; on a GPU the ratios differ (see BENCHMARKS.md).

Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orpheus_svc.core.batch import BatchState, TokenState  # noqa: E402
from orpheus_svc.core.request import GenerationRequest  # noqa: E402
from orpheus_svc.core.step import StepPlan, StepRow  # noqa: E402
from orpheus_svc.core.tokens import AUDIO_BASE, FRAME_TOKENS  # noqa: E402
from orpheus_svc.engine.model.llama import SlotLlama  # noqa: E402
from orpheus_svc.engine.model.sampling import constrained_logits, full_head_logits  # noqa: E402
from orpheus_svc.engine.torch.backend import TorchBackend  # noqa: E402
from orpheus_svc.models.demo import random_state_dict  # noqa: E402
from orpheus_svc.models.llama_config import orpheus_3b_spec  # noqa: E402

BATCHES = (1, 4, 16, 32)


def bench_spec():
    """~290M parameters: 12 layers of width 1024 plus the real 156,940-row embedding."""
    return dataclasses.replace(orpheus_3b_spec(), hidden_size=1024, intermediate_size=2816,
                               num_hidden_layers=12, num_attention_heads=16,
                               num_key_value_heads=4, head_dim=64, torch_dtype="float32")


def _batch(n: int, prompt_len: int) -> tuple[BatchState, list[StepRow]]:
    """n generations in slots 0..n-1 (gen id = slot), their counters and grammar state in a
    BatchState as the scheduler keeps them (core/batch.py), and their prefill rows."""
    batch, prefill = BatchState(n), []
    for i in range(n):
        req = GenerationRequest(session_id=f"s{i}", segment_index=0,
                                prompt_ids=tuple(128000 + (j % 200) for j in range(prompt_len + i)),
                                max_tokens=10_000)
        batch.attach(i, i, req, i, TokenState(0, None, 0, 0, False, ()))
        prefill.append(StepRow(gen_id=i, slot=i, request=req, seed=i, prefill=True,
                               num_generated=0, last_token=None, position=0, frame_position=0,
                               stop_allowed=False))
    return batch, prefill


def _advance(batch: BatchState, res) -> None:
    """One sampled token per row, as the scheduler takes it (BatchState.advance: counts it;
    the grammar state the next row carries)."""
    slots = np.arange(len(batch.gen_id))
    batch.advance(slots, [res.tokens[int(s)][0] for s in slots])
    batch.stopped[:] = False  # a random model may stop: keep decoding, as a benchmark


def _decode(batch: BatchState) -> StepPlan:
    return StepPlan(0, decode=batch.rows(np.arange(len(batch.gen_id))))


def tokens_per_second(backend: TorchBackend, batch: int, steps: int) -> float:
    state, prefill = _batch(batch, prompt_len=40)
    _advance(state, backend.step(StepPlan(0, prefill=tuple(prefill))))
    for _ in range(3):  # warm-up
        _advance(state, backend.step(_decode(state)))
    t0 = time.perf_counter()
    for _ in range(steps):
        _advance(state, backend.step(_decode(state)))
    return batch * steps / (time.perf_counter() - t0)


def _time(fn, reps: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def head_saving(batch: int, reps: int) -> dict:
    spec = orpheus_3b_spec()
    h, g = spec.hidden_size, torch.Generator().manual_seed(0)
    head = torch.randn(spec.vocab_size, h, generator=g) * 0.02
    one_layer = dataclasses.replace(spec, num_hidden_layers=1, torch_dtype="float32")
    weights = {k: v.float() for k, v in random_state_dict(one_layer, 0, torch.float32).items()}
    weights["model.embed_tokens.weight"] = head  # share memory: the layer timing ignores it
    model = SlotLlama(one_layer, weights, num_slots=batch, max_seq_len=512)
    del weights
    slots = list(range(batch))
    model.prefill(slots, [[128000 + j for j in range(64)] for _ in slots])
    toks = [AUDIO_BASE + i for i in slots]
    positions = [64] * batch
    hidden = torch.randn(batch, h, generator=g)
    frame_pos = [i % FRAME_TOKENS for i in slots]
    layer_s = _time(lambda: model.decode(slots, toks, positions), reps)
    with torch.inference_mode():
        full_s = _time(lambda: full_head_logits(hidden, head), reps)
        restricted_s = _time(lambda: constrained_logits(hidden, head, frame_pos, [True] * batch), reps)
    body = spec.num_hidden_layers * layer_s
    return {
        "batch": batch,
        "layer_ms": layer_s * 1e3, "layers": spec.num_hidden_layers,
        "full_head_ms": full_s * 1e3, "restricted_head_ms": restricted_s * 1e3,
        "step_ms_full_head": (body + full_s) * 1e3,
        "step_ms_restricted_head": (body + restricted_s) * 1e3,
        "saving": (full_s - restricted_s) / (body + full_s),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps (< 3 minutes here)")
    ap.add_argument("--output", type=Path)
    args = ap.parse_args(argv)
    steps = 16 if args.quick else 48
    torch.manual_seed(0)
    spec = bench_spec()
    weights = random_state_dict(spec, 0, torch.float32)
    model = SlotLlama(spec, weights, num_slots=max(BATCHES), max_seq_len=256)
    del weights
    backend = TorchBackend(model)
    tps = {str(b): tokens_per_second(backend, b, steps) for b in BATCHES}
    del backend, model
    head = head_saving(batch=32, reps=3 if args.quick else 8)
    result = {
        "what": "torch backend decode tokens/s by batch (CPU, float32), restricted vs full LM head",
        "measured_on": f"CPU: {platform.processor() or platform.machine()}, "
                       f"{torch.get_num_threads()} torch threads",
        "model_parameters": spec.num_parameters(),
        "model": {"hidden": spec.hidden_size, "layers": spec.num_hidden_layers,
                  "vocab": spec.vocab_size, "tied_head": spec.tie_word_embeddings},
        "steps_per_batch": steps,
        "tokens_per_s": tps,
        "speedup_b32_vs_b1": tps["32"] / tps["1"],
        "lm_head_saving": head["saving"],
        "lm_head": head,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
