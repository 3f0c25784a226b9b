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
halves the bytes a step moves, and with them the step's memory-bandwidth floor.

Two ways to multiply, chosen per row count (`Fp8Linear.paths`, set at start-up by the
graph engine: engine/graph/fp8_paths.py):

    "w8a8"         x quantised per row, then the FP8 x FP8 GEMM above (two kernels on CUDA:
                   the one-kernel quantisation of fp8_kernels.py, then _scaled_mm)
    "weight_only"  x as it is times the E4M3 weight up-cast in registers, the scales in the
                   epilogue (one Triton kernel on CUDA, fp8_kernels.py; up to
                   WEIGHT_ONLY_MAX_M rows): y ~ sum_k x[i, k] s_j q[j, k]

A batch-invariant step always takes "w8a8" (through fixed_gemm on CUDA), whatever the
row count, so a seeded row's bits do not depend on its batch.

On the W8A8 path the input may come already quantised, (qx, sx) with the bits of
`Fp8Linear.quantize`: the graph engine's fused kernels that produce a GEMM's input (the
norms, the SiLU-mul, the attention reduce) write it beside their output where
`takes_quantized` says the call will use it, so the call is the GEMM alone.
"""

from __future__ import annotations

import torch

from orpheus_svc.engine.model.fp8_kernels import (WEIGHT_ONLY_MAX_M, counter_slots,
                                                  fp8_kernels_work, quantize_rows_triton,
                                                  weight_only_gemm)
from orpheus_svc.engine.model.invariant import in_invariant_step, rows_matmul

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
# A row of zeros has no scale: any positive value keeps its zeros zero.
_MIN_SCALE = 1e-12

QUANTIZATIONS = ("none", "fp8")


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] -> (E4M3 [N, K], float32 scales [N, 1]) with x ~ q * scale per row.

    Five kernels: the row maxima (in float32), the scale, its floor, the division and the
    cast (the largest |x| / scale rounds to 448 at most, so nothing saturates). On CUDA
    Fp8Linear quantises its input with fp8_kernels.quantize_rows_triton instead: one
    kernel, the same bits."""
    amax = torch.linalg.vector_norm(x, float("inf"), dim=-1, keepdim=True,
                                    dtype=torch.float32 if x.element_size() < 8 else None)
    scale = amax.float().mul_(1.0 / FP8_MAX).clamp_(min=_MIN_SCALE)
    return torch.div(x, scale).to(FP8), scale


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

    def takes_quantized(self, m: int) -> bool:
        """Never: the input stays in the model's dtype (Fp8Linear.takes_quantized)."""
        return False

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        # rows_matmul: a row's bits do not depend on its batch (invariant.py)
        y = rows_matmul(x.reshape(-1, x.shape[-1]), self.weight.T)
        return y.reshape(*x.shape[:-1], y.shape[-1])


FP8_GEMMS = ("rowwise", "tensorwise")
FP8_PATHS = ("w8a8", "weight_only")


class Fp8Linear:
    """y = x @ w.T with w in E4M3 and one float32 scale per output row; x is quantised per
    row at each call, or not at all on the weight-only path (module docstring). Output in
    `out_dtype` (the model's dtype).

    gemm (CUDA): "rowwise" hands both scale vectors to torch._scaled_mm (CUTLASS's rowwise
    kernel); "tensorwise" multiplies the E4M3 operands with unit scales (cuBLASLt's FP8
    GEMM, bf16 out) and applies the row and column scales to the product afterwards. The
    same function either way; which is faster depends on the card. In a
    batch-invariant step (engine/model/invariant.py) the same operands and scales go
    through fixed_gemm instead, whose tile does not follow the batch."""

    quantization = "fp8"

    def __init__(self, weight: torch.Tensor, out_dtype: torch.dtype,
                 gemm: str = "rowwise") -> None:
        if gemm not in FP8_GEMMS:
            raise ValueError(f"unknown fp8 gemm {gemm!r} (known: {', '.join(FP8_GEMMS)})")
        self.gemm = gemm
        k = weight.shape[1]
        if weight.device.type == "cuda" and (k % 16 or weight.shape[0] % 16):
            raise ValueError(f"fp8 weights need both dimensions divisible by 16 on CUDA "
                             f"(torch._scaled_mm), got {tuple(weight.shape)}")
        self.qweight, scale = quantize_rows(weight)  # [out, in] row-major: .T is column-major
        self.scale_row = scale.view(1, -1).contiguous()  # [1, out] as _scaled_mm's scale_b
        self.out_dtype = out_dtype
        self.on_cuda = weight.device.type == "cuda"
        self._one = torch.ones((), dtype=torch.float32, device=weight.device)
        # off CUDA: the float32 weight the quantised operands stand for, made once
        self._float = None if self.on_cuda else self.dequantized()
        # rows -> path (module docstring), written once at start-up by its owner's engine
        self.paths: dict[int, str] = {}
        # CUDA: the Triton quantisation and weight-only GEMM, when they pass their check
        self.triton = self.on_cuda and fp8_kernels_work(weight.device, out_dtype,
                                                         quantize_rows)
        self._counters = (torch.zeros(counter_slots(weight.shape[0]), dtype=torch.int32,
                                      device=weight.device) if self.triton else None)
        self._sms = (torch.cuda.get_device_properties(weight.device).multi_processor_count
                     if self.on_cuda else 0)

    @property
    def out_features(self) -> int:
        return self.qweight.shape[0]

    @property
    def nbytes(self) -> int:
        return self.qweight.numel() + self.scale_row.numel() * 4

    def dequantized(self) -> torch.Tensor:
        """The weight this layer really multiplies by, in float32 (for checks)."""
        return self.qweight.float() * self.scale_row.view(-1, 1)

    def path(self, m: int) -> str:
        """How a call of `m` rows multiplies outside a batch-invariant step: its entry in
        `paths` ("w8a8" where none)."""
        path = self.paths.get(m, "w8a8")
        return path if path == "w8a8" or self.weight_only_ok(m) else "w8a8"

    def weight_only_ok(self, m: int) -> bool:
        """Whether `m` rows can take the weight-only GEMM here."""
        return m <= WEIGHT_ONLY_MAX_M and (not self.on_cuda or self.triton)

    def takes_quantized(self, m: int) -> bool:
        """Whether a call of `m` rows here (in a batch-invariant step or not, as the caller
        is) multiplies a quantised input, so a producer may hand it over (module
        docstring)."""
        return in_invariant_step() or self.path(m) == "w8a8"

    def gpu_kernels(self, m: int, quantized: bool = False) -> int:
        """Kernels a call of `m` rows launches on CUDA outside a batch-invariant step (the
        graph's node count, engine/graph/nodes.py); `quantized`: its input comes quantised."""
        if self.path(m) == "weight_only":
            return 1
        quant = 0 if quantized else 1 if self.triton or not self.on_cuda else 5
        return quant + (3 if self.gemm == "tensorwise" else 1)

    def quantize(self, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x2 [M, K] -> (E4M3 [M, K], float32 [M, 1]): the W8A8 path's input, per row."""
        return quantize_rows_triton(x2) if self.triton else quantize_rows(x2)

    def __call__(self, x: torch.Tensor, q: tuple[torch.Tensor, torch.Tensor] | None = None
                 ) -> torch.Tensor:
        """y for x [..., K]; `q`: x's rows already quantised, as `quantize` gives them
        (used on the W8A8 path, where takes_quantized)."""
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        path = "w8a8" if in_invariant_step() else self.path(x2.shape[0])
        y = self.run(x2, path, q)
        return y.reshape(*shape[:-1], y.shape[-1])

    def run(self, x2: torch.Tensor, path: str,
            q: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """x2 [M, K] -> [M, N] by `path` (module docstring; "weight_only" needs
        weight_only_ok(M)); `q`: x2 quantised (__call__); timed as it is by
        engine/graph/fp8_paths.py."""
        if path == "weight_only":
            if self.on_cuda:
                return weight_only_gemm(x2, self.qweight, self.scale_row, self.out_dtype,
                                        self._counters, self._sms)
            # x as it is (in float32) times the weight the quantised operands stand for
            return rows_matmul(x2.float(), self._float.T).to(self.out_dtype)
        qx, sx = self.quantize(x2) if q is None else q
        if self.on_cuda and in_invariant_step():  # a batch-invariant step (invariant.py)
            from orpheus_svc.engine.model.fixed_gemm import fixed_gemm
            return fixed_gemm(qx, self.qweight.T, sx, self.scale_row, self.out_dtype)
        if self.on_cuda and self.gemm == "tensorwise":
            y = torch._scaled_mm(qx, self.qweight.T, scale_a=self._one, scale_b=self._one,
                                 out_dtype=self.out_dtype, use_fast_accum=True)
            return y.mul_(sx).mul_(self.scale_row)
        if self.on_cuda:
            return torch._scaled_mm(qx, self.qweight.T, scale_a=sx, scale_b=self.scale_row,
                                    out_dtype=self.out_dtype, use_fast_accum=True)
        # the same quantised operands, multiplied in float32
        return rows_matmul(qx.float() * sx, self._float.T).to(self.out_dtype)


def make_linear(weight: torch.Tensor, quantization: str, dtype: torch.dtype,
                fp8_gemm: str = "rowwise"):
    """The layer for `weight` ([out, in], already in `dtype` on its device)."""
    if quantization == "none":
        return Linear(weight)
    if quantization == "fp8":
        return Fp8Linear(weight, dtype, fp8_gemm)
    raise ValueError(f"unknown quantization {quantization!r} (known: {', '.join(QUANTIZATIONS)})")
