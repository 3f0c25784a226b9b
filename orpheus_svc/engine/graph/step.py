"""The graph engine's decode step as device work only: no host sync, no shape that depends on
the data, so one CUDA graph per batch bucket can hold all of it (engine/graph/runner.py).

    inputs (device, one row per batch row; padded rows point at the dummy slot; rows.py)
      slots, pos, fpos, stop_ok, counter, token, sample, first, seed, adapter   int64 [B]
      temperature, top_p, repetition_penalty (a new prompt's, read where first)  float32 [B]
    device state (per KV slot, the dummy included)
      last_ids [S+1]        the token each slot feeds next (written by the step itself)
      seen     [S+1, 7, 4096]  audio ids the slot's generation emitted (repetition penalty)
      params   [3, S+1] rows.PARAM_ROWS (temperature, top_p, repetition_penalty); seeds
               [S+1] (set by a prompt's first
               row, in the step: start_prompts)

    forward   ids = token, or last_ids[slots] for a decode row; the Llama decode forward
              (SlotLlama's weights and arithmetic; RoPE, the K/V writes at (slot, pos),
              norms and SiLU fused where
              `ops` is fused.py's TritonOps; attention by `attend`, a length-aware kernel;
              each fused projection plus its rows' LoRA updates, engine/model/lora.py, when
              the model has an adapter pool: the adapter of each row is an input row, the
              weights are the pool's buffers, so neither changes the captured graph)
    choose    audio logits of every row's frame position from the 7 x 4096 audio rows of
              the head (one GEMM for all rows, then a gather), the stop logit where the
              grammar allows it, repetition penalty, temperature, top-p and the
              counter-based uniform (seed, counter): engine/model/sampling.py's functions
              (choose.py TorchChoice), or all of it after the GEMM in one kernel where
              `choice` is choose.py's TritonChoice, whose non-sampling rows end at once
    write     last_ids[slots] = ids, seen marks (rows that sample); ids -> the output buffer

The eager reference (engine/torch/backend.py) computes the same function with host-side
grouping; for the same seeds both choose the same tokens (tests/engine/test_graph_backend.py).
"""

from __future__ import annotations

from typing import Callable

import torch

from orpheus_svc.core.tokens import AUDIO_BASE, CODES_PER_POSITION, FRAME_TOKENS
from orpheus_svc.engine.graph.choose import TorchChoice, gather_logits
from orpheus_svc.engine.graph.fused import TorchOps
from orpheus_svc.engine.graph.rows import INPUT_ROWS
from orpheus_svc.engine.model.invariant import rows_matmul
from orpheus_svc.engine.model.llama import SlotLlama
from orpheus_svc.engine.model.lora import LoraRows
from orpheus_svc.engine.model.sampling import stop_logits

# attend(q [B, heads, D], k_cache, v_cache, slots [B], lens [B]) -> [B, heads, D]; with
# fp8=True: (that, its rows [B, heads * D] quantised as Fp8Linear.quantize does); with
# kv_scales=(k_scale, v_scale): the caches are E4M3 (engine/model/kv_fp8.py)
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                  torch.Tensor]
# The LoRA rows of a step from its adapter input row (GraphRunner decides how: grouped on
# the host off CUDA, indexed on the device inside a graph); None: no adapter pool.
MakeLora = Callable[[torch.Tensor], "LoraRows | None"]


class SlotState:
    """Per-slot device state of the graph engine (the table in the module docstring)."""

    def __init__(self, num_slots: int, device: torch.device) -> None:
        n = num_slots + 1  # + the dummy slot
        self.dummy = num_slots
        self.last_ids = torch.full((n,), AUDIO_BASE, dtype=torch.long, device=device)
        self.seen = torch.zeros((n, FRAME_TOKENS, CODES_PER_POSITION), dtype=torch.bool,
                                device=device)
        self.params = torch.ones((3, n), dtype=torch.float32, device=device)
        self.seeds = torch.zeros((n,), dtype=torch.long, device=device)
        self.true = torch.ones((), dtype=torch.bool, device=device)  # index_put_'s value


def decode_hidden(model: SlotLlama, ids: torch.Tensor, slots: torch.Tensor, pos: torch.Tensor,
                  attend: Attend, ops=TorchOps, lora: LoraRows | None = None) -> torch.Tensor:
    """Final-norm hidden state [B, hidden] of one token per row, fed at KV index pos of its
    slot (the new K/V are written there first, then attended with lens = pos + 1): the
    arithmetic of SlotLlama's decode, with its small operations from `ops` (fused.py) and
    each row's LoRA update from `lora`. An FP8 projection that multiplies a quantised
    input at B rows (Fp8Linear.takes_quantized) gets it from the operation that produces
    its input (`ops`' *_fp8 forms, attend(..., fp8=True)), not from a kernel of its own."""
    spec = model.spec
    eps, heads, kv_heads = spec.rms_norm_eps, spec.num_attention_heads, spec.num_key_value_heads
    bsz = ids.shape[0]
    lens = pos + 1
    layers = model.layers

    def fp8_input(name: str, li: int) -> bool:
        return li < len(layers) and layers[li][name].takes_quantized(bsz)

    def norm(x, delta, weight, fp8: bool):
        """(x + delta, its norm, the norm quantised or None); delta None: x, no add."""
        if delta is None:
            h, qh = ops.rms_norm_fp8(x, weight, eps) if fp8 else (ops.rms_norm(x, weight, eps),
                                                                  None)
            return x, h, qh
        if fp8:
            return ops.add_rms_norm_fp8(x, delta, weight, eps)
        return (*ops.add_rms_norm(x, delta, weight, eps), None)

    x = model.embed[ids]
    x, h, qh = norm(x, None, layers[0]["in_norm"], fp8_input("qkv", 0))
    proj = SlotLlama._proj
    for li, layer in enumerate(layers):
        kc, vc = model.k_cache[li], model.v_cache[li]
        # an FP8 KV cache's scales (engine/model/kv_fp8.py), passed only when there is one
        scaled = {} if not model.kv_fp8 else {"kv_scales": model.kv_scales(li)}
        q = ops.rope_qkv(proj(li, layer, "qkv", h, lora, qh), model.cos, model.sin, pos, slots,
                         kc, vc, heads, kv_heads, **scaled)
        if fp8_input("o", li):
            o, qo = attend(q, kc, vc, slots, lens, fp8=True, **scaled)
        else:
            o, qo = attend(q, kc, vc, slots, lens, **scaled), None
        o = o.reshape(bsz, -1)
        x, h, qh = norm(x, proj(li, layer, "o", o, lora, qo), layer["post_norm"],
                        fp8_input("gate_up", li))
        after = layers[li + 1]["in_norm"] if li + 1 < len(layers) else model.final_norm
        gate_up = proj(li, layer, "gate_up", h, lora, qh)
        up, qu = ops.silu_mul_fp8(gate_up) if fp8_input("down", li) else (ops.silu_mul(gate_up),
                                                                          None)
        x, h, qh = norm(x, proj(li, layer, "down", up, lora, qu), after, fp8_input("qkv", li + 1))
    return h


def audio_logits(model: SlotLlama, hidden: torch.Tensor) -> torch.Tensor:
    """[B, 7 * 4096] in the model's dtype: every row's logits over the 7 x 4096 audio rows of
    the head (one GEMM for all rows; each row's frame position is picked from it later)."""
    head = model.lm_head
    return rows_matmul(hidden, head[AUDIO_BASE:AUDIO_BASE + FRAME_TOKENS * CODES_PER_POSITION].T)


def step_logits(model: SlotLlama, hidden: torch.Tensor, fpos: torch.Tensor,
                stop_ok: torch.Tensor) -> torch.Tensor:
    """[B, 4097] float32: each row's audio logits at its frame position (one GEMM over the
    7 x 4096 audio rows of the head, then a gather) and its stop logit where allowed."""
    return gather_logits(audio_logits(model, hidden), stop_logits(hidden, model.lm_head), fpos,
                         stop_ok)


def choose_tokens(model: SlotLlama, state: SlotState, hidden: torch.Tensor, slots: torch.Tensor,
                  fpos: torch.Tensor, stop_ok: torch.Tensor, counter: torch.Tensor,
                  sample: torch.Tensor | None = None, choice=TorchChoice) -> torch.Tensor:
    """The token of every row (ids [B]), chosen on the device, and the slot state written:
    last_ids and the seen marks (not for the stop id, as the eager backend). `sample` (0/1
    per row, None = all): a row that does not sample (a prompt token before the last)
    writes no slot's state (TorchChoice writes the dummy slot's, TritonChoice none) and its
    id is meaningless. `choice`: choose.py's TorchChoice or TritonChoice (the same function;
    the kernel reads the audio GEMM's rows itself)."""
    return choice.choose(hidden, model.lm_head, audio_logits(model, hidden), state, slots, fpos,
                         stop_ok, counter, sample)


def start_prompts(state: SlotState, slots: torch.Tensor, first: torch.Tensor,
                  seed: torch.Tensor, params: torch.Tensor) -> None:
    """A new prompt's first row sets its slot's sampling state: the parameters ([3, B]:
    rows.PARAM_ROWS), the seed, no audio seen yet. Other rows write the dummy
    slot (no data-dependent shape: a graph can hold it)."""
    target = torch.where(first != 0, slots, torch.full_like(slots, state.dummy))
    state.params[:, target] = params
    state.seeds[target] = seed
    state.seen[target] = False


def decode_step(model: SlotLlama, state: SlotState, ints: torch.Tensor, floats: torch.Tensor,
                attend: Attend, out: torch.Tensor, ops=TorchOps,
                make_lora: MakeLora | None = None, choice=TorchChoice) -> None:
    """One step over the rows of `ints` ([10, B], rows.INPUT_ROWS) and `floats` ([3, B],
    rows.PARAM_ROWS): decode rows feed their slot's last id, prompt rows their own token;
    the chosen ids go to `out` ([B]). `ops` (fused.py) and `choice` (choose.py): torch or
    Triton."""
    row = dict(zip(INPUT_ROWS, ints.unbind(0)))
    slots = row["slots"]
    start_prompts(state, slots, row["first"], row["seed"], floats)
    ids = torch.where(row["token"] >= 0, row["token"], state.last_ids[slots])
    lora = make_lora(row["adapter"]) if make_lora is not None else None
    hidden = decode_hidden(model, ids, slots, row["pos"], attend, ops, lora)
    out.copy_(choose_tokens(model, state, hidden, slots, row["fpos"], row["stop_ok"],
                            row["counter"], row["sample"], choice))
