"""The FP8 layers' Triton kernels (engine/model/linear.py `Fp8Linear` on CUDA): the per-token
quantisation in one kernel, and the weight-only GEMM of small batches.

quantize_rows_triton(x) -> (E4M3 [M, K], float32 scales [M, 1])
    One program per row: the row's largest |x| in float32, scale = max(amax / 448, 1e-12),
    q = x / scale (IEEE division) cast to E4M3 with round-to-nearest-even; the same bits
    as linear.quantize_rows, whose five kernels (maximum, scale, clamp, an fp32 [M, K]
    division, cast) it replaces. The E4M3 bits are built by integer arithmetic
    (in the kernel), on the card as in Triton's interpreter, whose own fp32 -> E4M3
    conversion does not round to nearest: the code the tests check is the code the card
    runs, at about 20 integer operations an element (~1 us for 256 x 8192 on an H200,
    about the time its bytes take).

weight_only_gemm(x, qweight, scale_row, out_dtype, counters) -> [M, N]
    y[m, n] = scale[n] * sum_k x[m, k] q[n, k]: x stays in its dtype (bf16 on the card),
    each E4M3 weight tile is up-cast in registers (exact: every E4M3 value is a bf16 and
    an fp16 value) and multiplied by tl.dot in float32, and the per-channel scale is
    applied in the epilogue. A decode step's GEMMs at small M read the weight once and do
    little arithmetic, so their cost is the weight's bytes: half of bf16's, with no
    activation quantisation kernel before them.

    grid (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N), split):

        K:  |--- split 0 ---|--- split 1 ---| ... |--- split s-1 ---|   chunks of
                                                                        K_CHUNK, a
        program (i, j, s) sums its chunk into a float32 partial          multiple of
        tile; with split > 1 it stores it in a workspace                 BLOCK_K
        [split, tiles, BLOCK_M, BLOCK_N] and counts itself in
        counters[tile]; the last of a tile's programs to arrive adds the partials in
        split order 0 .. s-1 (so the sum's order is fixed), applies the scale, stores
        the output and sets the counter back to zero for the next call.

    Split-K fills the card at batch 1: the o and down projections have N = 3072, 48 column
    tiles for 132 multiprocessors, so their K is cut until there are at least two
    programs per multiprocessor. One kernel per GEMM either way: a CUDA graph node, no
    memset and no separate reduction. The counters (int32, zero between calls) belong to
    the caller, one buffer per layer (`counter_slots`).

Both are checked against the CPU path of Fp8Linear through Triton's interpreter
(tests/engine/test_fp8_kernels.py) and, on the card, at start-up (`fp8_kernels_work`).
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)

FP8_MAX = 448.0
MIN_SCALE = 1e-12
# The weight-only GEMM serves up to this many rows (the counters are sized for it); above
# it the activations are quantised and multiplied by _scaled_mm (W8A8).
WEIGHT_ONLY_MAX_M = 128
BLOCK_N = 64
BLOCK_K = 128
MAX_SPLIT = 16

_KERNELS = None


def _kernels():
    """The Triton kernels, compiled on first use (Triton is imported only here). The
    helpers a kernel calls are module globals, not closure variables: Triton's interpreter
    runs a kernel's source against its module's globals alone (and wants triton.language
    among them before a helper called from another module's kernel runs)."""
    global _KERNELS, e4m3_bits, row_scale, tl
    if _KERNELS is not None:
        return _KERNELS
    import triton
    import triton.language as tl

    @triton.jit
    def e4m3_bits(v):
        # float32 v (already divided by its row's scale, so |v| <= 448) -> the E4M3fn bits
        # of round-to-nearest-even(v), saturating at 448, in an int32 (integer arithmetic:
        # module docstring)
        u = v.to(tl.int32, bitcast=True)
        sign = (u >> 24) & 0x80
        a = u & 0x7FFFFFFF
        e = a >> 23
        # |v| >= 2^-6 (fp32 exponent field >= 121): keep 3 of 23 mantissa bits, rounding
        # to nearest even; a carry moves into the exponent. E4M3's bias is 7, fp32's 127.
        normal = ((a + 0x7FFFF + ((a >> 20) & 1)) >> 20) - (120 << 3)
        # |v| < 2^-6: a multiple of 2^-9, the 24-bit significand shifted right by 141 - e
        mant = (a & 0x7FFFFF) | 0x800000
        shift = tl.minimum(141 - e, 31)
        q = mant >> shift
        rem = mant - (q << shift)
        half = 1 << (shift - 1)
        up = (rem > half) | ((rem == half) & ((q & 1) == 1))
        bits = tl.where(e >= 121, tl.minimum(normal, 0x7E), q + up.to(tl.int32))
        return bits | sign

    @triton.jit
    def row_scale(amax):  # a row's scale from its largest |x| (float32)
        return tl.maximum(amax * (1.0 / 448.0), 1e-12)

    @triton.jit
    def quant_rows_kernel(X, Q, S, K, stride_x, stride_q, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        mask = cols < K
        x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        scale = row_scale(tl.max(tl.abs(x), 0))
        bits = e4m3_bits(tl.math.div_rn(x, scale))
        tl.store(Q + row * stride_q + cols, bits.to(tl.uint8), mask=mask)
        tl.store(S + row, scale)

    @triton.jit(do_not_specialize=["M"])
    def weight_only_kernel(X, W, S, Y, WS, CNT, M, N, K, K_CHUNK, stride_xm, stride_wn,
                           stride_ym, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr, SPLIT: tl.constexpr, IEEE: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        pid_k = tl.program_id(2)
        m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mmask = m < M
        nmask = n < N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        k_lo = pid_k * K_CHUNK
        for k0 in range(k_lo, k_lo + K_CHUNK, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            kmask = k < K
            a = tl.load(X + m[:, None].to(tl.int64) * stride_xm + k[None, :],
                        mask=mmask[:, None] & kmask[None, :], other=0.0)
            w = tl.load(W + n[:, None].to(tl.int64) * stride_wn + k[None, :],
                        mask=nmask[:, None] & kmask[None, :], other=0.0)
            b = tl.trans(w.to(a.dtype))  # E4M3 -> x's dtype: exact
            if IEEE:
                acc += tl.dot(a, b, input_precision="ieee")
            else:
                acc += tl.dot(a, b)
        scale = tl.load(S + n, mask=nmask, other=0.0)
        out = Y + m[:, None].to(tl.int64) * stride_ym + n[None, :]
        omask = mmask[:, None] & nmask[None, :]
        if SPLIT == 1:
            tl.store(out, (acc * scale[None, :]).to(Y.dtype.element_ty), mask=omask)
        else:
            tiles = tl.num_programs(0) * tl.num_programs(1)
            tile = pid_m * tl.num_programs(1) + pid_n
            offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
            tl.store(WS + (pid_k * tiles + tile).to(tl.int64) * (BLOCK_M * BLOCK_N) + offs, acc)
            tl.debug_barrier()  # every thread's partial stored before the count (release)
            arrived = tl.atomic_add(CNT + tile, 1, sem="acq_rel", scope="gpu")
            if arrived == SPLIT - 1:
                total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for s in tl.static_range(SPLIT):
                    total += tl.load(WS + (s * tiles + tile).to(tl.int64) * (BLOCK_M * BLOCK_N)
                                     + offs, cache_modifier=".cg")
                tl.store(out, (total * scale[None, :]).to(Y.dtype.element_ty), mask=omask)
                tl.store(CNT + tile, 0)

    _KERNELS = (quant_rows_kernel, weight_only_kernel, e4m3_bits, row_scale)
    return _KERNELS


def quant_helpers():
    """(e4m3_bits, row_scale): the @triton.jit pieces of quantize_rows_triton, for the
    kernels that quantise the rows they produce (engine/graph/fused.py, attention.py) with
    its bits: scale = row_scale(max |x|) over the row as rounded to its dtype, then
    e4m3_bits(div_rn(x, scale)) stored as uint8. Those kernels call them as globals of
    their own module (the interpreter's rule, _kernels)."""
    return _kernels()[2:]


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def quantize_rows_triton(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, K] (unit stride along K) -> (E4M3 [M, K], float32 scales [M, 1]): one kernel
    (module docstring), the bits of linear.quantize_rows."""
    quant_rows_kernel = _kernels()[0]
    m, k = x.shape
    q = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((m, 1), dtype=torch.float32, device=x.device)
    if m == 0:
        return q, scale
    if x.stride(1) != 1:
        x = x.contiguous()
    block = _pow2(k)
    quant_rows_kernel[(m,)](x, q.view(torch.uint8), scale, k, x.stride(0), q.stride(0),
                            BLOCK=block,
                            num_warps=8 if block > 2048 else 4)
    return q, scale


def block_m(m: int) -> int:
    """The row tile for M rows: tl.dot's smallest (16) up to 64."""
    return max(16, min(64, _pow2(m)))


def tiles(m: int, n: int) -> int:
    return -(-m // block_m(m)) * -(-n // BLOCK_N)


def counter_slots(n: int) -> int:
    """Counters a layer of N outputs needs for any M up to WEIGHT_ONLY_MAX_M."""
    return max(tiles(m, n) for m in (16, 32, 64, WEIGHT_ONLY_MAX_M))


def split_for(m: int, n: int, k: int, sms: int) -> tuple[int, int]:
    """(split, K_CHUNK): K cut in two until the grid has at least two programs per
    multiprocessor, each chunk at least two BLOCK_K steps, at most MAX_SPLIT chunks."""
    t = tiles(m, n)
    split = 1
    while t * split < 2 * sms and split < MAX_SPLIT and k >= 2 * split * 2 * BLOCK_K:
        split *= 2
    chunk = -(-(-(-k // split)) // BLOCK_K) * BLOCK_K
    return -(-k // chunk), chunk


def weight_only_gemm(x: torch.Tensor, qweight: torch.Tensor, scale_row: torch.Tensor,
                     out_dtype: torch.dtype, counters: torch.Tensor,
                     sms: int = 132) -> torch.Tensor:
    """x [M, K] (bf16, fp16 or float32; M <= WEIGHT_ONLY_MAX_M) times the E4M3 weight
    [N, K] (row-major) with its scales [1, N] -> [M, N] in `out_dtype` (module docstring).
    `counters`: int32, at least counter_slots(N), zero (each call leaves them so)."""
    kernel = _kernels()[1]
    m, k = x.shape
    n, k2 = qweight.shape
    if k != k2:
        raise ValueError(f"weight_only_gemm: x is [{m}, {k}] but the weight is [{n}, {k2}]")
    if m > WEIGHT_ONLY_MAX_M:
        raise ValueError(f"weight_only_gemm: {m} rows, more than {WEIGHT_ONLY_MAX_M}")
    y = torch.empty((m, n), dtype=out_dtype, device=x.device)
    if m == 0:
        return y
    if x.stride(1) != 1:
        x = x.contiguous()
    bm = block_m(m)
    grid_m, grid_n = -(-m // bm), -(-n // BLOCK_N)
    if counters.numel() < grid_m * grid_n:
        raise ValueError("weight_only_gemm: too few counters for this shape")
    split, chunk = split_for(m, n, k, sms)
    ws = (torch.empty((split, grid_m * grid_n, bm, BLOCK_N), dtype=torch.float32,
                      device=x.device) if split > 1 else y)
    kernel[(grid_m, grid_n, split)](
        x, qweight, scale_row, y, ws, counters, m, n, k, chunk, x.stride(0),
        qweight.stride(0), y.stride(0), BLOCK_M=bm, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        SPLIT=split, IEEE=x.dtype == torch.float32, num_warps=4, num_stages=4)
    return y


_WORKS: dict[str, bool] = {}


def fp8_kernels_work(device: torch.device, dtype: torch.dtype, quantize_rows) -> bool:
    """Whether both kernels compile on `device` and agree with the torch path on
    activations in `dtype`: the quant bit for bit with `quantize_rows` (linear.py's), the
    GEMM with the dequantised weight's product (the start-up check, once per device and
    dtype). A compile or launch failure leaves Fp8Linear on its torch path (W8A8 only)
    with an error in the log; a kernel that computes something else stops start-up.
    (Triton's interpreter has no bfloat16 dot: there the check runs in float16.)"""
    key = f"{device} {dtype}"
    if key in _WORKS:
        return _WORKS[key]
    g = torch.Generator(device=device).manual_seed(0)
    x = (torch.randn((5, 384), device=device, generator=g) * 3).to(dtype)
    w = torch.randn((200, 384), device=device, generator=g)
    qw, sw = quantize_rows(w)
    sw = sw.view(1, -1).contiguous()
    counters = torch.zeros(counter_slots(200), dtype=torch.int32, device=device)
    try:
        q, s = quantize_rows_triton(x)
        y = weight_only_gemm(x, qw, sw, torch.float32, counters, sms=64)
    except Exception:  # noqa: BLE001 - any compile or launch failure
        log.exception("fp8: the Triton quantisation and weight-only GEMM failed to run here; "
                      "the fp8 layers quantise with torch and multiply with _scaled_mm only")
        _WORKS[key] = False
        return False
    qr, sr = quantize_rows(x)
    if not (torch.equal(q.view(torch.uint8), qr.view(torch.uint8)) and torch.equal(s, sr)):
        raise RuntimeError("fp8: the Triton per-token quantisation gives other bits than "
                           "torch's: refusing to serve with it")
    ref = x.float() @ (qw.float() * sw.view(-1, 1)).T
    err = float((y - ref).norm() / ref.norm())
    if not err < 1e-3 or counters.any():
        raise RuntimeError(f"fp8: the weight-only GEMM disagrees with torch (relative error "
                           f"{err:.3g}): refusing to serve with it")
    _WORKS[key] = True
    return True
