"""Decode attention over the KV slot pool whose cost follows each row's real length.

One query token per row, each row reading its own slot up to its own length:

    q      [B, heads, D]                      (row b's token, after RoPE)
    cache  [slots, kv_heads, max_seq_len, D]  (per layer, K and V; slot = row's slot)
    lens   [B]   keys 0..lens[b]-1 of slot slots[b] are attended (the new one included)

Flash decoding (split-K), written for this project in Triton, two launches with a fixed
grid (so a CUDA graph can hold them whatever the lengths):

  1. split   grid (B, kv_heads, SPLITS). Program (b, g, s) takes the `group` query heads
             that share kv head g (grouped-query attention: heads g*group .. g*group+group-1,
             padded to 16 rows for the tensor cores) and the s-th chunk of row b's keys:

                 chunk = round_up(ceil(len / SPLITS), BLOCK_N)
                 keys  [s*chunk, min((s+1)*chunk, len))      (empty: the program stores
                                                              a zero weight and returns)

             It streams K and V of that chunk once with an online softmax and stores the
             chunk's normalised output and its log-sum-exp.
  2. reduce  grid (B, heads): the SPLITS partial outputs weighted by exp(lse - max lse).
             With fp8=True (the o projection's FP8 W8A8 path takes a quantised input,
             engine/model/linear.py) grid (B,) instead: one program per row reduces each
             head in turn with the same arithmetic, keeps the row's bf16 outputs in
             registers and writes them quantised as well, (E4M3 [B, heads * D], float32
             scales [B, 1]) with the bits of fp8_kernels.quantize_rows_triton, so no
             quantisation kernel runs between attention and the o GEMM. B programs instead
             of B x heads: W8A8 buckets are the larger ones (engine/graph/fp8_paths.py),
             where B programs still fill the card; expected on an H200 (paper) about
             as long as the per-head reduce at B >= 64, while the kernel it removes costs
             a graph node (~2 us).

Work per row is proportional to its length (plus SPLITS x BLOCK_N at most), not to
max_seq_len; SPLITS is chosen per batch bucket so that small batches still spread over the
multiprocessors (splits_for). A row's chunks, and so the order its keys are summed in,
follow its length and SPLITS alone: the seeded rows' step (engine/model/invariant.py) uses
INVARIANT_SPLITS in every bucket, so a row's bits do not depend on the bucket it lands in.

`decode_attention_reference` is the same function in plain torch (a masked softmax over the
whole slot): the CPU path, and the check of the kernel (on a GPU, and on the CPU through
Triton's interpreter, TRITON_INTERPRET=1, in the tests).
"""

from __future__ import annotations

import logging
import math

import torch
import torch.nn.functional as F

from orpheus_svc.engine.model.fp8_kernels import quant_helpers
from orpheus_svc.engine.model.kv_fp8 import dequantize_kv, quantize_kv
from orpheus_svc.engine.model.linear import quantize_rows

log = logging.getLogger(__name__)

BLOCK_N = 64      # keys per inner iteration
GROUP_PAD = 16    # query rows per program (tl.dot needs >= 16)
MAX_SPLITS = 16
INVARIANT_SPLITS = 8  # every bucket's seeded step: enough to spread a lone row (splits_for)


def splits_for(batch: int, kv_heads: int, multiprocessors: int) -> int:
    """Key splits per row: enough programs for about two waves over the multiprocessors at
    small batches, one split once the batch alone fills them. A power of two, 1..16."""
    want = math.ceil(2 * multiprocessors / max(1, batch * kv_heads))
    return min(MAX_SPLITS, 1 << max(0, math.ceil(math.log2(max(1, want)))))


def decode_attention_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                               slots: torch.Tensor, lens: torch.Tensor, fp8: bool = False,
                               kv_scales=None):
    """[B, heads, D] -> [B, heads, D]: the module docstring's function in plain torch;
    fp8: (out, out's rows [B, heads * D] quantised by linear.quantize_rows). kv_scales
    (k_scale, v_scale) [slots, kv_heads]: E4M3 caches, dequantised by them (kv_fp8.py)."""
    out = _reference(q, k_cache, v_cache, slots, lens, kv_scales)
    return (out, quantize_rows(out.reshape(out.shape[0], -1))) if fp8 else out


def _reference(q, k_cache, v_cache, slots, lens, kv_scales=None):
    bsz, heads, d = q.shape
    kv_heads, span = k_cache.shape[1], k_cache.shape[2]
    group = heads // kv_heads
    keys, values = k_cache[slots], v_cache[slots]  # [B, kv_heads, span, D]
    if kv_scales is not None:
        keys = dequantize_kv(keys, kv_scales[0][slots].unsqueeze(-1)).to(q.dtype)
        values = dequantize_kv(values, kv_scales[1][slots].unsqueeze(-1)).to(q.dtype)
    mask = (torch.arange(span, device=q.device)[None, :] < lens[:, None])[:, None, None, :]
    # head kv * group + r reads kv head kv (Llama's repeat_kv order): [B, kv_heads, group, D]
    out = F.scaled_dot_product_attention(q.reshape(bsz, kv_heads, group, d), keys, values,
                                         attn_mask=mask)
    return out.reshape(bsz, heads, d)


_KERNELS = None


def _kernels():
    """The Triton kernels, compiled on first use (Triton is imported only here)."""
    # the quantisation's helpers as this module's globals (fp8_kernels._kernels says why)
    global _KERNELS, e4m3_bits, row_scale, e4m3_value, tl
    if _KERNELS is not None:
        return _KERNELS
    import triton
    import triton.language as tl

    e4m3_bits, row_scale = quant_helpers()

    @triton.jit
    def e4m3_value(bits):
        # E4M3fn bits (uint8, never NaN: the writes saturate at 448) -> float32, exactly,
        # by integer arithmetic (the interpreter's fp8 casts are not trusted here)
        b = bits.to(tl.int32)
        e = (b >> 3) & 0xF
        normal = ((b & 0x80) << 24) | ((e + 120) << 23) | ((b & 7) << 20)
        sub = (b & 7).to(tl.float32) * 0.001953125  # 2^-9
        sub = tl.where((b & 0x80) != 0, -sub, sub)
        return tl.where(e > 0, normal.to(tl.float32, bitcast=True), sub)

    @triton.jit
    def split_kernel(Q, K, V, Slots, Lens, MidO, MidL,
                     stride_qb, stride_qh, stride_ks, stride_kh, stride_kn,
                     stride_vs, stride_vh, stride_vn, stride_ob, stride_oh, stride_os,
                     stride_lb, stride_lh, sm_scale, KS, VS, stride_ss,
                     GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, D: tl.constexpr,
                     BLOCK_N: tl.constexpr, SPLITS: tl.constexpr, KV_FP8: tl.constexpr):
        b = tl.program_id(0)
        g = tl.program_id(1)
        s = tl.program_id(2)
        length = tl.load(Lens + b)
        slot = tl.load(Slots + b).to(tl.int64)
        chunk = tl.cdiv(tl.cdiv(length, SPLITS), BLOCK_N) * BLOCK_N
        start = s * chunk
        end = tl.minimum(start + chunk, length)
        r = tl.arange(0, GROUP_PAD)
        d = tl.arange(0, D)
        heads = g * GROUP + r
        rmask = r < GROUP
        q = tl.load(Q + b * stride_qb + heads[:, None] * stride_qh + d[None, :],
                    mask=rmask[:, None], other=0.0)
        m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
        l_i = tl.zeros([GROUP_PAD], tl.float32)
        acc = tl.zeros([GROUP_PAD, D], tl.float32)
        k_base = K + slot * stride_ks + g * stride_kh
        v_base = V + slot * stride_vs + g * stride_vh
        qk_scale = sm_scale
        if KV_FP8:  # the slot's K scale folds into the softmax scale (kv_fp8.py)
            qk_scale = sm_scale * tl.load(KS + slot * stride_ss + g)
        for n0 in range(start, end, BLOCK_N):
            n = n0 + tl.arange(0, BLOCK_N)
            nmask = n < end
            k = tl.load(k_base + n[:, None] * stride_kn + d[None, :], mask=nmask[:, None],
                        other=0.0)
            if KV_FP8:
                k = e4m3_value(k).to(q.dtype)
            qk = tl.dot(q, tl.trans(k)) * qk_scale
            qk = tl.where(nmask[None, :], qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(qk - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_base + n[:, None] * stride_vn + d[None, :], mask=nmask[:, None],
                        other=0.0)
            if KV_FP8:
                v = e4m3_value(v).to(q.dtype)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        filled = l_i > 0
        out = acc / tl.where(filled, l_i, 1.0)[:, None]
        if KV_FP8:  # the slot's V scale, once per output
            out = out * tl.load(VS + slot * stride_ss + g)
        lse = tl.where(filled, m_i + tl.log(tl.where(filled, l_i, 1.0)), float("-inf"))
        tl.store(MidO + b * stride_ob + heads[:, None] * stride_oh + s * stride_os + d[None, :],
                 out, mask=rmask[:, None])
        tl.store(MidL + b * stride_lb + heads * stride_lh + s, lse, mask=rmask)

    @triton.jit
    def reduce_kernel(MidO, MidL, Out, stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
                      stride_xb, stride_xh, D: tl.constexpr, SPLITS: tl.constexpr,
                      SPLITS_PAD: tl.constexpr):
        b = tl.program_id(0)
        h = tl.program_id(1)
        s = tl.arange(0, SPLITS_PAD)
        smask = s < SPLITS
        d = tl.arange(0, D)
        lse = tl.load(MidL + b * stride_lb + h * stride_lh + s, mask=smask, other=float("-inf"))
        w = tl.exp(lse - tl.max(lse, 0))  # split 0 is never empty (every length >= 1)
        o = tl.load(MidO + b * stride_ob + h * stride_oh + s[:, None] * stride_os + d[None, :],
                    mask=smask[:, None], other=0.0)
        out = tl.sum(o * w[:, None], 0) / tl.sum(w, 0)
        tl.store(Out + b * stride_xb + h * stride_xh + d, out.to(Out.dtype.element_ty))

    @triton.jit
    def reduce_fp8_kernel(MidO, MidL, Out, Q, S, stride_ob, stride_oh, stride_os, stride_lb,
                          stride_lh, stride_xb, stride_xh, stride_q, HEADS: tl.constexpr,
                          HEADS_PAD: tl.constexpr, D: tl.constexpr, SPLITS: tl.constexpr,
                          SPLITS_PAD: tl.constexpr):
        b = tl.program_id(0)
        s = tl.arange(0, SPLITS_PAD)
        smask = s < SPLITS
        d = tl.arange(0, D)
        hs = tl.arange(0, HEADS_PAD)
        row = tl.zeros([HEADS_PAD, D], tl.float32)  # the row's outputs as stored
        for h in range(HEADS):  # reduce_kernel's arithmetic, head by head
            lse = tl.load(MidL + b * stride_lb + h * stride_lh + s, mask=smask,
                          other=float("-inf"))
            w = tl.exp(lse - tl.max(lse, 0))
            o = tl.load(MidO + b * stride_ob + h * stride_oh + s[:, None] * stride_os
                        + d[None, :], mask=smask[:, None], other=0.0)
            out = (tl.sum(o * w[:, None], 0) / tl.sum(w, 0)).to(Out.dtype.element_ty)
            tl.store(Out + b * stride_xb + h * stride_xh + d, out)
            row = tl.where(hs[:, None] == h, out.to(tl.float32)[None, :], row)
        scale = row_scale(tl.max(tl.max(tl.abs(row), 1), 0))
        bits = e4m3_bits(tl.math.div_rn(row, scale))
        tl.store(Q + b * stride_q + hs[:, None] * D + d[None, :], bits.to(tl.uint8),
                 mask=hs[:, None] < HEADS)
        tl.store(S + b, scale)

    _KERNELS = (split_kernel, reduce_kernel, reduce_fp8_kernel)
    return _KERNELS


class DecodeAttention:
    """The kernels for one batch bucket: its scratch (partial outputs and log-sum-exps)
    allocated once, so the launches a CUDA graph records always see the same buffers."""

    def __init__(self, batch: int, heads: int, kv_heads: int, head_dim: int, splits: int,
                 device: torch.device, dtype: torch.dtype) -> None:
        if heads % kv_heads or heads // kv_heads > GROUP_PAD:
            raise ValueError(f"{heads} heads over {kv_heads} kv heads: groups of at most "
                             f"{GROUP_PAD} are supported")
        if head_dim < 16 or head_dim & (head_dim - 1):
            raise ValueError(f"head_dim {head_dim}: the kernel needs a power of two >= 16")
        self.batch, self.heads, self.kv_heads, self.head_dim = batch, heads, kv_heads, head_dim
        self.splits = splits
        self.mid_o = torch.empty((batch, heads, splits, head_dim), device=device,
                                 dtype=torch.float32)
        self.mid_l = torch.empty((batch, heads, splits), device=device, dtype=torch.float32)
        self.out = torch.empty((batch, heads, head_dim), device=device, dtype=dtype)
        # fp8=True: the output's rows quantised (module docstring)
        self.out_q = torch.empty((batch, heads * head_dim), device=device,
                                 dtype=torch.float8_e4m3fn)
        self.out_s = torch.empty((batch, 1), device=device, dtype=torch.float32)
        self.scale = 1.0 / math.sqrt(head_dim)

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 slots: torch.Tensor, lens: torch.Tensor, fp8: bool = False,
                 kv_scales=None):
        """q [batch, heads, D] (contiguous in its last dim); slots, lens int32 or int64 [batch]
        -> [batch, heads, D]; fp8: (that, its rows quantised) (module docstring).
        kv_scales (k_scale, v_scale) [slots, kv_heads]: E4M3 caches (kv_fp8.py)."""
        split_kernel, reduce_kernel, reduce_fp8_kernel = _kernels()
        b, splits = self.batch, self.splits
        mo, ml = self.mid_o, self.mid_l
        kv_fp8 = kv_scales is not None
        if kv_fp8:  # E4M3 caches read as their bits
            k_cache, v_cache = k_cache.view(torch.uint8), v_cache.view(torch.uint8)
            ks, vs = kv_scales
        else:  # placeholders the kernel never reads
            ks = vs = ml
        split_kernel[(b, self.kv_heads, splits)](
            q, k_cache, v_cache, slots, lens, mo, ml,
            q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
            mo.stride(0), mo.stride(1), mo.stride(2), ml.stride(0), ml.stride(1), self.scale,
            ks, vs, ks.stride(0),
            GROUP=self.heads // self.kv_heads, GROUP_PAD=GROUP_PAD, D=self.head_dim,
            BLOCK_N=BLOCK_N, SPLITS=splits, KV_FP8=kv_fp8, num_warps=4, num_stages=2)
        out = self.out
        pad = max(2, triton_next_pow2(splits))
        if fp8:
            qo, so = self.out_q, self.out_s
            reduce_fp8_kernel[(b,)](
                mo, ml, out, qo.view(torch.uint8), so, mo.stride(0), mo.stride(1),
                mo.stride(2), ml.stride(0), ml.stride(1), out.stride(0), out.stride(1),
                qo.stride(0), HEADS=self.heads, HEADS_PAD=triton_next_pow2(self.heads),
                D=self.head_dim, SPLITS=splits, SPLITS_PAD=pad, num_warps=4)
            return out, (qo, so)
        reduce_kernel[(b, self.heads)](
            mo, ml, out, mo.stride(0), mo.stride(1), mo.stride(2), ml.stride(0), ml.stride(1),
            out.stride(0), out.stride(1), D=self.head_dim, SPLITS=splits,
            SPLITS_PAD=pad, num_warps=4)
        return out


def triton_next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def triton_kernel_works(model) -> bool:
    """Whether the Triton decode attention compiles here for `model` (a SlotLlama: its
    shapes, device and dtype) and matches its reference on random data, its quantising
    reduce (fp8=True) linear.quantize_rows of its output bit for bit (the start-up check
    of kernel "auto"). A kernel that does not compile falls back to the torch reference with
    an error in the log; one that compiles and computes something else stops start-up: it
    must never serve."""
    spec, dev = model.spec, model.device
    b, seq = 3, 200
    try:
        gen = torch.Generator(device=dev).manual_seed(0)
        shape = (b + 1, spec.num_key_value_heads, seq, spec.head_dim)
        kc = torch.randn(shape, device=dev, generator=gen).to(model.dtype)
        vc = torch.randn(shape, device=dev, generator=gen).to(model.dtype)
        q = torch.randn((b, spec.num_attention_heads, spec.head_dim), device=dev,
                        generator=gen).to(model.dtype)
        slots = torch.tensor([3, 0, 1], device=dev)
        lens = torch.tensor([1, 77, seq], device=dev)
        att = DecodeAttention(b, spec.num_attention_heads, spec.num_key_value_heads,
                              spec.head_dim, 4, dev, model.dtype)
        got = att(q, kc, vc, slots, lens).float()
        out8, (q8, s8) = att(q, kc, vc, slots, lens, fp8=True)
        if getattr(model, "kv_fp8", False):  # the E4M3 cache's path (kv_fp8.py)
            scales = (torch.rand((b + 1, spec.num_key_value_heads), device=dev,
                                 generator=gen) + 0.5) / 100
            k8, v8 = quantize_kv(kc, scales[..., None]), quantize_kv(vc, scales[..., None])
            att8 = DecodeAttention(b, spec.num_attention_heads, spec.num_key_value_heads,
                                   spec.head_dim, 4, dev, model.dtype)  # att's out is got
            got_kv8 = att8(q, k8, v8, slots, lens, kv_scales=(scales, scales)).float()
    except Exception:  # noqa: BLE001 - any compile or launch failure
        log.exception("graph engine: the Triton decode attention kernel failed to run here; "
                      "using the torch reference attention (slower: its cost follows "
                      "max_seq_len, not each row's length)")
        return False
    ref = decode_attention_reference(q.float(), kc.float(), vc.float(), slots, lens)
    err = float((got - ref).norm() / ref.norm())
    if not err < 2e-2:
        raise RuntimeError(f"the Triton decode attention kernel disagrees with its reference "
                           f"(relative error {err:.3g}): refusing to serve with it")
    qr, sr = quantize_rows(out8.reshape(b, -1))
    err8 = float((out8.float() - ref).norm() / ref.norm())
    if not (err8 < 2e-2 and torch.equal(q8.view(torch.uint8), qr.view(torch.uint8))
            and torch.equal(s8, sr)):
        raise RuntimeError(f"the Triton decode attention's quantising reduce (fp8=True) "
                           f"disagrees with its reference (relative error {err8:.3g}) or "
                           f"quantises to other bits than torch: refusing to serve with it")
    if getattr(model, "kv_fp8", False):
        ref8 = decode_attention_reference(q.float(), k8, v8, slots, lens,
                                          kv_scales=(scales, scales))
        err_kv8 = float((got_kv8 - ref8).norm() / ref8.norm())
        if not err_kv8 < 2e-2:
            raise RuntimeError(f"the Triton decode attention over the FP8 KV cache disagrees "
                               f"with its reference (relative error {err_kv8:.3g}): refusing "
                               f"to serve with it")
    return True
