"""The decode step's small operations, fused: one kernel where eager torch launches several.

A decode step at small batches is dominated by kernel count, not bytes: eager torch runs
about 40 kernels per layer (RMSNorm alone is 8: cast, square, mean, add, rsqrt, multiply,
cast, weight), 1,100 per step, and at a few microseconds each they are most of the step's
fixed cost, well above its memory-bandwidth floor at batch 1. Per layer the fused step runs:

    qkv GEMM -> rope_qkv (RoPE on q and k, k and v written into the slot's KV)
             -> attention (2 kernels) -> o GEMM -> add_rms_norm (residual + post-norm)
             -> gate/up GEMM -> silu_mul -> down GEMM -> add_rms_norm (residual + next norm)

Where the GEMM after a norm or the SiLU-mul takes the FP8 W8A8 path (engine/model/linear.py
`Fp8Linear.takes_quantized`), the `*_fp8` forms also return that GEMM's input quantised per
row, (E4M3 [B, n], float32 scales [B, 1]), with the bits of Fp8Linear's own quantisation:
the Triton kernels write it beside their output (one kernel, where the projection would
launch a quantisation kernel of its own), TorchOps quantises its result with torch.

Two implementations of the same functions: `TorchOps`, plain torch with the arithmetic of
engine/model/llama.py (the CPU path and the reference), and `TritonOps`, Triton kernels
written for this project (CUDA; checked against TorchOps at start-up, and in the tests
through Triton's interpreter). Each kernel computes in float32 and rounds once, where eager
torch rounds after each op, so their results differ in the last bits of bf16.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

from orpheus_svc.engine.model.fp8_kernels import quant_helpers
from orpheus_svc.engine.model.kv_fp8 import quantize_kv
from orpheus_svc.engine.model.linear import quantize_rows
from orpheus_svc.engine.model.llama import apply_rope, rms_norm

log = logging.getLogger(__name__)


class TorchOps:
    """The fused operations in plain torch, with SlotLlama's arithmetic."""

    name = "torch"

    rms_norm = staticmethod(rms_norm)

    @classmethod
    def add_rms_norm(cls, x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(x + delta, rms_norm(x + delta))."""
        x = x + delta
        return x, cls.rms_norm(x, weight, eps)

    @staticmethod
    def rope_qkv(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pos: torch.Tensor,
                 slots: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 heads: int, kv_heads: int, kv_scales=None) -> torch.Tensor:
        """RoPE on q and k at each row's position; k and v written at (slot, :, pos); q out
        as [B, heads, D]. kv_scales (k_scale, v_scale) [slots, kv_heads]: the caches are
        E4M3 and k, v are written quantised by their slot's scales (kv_fp8.py)."""
        bsz = qkv.shape[0]
        d = k_cache.shape[-1]
        q = qkv[:, :heads * d].view(bsz, heads, d)
        k = qkv[:, heads * d:(heads + kv_heads) * d].view(bsz, kv_heads, d)
        v = qkv[:, (heads + kv_heads) * d:].view(bsz, kv_heads, d)
        c, s = cos[pos].unsqueeze(1), sin[pos].unsqueeze(1)
        k = apply_rope(k, c, s)
        if kv_scales is not None:
            k, v = quantize_kv(k, kv_scales[0][slots]), quantize_kv(v, kv_scales[1][slots])
        k_cache[slots, :, pos] = k
        v_cache[slots, :, pos] = v
        return apply_rope(q, c, s).contiguous()

    @staticmethod
    def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up

    @classmethod
    def rms_norm_fp8(cls, x, weight, eps):
        """(rms_norm(x), its rows quantised: module docstring)."""
        h = cls.rms_norm(x, weight, eps)
        return h, quantize_rows(h)

    @classmethod
    def add_rms_norm_fp8(cls, x, delta, weight, eps):
        """(x + delta, h = rms_norm(x + delta), h's rows quantised)."""
        x, h = cls.add_rms_norm(x, delta, weight, eps)
        return x, h, quantize_rows(h)

    @classmethod
    def silu_mul_fp8(cls, gate_up):
        """(silu_mul(gate_up), its rows quantised)."""
        y = cls.silu_mul(gate_up)
        return y, quantize_rows(y)


_KERNELS = None


def _kernels():
    """The Triton kernels, compiled on first use (Triton is imported only here)."""
    # the quantisation's helpers as this module's globals (fp8_kernels._kernels says why)
    global _KERNELS, e4m3_bits, row_scale
    if _KERNELS is not None:
        return _KERNELS
    import triton
    import triton.language as tl

    e4m3_bits, row_scale = quant_helpers()

    @triton.jit
    def add_rms_kernel(X, Delta, W, Out, Q, S, stride_x, stride_d, stride_o, stride_q, n, eps,
                       HAS_DELTA: tl.constexpr, QUANT: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n
        x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0)
        if HAS_DELTA:
            d = tl.load(Delta + row * stride_d + cols, mask=mask, other=0.0)
            x = (x.to(tl.float32) + d.to(tl.float32)).to(X.dtype.element_ty)
            tl.store(X + row * stride_x + cols, x, mask=mask)  # the residual, in place
        xf = x.to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, 0) / n + eps)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        y = ((xf * rstd).to(X.dtype.element_ty).to(tl.float32) * w).to(Out.dtype.element_ty)
        tl.store(Out + row * stride_o + cols, y, mask=mask)
        if QUANT:  # y as stored, quantised (fp8_kernels.quantize_rows_triton's bits)
            yf = y.to(tl.float32)
            scale = row_scale(tl.max(tl.abs(yf), 0))
            bits = e4m3_bits(tl.math.div_rn(yf, scale))
            tl.store(Q + row * stride_q + cols, bits.to(tl.uint8), mask=mask)
            tl.store(S + row, scale)

    @triton.jit
    def rope_qkv_kernel(QKV, Cos, Sin, Pos, Slots, KC, VC, QOut, stride_qkv, stride_tab,
                        stride_ks, stride_kh, stride_kn, stride_vs, stride_vh, stride_vn,
                        stride_qb, stride_qh, KS, VS, stride_ss, HEADS: tl.constexpr,
                        KV_HEADS: tl.constexpr, D: tl.constexpr, KV_FP8: tl.constexpr):
        b = tl.program_id(0)
        h = tl.program_id(1)  # 0..HEADS-1: q heads; then kv heads
        half = tl.arange(0, D // 2)
        pos = tl.load(Pos + b)
        c1 = tl.load(Cos + pos * stride_tab + half).to(tl.float32)
        c2 = tl.load(Cos + pos * stride_tab + D // 2 + half).to(tl.float32)
        s1 = tl.load(Sin + pos * stride_tab + half).to(tl.float32)
        s2 = tl.load(Sin + pos * stride_tab + D // 2 + half).to(tl.float32)
        base = QKV + b * stride_qkv + h * D
        x1 = tl.load(base + half).to(tl.float32)
        x2 = tl.load(base + D // 2 + half).to(tl.float32)
        r1 = x1 * c1 - x2 * s1  # x * cos + rotate_half(x) * sin, rotate_half = (-x2, x1)
        r2 = x2 * c2 + x1 * s2
        if h < HEADS:
            out = QOut + b * stride_qb + h * stride_qh
            tl.store(out + half, r1.to(QOut.dtype.element_ty))
            tl.store(out + D // 2 + half, r2.to(QOut.dtype.element_ty))
        else:
            g = h - HEADS
            slot = tl.load(Slots + b).to(tl.int64)
            kdst = KC + slot * stride_ks + g * stride_kh + pos * stride_kn
            vsrc = QKV + b * stride_qkv + (HEADS + KV_HEADS + g) * D
            vdst = VC + slot * stride_vs + g * stride_vh + pos * stride_vn
            if KV_FP8:  # E4M3 bits of x / its slot's scale (kv_fp8.quantize_kv's)
                ks = tl.load(KS + slot * stride_ss + g)
                vs = tl.load(VS + slot * stride_ss + g)
                # k rounded to the qkv dtype first, as TorchOps' apply_rope leaves it
                k1 = r1.to(QKV.dtype.element_ty).to(tl.float32)
                k2 = r2.to(QKV.dtype.element_ty).to(tl.float32)
                tl.store(kdst + half, e4m3_bits(tl.math.div_rn(k1, ks)).to(tl.uint8))
                tl.store(kdst + D // 2 + half,
                         e4m3_bits(tl.math.div_rn(k2, ks)).to(tl.uint8))
                v1 = tl.load(vsrc + half).to(tl.float32)
                v2 = tl.load(vsrc + D // 2 + half).to(tl.float32)
                tl.store(vdst + half, e4m3_bits(tl.math.div_rn(v1, vs)).to(tl.uint8))
                tl.store(vdst + D // 2 + half,
                         e4m3_bits(tl.math.div_rn(v2, vs)).to(tl.uint8))
            else:
                tl.store(kdst + half, r1.to(KC.dtype.element_ty))
                tl.store(kdst + D // 2 + half, r2.to(KC.dtype.element_ty))
                tl.store(vdst + half, tl.load(vsrc + half))
                tl.store(vdst + D // 2 + half, tl.load(vsrc + D // 2 + half))

    @triton.jit
    def silu_mul_kernel(GU, Out, Q, S, stride_gu, stride_o, stride_q, n,
                        QUANT: tl.constexpr, BLOCK: tl.constexpr):
        # QUANT: one program per row (BLOCK >= n), which also quantises the row
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < n
        g = tl.load(GU + row * stride_gu + cols, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(GU + row * stride_gu + n + cols, mask=mask, other=0.0).to(tl.float32)
        y = (g * tl.sigmoid(g) * u).to(Out.dtype.element_ty)
        tl.store(Out + row * stride_o + cols, y, mask=mask)
        if QUANT:
            yf = y.to(tl.float32)
            scale = row_scale(tl.max(tl.abs(yf), 0))
            bits = e4m3_bits(tl.math.div_rn(yf, scale))
            tl.store(Q + row * stride_q + cols, bits.to(tl.uint8), mask=mask)
            tl.store(S + row, scale)

    _KERNELS = (add_rms_kernel, rope_qkv_kernel, silu_mul_kernel)
    return _KERNELS


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class TritonOps:
    """The fused operations as Triton kernels (module docstring). Outputs are fresh tensors
    (inside a CUDA graph they come from its pool); add_rms_norm updates x in place."""

    name = "triton"

    @staticmethod
    def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return TritonOps._norm(x, None, weight, eps, False)[0]

    @staticmethod
    def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        return x, TritonOps._norm(x, delta, weight, eps, False)[0]

    @staticmethod
    def rms_norm_fp8(x, weight, eps):
        h, q = TritonOps._norm(x, None, weight, eps, True)
        return h, q

    @staticmethod
    def add_rms_norm_fp8(x, delta, weight, eps):
        h, q = TritonOps._norm(x, delta, weight, eps, True)
        return x, h, q

    @staticmethod
    def _norm(x, delta, weight, eps, quant):
        add_rms_kernel = _kernels()[0]
        out = torch.empty_like(x)
        q, s = _quant_out(x, quant)
        n = x.shape[-1]
        add_rms_kernel[(x.shape[0],)](
            x, x if delta is None else delta, weight, out, q.view(torch.uint8), s, x.stride(0),
            0 if delta is None else delta.stride(0), out.stride(0), q.stride(0), n, eps,
            HAS_DELTA=delta is not None, QUANT=quant, BLOCK=_pow2(n),
            num_warps=8 if n > 2048 else 4)
        return out, ((q, s) if quant else None)

    @staticmethod
    def rope_qkv(qkv, cos, sin, pos, slots, k_cache, v_cache, heads, kv_heads,
                 kv_scales=None):
        rope_qkv_kernel = _kernels()[1]
        bsz, d = qkv.shape[0], k_cache.shape[-1]
        q = torch.empty((bsz, heads, d), device=qkv.device, dtype=qkv.dtype)
        fp8 = kv_scales is not None
        if fp8:  # E4M3 caches written as their bits
            k_cache, v_cache = k_cache.view(torch.uint8), v_cache.view(torch.uint8)
            ks, vs = kv_scales
        else:  # placeholders the kernel never reads
            ks = vs = cos
        rope_qkv_kernel[(bsz, heads + kv_heads)](
            qkv, cos, sin, pos, slots, k_cache, v_cache, q, qkv.stride(0), cos.stride(0),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), q.stride(0), q.stride(1),
            ks, vs, ks.stride(0), HEADS=heads, KV_HEADS=kv_heads, D=d, KV_FP8=fp8,
            num_warps=1)
        return q

    @staticmethod
    def silu_mul(gate_up):
        return TritonOps._silu_mul(gate_up, False)[0]

    @staticmethod
    def silu_mul_fp8(gate_up):
        return TritonOps._silu_mul(gate_up, True)

    @staticmethod
    def _silu_mul(gate_up, quant):
        silu_mul_kernel = _kernels()[2]
        bsz, n = gate_up.shape[0], gate_up.shape[1] // 2
        out = torch.empty((bsz, n), device=gate_up.device, dtype=gate_up.dtype)
        q, s = _quant_out(out, quant)
        # quantised: the whole row in one program, for its largest |y|
        block = _pow2(n) if quant else 1024
        silu_mul_kernel[(bsz, -(-n // block))](
            gate_up, out, q.view(torch.uint8), s, gate_up.stride(0), out.stride(0),
            q.stride(0), n, QUANT=quant, BLOCK=block,
            num_warps=8 if block > 2048 else 4)
        return out, ((q, s) if quant else None)


def _quant_out(x: torch.Tensor, quant: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The E4M3 rows and float32 scales a kernel writes beside its output `x` (quant), or
    one-element placeholders it never touches."""
    rows, n = (x.shape[0], x.shape[-1]) if quant else (1, 1)
    return (torch.empty((rows, n), dtype=torch.float8_e4m3fn, device=x.device),
            torch.empty((rows, 1), dtype=torch.float32, device=x.device))


def triton_ops_work(model, tolerance: float = 2e-2) -> bool:
    """Whether TritonOps compile here and agree with TorchOps on random data shaped like
    `model` (a SlotLlama), the *_fp8 forms' quantised rows bit for bit with
    linear.quantize_rows of their output: the start-up check. A compile failure falls back to TorchOps with
    an error in the log; a kernel that computes something else stops start-up."""
    spec, dev, dt = model.spec, model.device, model.dtype
    g = torch.Generator(device=dev).manual_seed(0)
    h, d = spec.hidden_size, spec.head_dim
    heads, kvh = spec.num_attention_heads, spec.num_key_value_heads

    def rand(*shape):
        return torch.randn(shape, device=dev, generator=g).to(dt)
    x, delta, w = rand(3, h), rand(3, h), rand(h)
    qkv = rand(3, (heads + 2 * kvh) * d)
    cos, sin = model.cos, model.sin
    pos = torch.tensor([0, 5, cos.shape[0] - 1], device=dev)
    slots = torch.tensor([2, 0, 1], device=dev)
    kc, vc = rand(3, kvh, cos.shape[0], d), rand(3, kvh, cos.shape[0], d)
    kc2, vc2 = kc.clone(), vc.clone()
    gu = rand(3, 2 * spec.intermediate_size)
    try:
        got = [TritonOps.rms_norm(x, w, spec.rms_norm_eps),
               TritonOps.add_rms_norm(x.clone(), delta, w, spec.rms_norm_eps)[1],
               TritonOps.rope_qkv(qkv, cos, sin, pos, slots, kc, vc, heads, kvh),
               TritonOps.silu_mul(gu)]
        kv8 = getattr(model, "kv_fp8", False)
        if kv8:  # the quantising K/V write of an FP8 KV cache (kv_fp8.py)
            scales = (torch.rand((3, kvh), device=dev, generator=g) + 0.5) / 50
            k8a, v8a, k8b, v8b = (torch.zeros(kc.shape, device=dev, dtype=torch.float8_e4m3fn)
                                  for _ in range(4))
            TritonOps.rope_qkv(qkv, cos, sin, pos, slots, k8a, v8a, heads, kvh,
                               kv_scales=(scales, scales))
        quantised = [TritonOps.rms_norm_fp8(x, w, spec.rms_norm_eps),
                     TritonOps.add_rms_norm_fp8(x.clone(), delta, w, spec.rms_norm_eps)[1:],
                     TritonOps.silu_mul_fp8(gu)]
    except Exception:  # noqa: BLE001 - any compile or launch failure
        log.exception("graph engine: the fused Triton kernels failed to run here; the decode "
                      "step uses plain torch for them (more kernels per step)")
        return False
    ref = [TorchOps.rms_norm(x, w, spec.rms_norm_eps),
           TorchOps.add_rms_norm(x, delta, w, spec.rms_norm_eps)[1],
           TorchOps.rope_qkv(qkv, cos, sin, pos, slots, kc2, vc2, heads, kvh),
           TorchOps.silu_mul(gu)]
    pairs = list(zip(got, ref)) + [(kc, kc2), (vc, vc2)]
    names = ["rms_norm", "add_rms_norm", "rope_qkv", "silu_mul", "k cache", "v cache"]
    if kv8:
        TorchOps.rope_qkv(qkv, cos, sin, pos, slots, k8b, v8b, heads, kvh,
                          kv_scales=(scales, scales))
        pairs += [(k8a.float(), k8b.float()), (v8a.float(), v8b.float())]
        names += ["fp8 k cache", "fp8 v cache"]
    for name, (a, b) in zip(names, pairs):
        err = float((a.float() - b.float()).norm() / b.float().norm())
        if not err < tolerance:
            raise RuntimeError(f"the fused Triton kernel {name} disagrees with torch "
                               f"(relative error {err:.3g}): refusing to serve with it")
    for name, (out, (q, s)) in zip(("rms_norm_fp8", "add_rms_norm_fp8", "silu_mul_fp8"),
                                   quantised):
        qr, sr = quantize_rows(out)
        if not (torch.equal(q.view(torch.uint8), qr.view(torch.uint8)) and torch.equal(s, sr)):
            raise RuntimeError(f"the fused Triton kernel {name} quantises its output to other "
                               f"bits than torch: refusing to serve with it")
    return True
