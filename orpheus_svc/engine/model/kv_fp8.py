"""The FP8 KV cache (engine.kv_cache_dtype = fp8, graph engine): K and V stored as E4M3
with one float32 scale per (slot, kv head) and layer, for K and for V.

    k_cache[li]  E4M3  [slots, kv_heads, max_seq_len, D]   stored = e4m3(k / k_scale)
    k_scale[li]  fp32  [slots, kv_heads]                    k ~= stored * k_scale
    (v likewise)

Why one scale per (slot, kv head): the decode attention's split program (b, g) reads one
slot's one kv head, so its scale is a scalar there. It folds into the softmax scale for K
and multiplies the program's output once for V; the inner loop only up-casts E4M3 to the
query's dtype (exact). Finer scales (per key, per channel) would cost a multiply per
element and a scale load per key in that loop.

Where the scales come from (calibration, `calibration_amax`): once at start-up, a
seeded prompt of CALIBRATION_TOKENS random token ids is prefilled in the model dtype, and
each (layer, kv head)'s largest |K| and |V| over it, times HEADROOM (2), is what 448 (the
largest E4M3 value) stands for. Every slot starts with that value and keeps it: no
per-request calibration, and no reduction over a prompt before its K/V are written (the
graph engine writes a prompt's K/V token by token, as rows of its steps, engine/graph/
rows.py). A K or V element beyond the headroom is clamped to +-448 x scale (counted
nowhere). The [slots, kv_heads] layout leaves room for scales set per slot.

Error: E4M3 keeps 3 mantissa bits, so each stored element is within 2^-4 of its value
(relative, round to nearest) where |x / scale| >= 2^-6, and within 2^-10 x scale (absolute)
below; the attention output, an average of V rows weighted by a softmax of q.K, moves by
about that relative error too (tests/engine/test_kv_fp8.py states the bound it checks).
"""

from __future__ import annotations

import torch

FP8_MAX = 448.0
HEADROOM = 2.0
CALIBRATION_TOKENS = 64
MIN_SCALE = 1e-12
KV_DTYPES = ("auto", "fp8")


def quantize_kv(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [..., D] over scales broadcasting against x[..., 0] -> E4M3 (round to nearest even,
    clamped to +-448): the bits the Triton write (fused.py rope_qkv) stores."""
    return (x.float() / scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def dequantize_kv(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """E4M3 [..., D] and its scales (broadcasting against q[..., 0]) -> float32."""
    return q.float() * scale.unsqueeze(-1)


def scale_for(amax: torch.Tensor) -> torch.Tensor:
    """The scale whose 448 stands for HEADROOM x amax (float32)."""
    return torch.clamp(amax.float() * (HEADROOM / FP8_MAX), min=MIN_SCALE)
