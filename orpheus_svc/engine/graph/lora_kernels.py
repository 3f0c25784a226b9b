"""The gathered LoRA matmuls as Triton kernels (Punica's BGMV: each row reads its own
adapter's weights from the pool; engine/model/lora.py has the layout and the plain torch
functions these replace).

    shrink   grid (rows, S*R / BLOCK_N)   s[m, n] = sum_k x[m, k] a[idx[m], n, k]
    expand   grid (rows, out / BLOCK_N)   y[m, o] += sum_r s[m, j(o)*R + r] b[idx[m], o, r]

j(o) is the fused module an output column belongs to (q, k, v; gate, up), read from up to
two boundaries, so one expand launch covers every module of a fused projection whatever
its block size. A row on the base model (the pool's last, all-zero entry) loads and stores
nothing: its output is the base projection's, untouched. Sums are in float32; s is kept in
float32 between the two.

No host sync and no shape from the data: both run inside the graph engine's captured
step, and loading an adapter only rewrites the pool. Checked against the torch functions
at start-up (`lora_kernels_work`) and in the tests through Triton's interpreter.
"""

from __future__ import annotations

import logging
from typing import Sequence

import torch

log = logging.getLogger(__name__)

_KERNELS = None


def _kernels():
    """The Triton kernels, compiled on first use (Triton is imported only here)."""
    global _KERNELS
    if _KERNELS is not None:
        return _KERNELS
    import triton
    import triton.language as tl

    @triton.jit
    def shrink_kernel(X, Idx, A, S, stride_xm, stride_an, stride_ar, stride_sm, K, N, BASE,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        m = tl.program_id(0)
        n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        a_idx = tl.load(Idx + m).to(tl.int64)
        # the base model's rows read no weights: their bounds are 0 (a scalar bound, not a
        # scalar mask, which Triton's interpreter cannot combine with a block)
        k_end = tl.where(a_idx < BASE, K, 0)
        mask_n = n < tl.where(a_idx < BASE, N, 0)
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            mask_k = k < k_end
            x = tl.load(X + m * stride_xm + k, mask=mask_k, other=0.0).to(tl.float32)
            a = tl.load(A + a_idx * stride_an + n[:, None] * stride_ar + k[None, :],
                        mask=mask_n[:, None] & mask_k[None, :], other=0.0).to(tl.float32)
            acc += tl.sum(a * x[None, :], axis=1)
        tl.store(S + m * stride_sm + n, acc, mask=n < N)

    @triton.jit
    def expand_kernel(Y, S, Idx, B, stride_ym, stride_sm, stride_bn, stride_bo, OUT, R, BASE,
                      OFF1, OFF2, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr):
        m = tl.program_id(0)
        o = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        a_idx = tl.load(Idx + m).to(tl.int64)
        mask_o = o < tl.where(a_idx < BASE, OUT, 0)  # a base row: nothing loaded or stored
        r = tl.arange(0, BLOCK_R)
        mask_r = r < R
        j = (o >= OFF1).to(tl.int32) + (o >= OFF2).to(tl.int32)  # the module of column o
        s = tl.load(S + m * stride_sm + j[:, None] * R + r[None, :],
                    mask=mask_o[:, None] & mask_r[None, :], other=0.0)
        b = tl.load(B + a_idx * stride_bn + o[:, None] * stride_bo + r[None, :],
                    mask=mask_o[:, None] & mask_r[None, :], other=0.0).to(tl.float32)
        delta = tl.sum(s * b, axis=1)
        y = tl.load(Y + m * stride_ym + o, mask=mask_o, other=0.0).to(tl.float32)
        tl.store(Y + m * stride_ym + o, (y + delta).to(Y.dtype.element_ty), mask=mask_o)

    _KERNELS = (shrink_kernel, expand_kernel)
    return _KERNELS


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def triton_shrink(x: torch.Tensor, idx: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """s [M, S*R] float32 = each row x[m] times its adapter's A (engine/model/lora.py
    gather_shrink's function); `idx` maps the base model to the pool's last entry."""
    shrink_kernel, _ = _kernels()
    m, k = x.shape
    n = a.shape[1]
    s = torch.empty((m, n), device=x.device, dtype=torch.float32)
    block_n = min(64, _pow2(n))
    shrink_kernel[(m, -(-n // block_n))](x, idx, a, s, x.stride(0), a.stride(0), a.stride(1),
                                         s.stride(0), k, n, a.shape[0] - 1, BLOCK_N=block_n,
                                         BLOCK_K=64, num_warps=4)
    return s


def triton_expand(y: torch.Tensor, s: torch.Tensor, idx: torch.Tensor, b: torch.Tensor,
                  slices: Sequence[tuple[int, int]], rank: int) -> None:
    """y[m] += s[m]'s module parts times its adapter's B, in place (gather_expand's
    function); one launch for every module of the fused projection."""
    _, expand_kernel = _kernels()
    if len(slices) > 3:
        raise ValueError("the expand kernel fuses at most 3 modules")
    m, out = y.shape
    bounds = [off for off, _ in slices[1:]] + [out + 1] * (3 - len(slices))
    block_n = 128
    expand_kernel[(m, -(-out // block_n))](y, s, idx, b, y.stride(0), s.stride(0), b.stride(0),
                                           b.stride(1), out, rank, b.shape[0] - 1, bounds[0],
                                           bounds[1], BLOCK_N=block_n, BLOCK_R=_pow2(rank),
                                           num_warps=4)


def lora_kernels_work(pool, tolerance: float = 2e-2) -> bool:
    """Whether the kernels compile here and agree with the torch functions on the pool's
    shapes (random data): the graph engine's start-up check. A compile failure falls back
    to the gather path with the error in the log; a kernel that computes something else
    stops start-up."""
    from orpheus_svc.engine.model.lora import gather_expand, gather_shrink

    dev, dt = pool.device, pool.dtype
    g = torch.Generator(device=dev).manual_seed(0)
    a0, b0 = pool.a[0], pool.b[0]
    failures = []
    for name in ("qkv", "down"):
        a = torch.randn(a0[name].shape, device=dev, generator=g).to(dt)
        b = torch.randn(b0[name].shape, device=dev, generator=g).to(dt)
        a[-1].zero_()
        b[-1].zero_()
        rows = 5
        idx = torch.tensor([0, pool.capacity, pool.capacity - 1, 0, pool.capacity][:rows],
                           device=dev)
        x = torch.randn((rows, a.shape[2]), device=dev, generator=g).to(dt)
        y = torch.randn((rows, b.shape[1]), device=dev, generator=g).to(dt)
        try:
            s = triton_shrink(x, idx, a)
            got = y.clone()
            triton_expand(got, s, idx, b, pool.slices[name], pool.rank)
        except Exception:  # noqa: BLE001 - any compile or launch failure
            log.exception("graph engine: the LoRA Triton kernels failed to run here; adapters "
                          "use the gather path (slower)")
            return False
        ref_s = gather_shrink(x.float(), idx, a.float())
        ref = y.float().clone()
        gather_expand(ref, ref_s, idx, b.float(), pool.slices[name], pool.rank)
        err = float((got.float() - ref).norm() / ref.norm())
        if not err < tolerance:
            failures.append(f"{name}: relative error {err:.3g}")
    if failures:
        raise RuntimeError("the LoRA Triton kernels disagree with torch ("
                           + "; ".join(failures) + "): refusing to serve with them")
    return True
