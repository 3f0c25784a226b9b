"""The model's weight matrices: kept in the model's dtype, or as FP8 (E4M3) with one scale per
output row (`model.quantization: fp8`).

FP8, as the TensorRT-LLM recipes do it without calibration data: each weight row w_j is
stored as q_j = round_e4m3(w_j / s_j) with s_j = max|w_j| / 448 (448 = E4M3's largest
finite value), quantised once at load from the bf16 checkpoint. Activations are quantised
the same way per token (row) at every matmul, so

    y[i, j] = sum_k x[i, k] w[j, k]  ~  sx_i * s_j * sum_k qx[i, k] q[j, k]

which is what torch._scaled_mm computes on CUDA with rowwise scales (scale_a [M, 1],
scale_b [1, N]; K and N multiples of 16) in one FP8 tensor-core GEMM with a bf16 result.
Elsewhere (the CPU, the tests) the same quantised operands are multiplied in float32: the
same function up to the order of the sums.

A layer's weight is read once per step whatever the batch, so at decode batch sizes FP8
halves the bytes a step moves (the floor in BENCHMARKS.md, "The graph engine").
"""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
# A row of zeros has no scale: any positive value keeps its zeros zero.
_MIN_SCALE = 1e-12

QUANTIZATIONS = ("none", "fp8")


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] -> (E4M3 [N, K], float32 scales [N, 1]) with x ~ q * scale per row."""
    xf = x.float()
    scale = (xf.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp_(min=_MIN_SCALE)
    return (xf / scale).clamp_(-FP8_MAX, FP8_MAX).to(FP8), scale


class Linear:
    """y = x @ w.T in the model's dtype (the reference, and `quantization: none`)."""

    quantization = "none"

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight  # [out, in]

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    @property
    def nbytes(self) -> int:
        return self.weight.numel() * self.weight.element_size()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.T


class Fp8Linear:
    """y = x @ w.T with w in E4M3 and one float32 scale per output row; x is quantised per
    row at each call (module docstring). Output in `out_dtype` (the model's dtype)."""

    quantization = "fp8"

    def __init__(self, weight: torch.Tensor, out_dtype: torch.dtype) -> None:
        k = weight.shape[1]
        if weight.device.type == "cuda" and (k % 16 or weight.shape[0] % 16):
            raise ValueError(f"fp8 weights need both dimensions divisible by 16 on CUDA "
                             f"(torch._scaled_mm), got {tuple(weight.shape)}")
        self.qweight, scale = quantize_rows(weight)  # [out, in] row-major: .T is column-major
        self.scale_row = scale.view(1, -1).contiguous()  # [1, out] as _scaled_mm's scale_b
        self.out_dtype = out_dtype
        self.on_cuda = weight.device.type == "cuda"
        # off CUDA: the float32 weight the quantised operands stand for, made once
        self._float = None if self.on_cuda else self.dequantized()

    @property
    def out_features(self) -> int:
        return self.qweight.shape[0]

    @property
    def nbytes(self) -> int:
        return self.qweight.numel() + self.scale_row.numel() * 4

    def dequantized(self) -> torch.Tensor:
        """The weight this layer really multiplies by, in float32 (for checks)."""
        return self.qweight.float() * self.scale_row.view(-1, 1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        qx, sx = quantize_rows(x2)
        if self.on_cuda:
            y = torch._scaled_mm(qx, self.qweight.T, scale_a=sx, scale_b=self.scale_row,
                                 out_dtype=self.out_dtype, use_fast_accum=True)
        else:  # the same quantised operands, multiplied in float32
            y = ((qx.float() * sx) @ self._float.T).to(self.out_dtype)
        return y.reshape(*shape[:-1], y.shape[-1])


def make_linear(weight: torch.Tensor, quantization: str, dtype: torch.dtype):
    """The layer for `weight` ([out, in], already in `dtype` on its device)."""
    if quantization == "none":
        return Linear(weight)
    if quantization == "fp8":
        return Fp8Linear(weight, dtype)
    raise ValueError(f"unknown quantization {quantization!r} (known: {', '.join(QUANTIZATIONS)})")
