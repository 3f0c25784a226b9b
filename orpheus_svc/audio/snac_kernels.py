"""SNAC's Snake activation as one Triton kernel: y = x + sin(alpha x)^2 / alpha.

SNAC's decoder has 29 Snake layers (one before each of the 4 upsampling convs, two in each
of the 12 residual units, one before the output conv). Eager torch runs each as 5 kernels
(mul, sin, square, mul, add: codec._Snake), each reading and writing the whole activation,
the largest tensors of the decoder (64 channels x 512 samples per latent step at the last
stage). The fused kernel reads x once and writes y once, computing in float32 and rounding
once: 116 fewer launches per SNAC call and a fifth of the activation traffic of those layers.

    x  [B, C, T] contiguous        grid (B*C, cdiv(T, BLOCK)): one program per row block
    alpha, inv_alpha [C]           one scalar of each per program (the row's channel)

`fused_snake` is the CUDA path (codec._Snake calls it once `fused_snake_works` passed at
start-up); codec._Snake's torch arithmetic stays the CPU path and the reference, and the
tests run this kernel through Triton's interpreter (TRITON_INTERPRET=1).
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)

_KERNEL = None


def _kernel():
    """The jitted kernel, built on first use so that importing this module needs no Triton."""
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import triton
    import triton.language as tl

    @triton.jit
    def snake_kernel(X, Alpha, InvAlpha, Y, channels, length, BLOCK: tl.constexpr):
        row = tl.program_id(0)  # b * channels + c
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < length
        c = row % channels
        a = tl.load(Alpha + c).to(tl.float32)
        inv = tl.load(InvAlpha + c).to(tl.float32)
        base = row.to(tl.int64) * length
        x = tl.load(X + base + cols, mask=mask, other=0.0).to(tl.float32)
        s = tl.sin(a * x)
        y = x + s * s * inv
        tl.store(Y + base + cols, y.to(Y.dtype.element_ty), mask=mask)

    _KERNEL = snake_kernel
    return _KERNEL


def _block(length: int) -> int:
    """Columns per program: the row's length rounded up to a power of two, 64..1024 (few
    distinct values, so few compiled variants)."""
    return min(1024, max(64, 1 << max(0, (length - 1).bit_length())))


def fused_snake(x: torch.Tensor, alpha: torch.Tensor, inv_alpha: torch.Tensor) -> torch.Tensor:
    """x + sin(alpha x)^2 * inv_alpha for x [B, C, T], alpha and inv_alpha [1, C, 1]; a fresh
    tensor of x's dtype (inside a CUDA graph: from its pool)."""
    x = x.contiguous()
    b, c, t = x.shape
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y
    block = _block(t)
    _kernel()[(b * c, -(-t // block))](x, alpha.reshape(-1), inv_alpha.reshape(-1), y, c, t,
                                        BLOCK=block, num_warps=4 if block >= 512 else 2)
    return y


def snake_reference(x: torch.Tensor, alpha: torch.Tensor, inv_alpha: torch.Tensor) -> torch.Tensor:
    """The same function in float32 torch, rounded once to x's dtype: what the kernel computes."""
    xf = x.float()
    return (xf + torch.sin(alpha.float() * xf).square() * inv_alpha.float()).to(x.dtype)


def fused_snake_works(device: torch.device, dtype: torch.dtype, tolerance: float = 1e-2) -> bool:
    """Whether the kernel compiles on `device` and agrees with snake_reference on random data
    (the start-up check). A compile or launch failure returns False with the error in the
    log (the codec keeps the torch Snake: 5 kernels per layer); a kernel that computes
    something else raises, so that nothing serves with it."""
    g = torch.Generator(device=device).manual_seed(0)
    x = (3 * torch.randn((2, 5, 700), device=device, generator=g)).to(dtype)
    alpha = (torch.rand((1, 5, 1), device=device, generator=g) + 0.1).to(dtype)
    inv = (alpha.float() + 1e-9).reciprocal().to(dtype)
    try:
        got = fused_snake(x, alpha, inv)
    except Exception:  # noqa: BLE001 - any compile or launch failure
        log.exception("SNAC: the fused Triton Snake failed to run here; SNAC uses the torch "
                      "Snake (5 kernels per layer instead of 1)")
        return False
    want = snake_reference(x, alpha, inv)
    err = float((got.float() - want.float()).norm() / want.float().norm())
    if not err < tolerance:
        raise RuntimeError(f"the fused Triton Snake disagrees with torch (relative error "
                           f"{err:.3g}): refusing to serve with it")
    return True
