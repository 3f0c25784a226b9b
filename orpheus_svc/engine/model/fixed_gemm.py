"""A GEMM whose order of summation is fixed by construction: the matmuls of a batch-invariant
step on CUDA (engine/model/invariant.py), where cuBLAS would pick a kernel (tile, split-K)
by the batch's shape.

    y[m, n] = sum_k x[m, k] w_t[k, n]          (scaled: times sx[m] sw[n], the FP8 layers)

One Triton kernel with one tile shape for every call: grid (cdiv(M, BLOCK_M),
cdiv(N, BLOCK_N)); program (i, j) computes rows i*BLOCK_M .. and columns j*BLOCK_N .. by
walking K from 0 in BLOCK_K steps, each a tl.dot accumulated in float32, then the scales
and the cast. No split-K and no tile chosen by M, so a row's sum is the same sequence of
tile products whatever M is and wherever the row sits in its tile (the rows of a dot are
lanes of the same instructions; rows past M are loaded as zeros and never stored).

The operands are multiplied in their own dtype (bf16 or fp16; E4M3 x E4M3 for FP8 on
Hopper), never converted first: Triton's interpreter, which checks this kernel on the CPU
(tests/engine/test_invariant_kernels.py), has no bfloat16 dot. float32 operands are
multiplied in IEEE float32, not TF32.
"""

from __future__ import annotations

import torch

BLOCK_M = 32
BLOCK_N = 64
BLOCK_K = 64

_KERNEL = None


def _kernel():
    """The Triton kernel, compiled on first use (Triton is imported only here)."""
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["M"])
    def gemm_kernel(X, W, Y, SX, SW, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn,
                    stride_ym, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, SCALED: tl.constexpr, IEEE: tl.constexpr):
        i = tl.program_id(0)
        j = tl.program_id(1)
        m = i * BLOCK_M + tl.arange(0, BLOCK_M)
        n = j * BLOCK_N + tl.arange(0, BLOCK_N)
        mmask = m < M
        nmask = n < N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            kmask = k < K
            a = tl.load(X + m[:, None].to(tl.int64) * stride_xm + k[None, :] * stride_xk,
                        mask=mmask[:, None] & kmask[None, :], other=0.0)
            b = tl.load(W + k[:, None] * stride_wk + n[None, :].to(tl.int64) * stride_wn,
                        mask=kmask[:, None] & nmask[None, :], other=0.0)
            if IEEE:
                acc += tl.dot(a, b, input_precision="ieee")
            else:
                acc += tl.dot(a, b)
        if SCALED:
            sx = tl.load(SX + m, mask=mmask, other=0.0)
            sw = tl.load(SW + n, mask=nmask, other=0.0)
            acc = acc * sx[:, None] * sw[None, :]
        tl.store(Y + m[:, None].to(tl.int64) * stride_ym + n[None, :],
                 acc.to(Y.dtype.element_ty), mask=mmask[:, None] & nmask[None, :])

    _KERNEL = gemm_kernel
    return _KERNEL


def fixed_gemm(x: torch.Tensor, w_t: torch.Tensor, scale_x: torch.Tensor | None = None,
               scale_w: torch.Tensor | None = None,
               out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """x [M, K] @ w_t [K, N] (any strides; w_t is usually a weight's .T) -> [M, N] in
    `out_dtype` (default x's dtype); with scale_x [M] (or [M, 1]) and scale_w [N] (or
    [1, N]), float32, the product is scaled per row and column (module docstring)."""
    m, k = x.shape
    k2, n = w_t.shape
    if k != k2:
        raise ValueError(f"fixed_gemm: x is [{m}, {k}] but w_t is [{k2}, {n}]")
    if x.dtype != w_t.dtype:
        raise ValueError(f"fixed_gemm: operands of one dtype, got {x.dtype} and {w_t.dtype}")
    if (scale_x is None) != (scale_w is None):
        raise ValueError("fixed_gemm: both scales or neither")
    y = torch.empty((m, n), dtype=out_dtype or x.dtype, device=x.device)
    if m == 0:
        return y
    scaled = scale_x is not None
    sx = scale_x.reshape(-1).float().contiguous() if scaled else y
    sw = scale_w.reshape(-1).float().contiguous() if scaled else y
    grid = (-(-m // BLOCK_M), -(-n // BLOCK_N))
    _kernel()[grid](x, w_t, y, sx, sw, m, n, k, x.stride(0), x.stride(1), w_t.stride(0),
                    w_t.stride(1), y.stride(0), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                    BLOCK_K=BLOCK_K, SCALED=scaled, IEEE=x.dtype == torch.float32,
                    num_warps=4, num_stages=3)
    return y
