"""Batch invariance: a row's bits do not depend on the rows that share its step.

A seeded session must give the same audio whether it runs alone or beside 200 others. Its
sampler is already per row (a counter-based uniform keyed by seed and token index), so what
can move its tokens is the arithmetic before it: a kernel whose order of summation depends
on the batch. Each piece is made invariant by construction, never by trusting which kernel
a library picks for a shape on one processor:

* GEMM (x @ W.T: every linear layer, the LM head, the stop logit, LoRA): a BLAS chooses its
  kernel, and so each row's order of summation, by the call's shape. MKL on one processor
  keeps a row's bits in every call whose M is a multiple of 4, and on another (AVX-512 with
  AMX) changes them from 9 rows up, and with two threads it splits one call's rows
  between them so that a row's place in the call moves its bits too. So inside an
  invariant step `rows_matmul` hands the BLAS nothing that depends on the batch: each row
  is a call of its own, [1, K] x [K, N], on a row of one fresh buffer whose rows start on
  a 64-byte boundary, into an output whose rows do too. A row's call is then the same call
  whatever shares its step (its values, its shape, its alignment): its bits are a function
  of its own values alone, whichever kernel the library picks for that shape and however
  it splits it. What it costs (bench/invariance_cost.py): a call per seeded step's row per
  GEMM, where one call did the whole batch.
* Attention (torch's SDPA): a batch attends over max(position) + 1 keys, which its
  batch-mates decide, and a row's output changes with that span even where the extra keys
  are masked: the flash kernel walks the keys in blocks of min(span, 512), so the span
  moves the block edges, and the math kernel (the one torch picks without AVX2) reduces
  the whole masked span, whose length moves the order of its sums. So in an invariant
  decode step `rows_attention` runs each row alone, over its own length rounded up to
  SPAN_BLOCK (at most the slot), from fresh copies of its query and keys: as with the
  GEMMs, a row's call is the same call whatever shares its step.
* Prefill: the same for the prompt length a batch is padded to, and for the prompts that
  share a call. Each invariant prompt is prefilled in a call of its own, padded to its own
  length rounded up to PROMPT_BLOCK.
* RMSNorm, softmax, top-k, sort, cumsum, elementwise ops: each row's reduction is its own
  (ATen reduces a row in one thread, split only across rows).

Which steps pay: only those holding a row whose session gave a seed (only such a session
can ask for the same audio twice). The backend runs such a step inside `invariant_step()`,
every row of it (core/step.py StepPlan.seeded): computing its seeded and unseeded rows
apart cost more (two forwards and token choices: x1.2-2.1 on the CPU, and on a GPU the
weights read twice) than the invariant path costs the unseeded rows. An unseeded step
takes exactly the path it always took. `gemm_rows_invariant()` is a self-check of this
module (tests/engine/test_invariance_everywhere.py runs it under every CPU kernel path the
machine has): it must pass everywhere, and a failure is a bug here, not a property of the
machine. On CUDA the graph engine keeps the same rule with kernels of its own
(engine/model/fixed_gemm.py, and engine/graph/attention.py's INVARIANT_SPLITS).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator, Sequence

import torch

# the self-check (gemm_rows_invariant) tries every place in batches of up to 2 x this
# + 8 rows, and the edges of such blocks in 257
SELF_CHECK_BLOCK = 16
SPAN_BLOCK = 512    # torch's CPU flash attention walks keys in blocks of 512 (docstring)
PROMPT_BLOCK = 32   # an invariant prompt is padded to its length rounded up to this


_INVARIANT = contextvars.ContextVar("invariant_step", default=False)


@contextlib.contextmanager
def invariant_step(on: bool = True) -> Iterator[None]:
    """Inside (`on`: the step holds a seeded row), every row's arithmetic is its own:
    rows_matmul's fixed-shape calls, and what asks in_invariant_step()."""
    token = _INVARIANT.set(on)
    try:
        yield
    finally:
        _INVARIANT.reset(token)


def in_invariant_step() -> bool:
    """Is the current step an invariant one (invariant_step)?"""
    return _INVARIANT.get()


def rows_matmul(x: torch.Tensor, w_t: torch.Tensor) -> torch.Tensor:
    """x [M, K] @ w_t [K, N]. Inside invariant_step a row's result does not depend on how
    many rows came with it or where it sits among them (module docstring): on CUDA through
    fixed_gemm's one tile shape; elsewhere as one GEMM call per row, each on a row of a
    fresh copy of x (the same alignment every time). Outside, the plain matmul."""
    if not _INVARIANT.get():
        return x @ w_t
    if x.device.type == "cuda":
        from orpheus_svc.engine.model.fixed_gemm import fixed_gemm
        return fixed_gemm(x, w_t)
    m, k = x.shape
    n = w_t.shape[1]
    # each row in its own [1, K] x [K, N] call, from a fresh buffer whose rows start on a
    # 64-byte boundary, into one whose rows do too: the call a row makes is the same
    # whatever shares its step (its values, its shape, its alignment)
    per = 64 // x.element_size()
    rows = x.new_zeros((m, -(-k // per) * per))
    rows[:, :k] = x
    out = x.new_empty((m, -(-n // per) * per))
    for r in range(m):
        torch.mm(rows[r:r + 1, :k], w_t, out=out[r:r + 1, :n])
    return out[:, :n]


def rows_attention(q: torch.Tensor, keys_of, pos: Sequence[int], cap: int, attend
                   ) -> torch.Tensor:
    """Decode attention of an invariant step (module docstring): q [B, ...] one query per
    row; keys_of(row, span) -> (keys, values) [1, kv_heads, span, d], fresh copies of the
    row's slot; attend(q, keys, values, mask) the kernel call ([1, ...] out). Each row
    attends alone over round_up(pos + 1, SPAN_BLOCK, cap) keys, from a fresh copy of its
    query: the call is the same whatever shares the step. [B, ...] out."""
    out = None
    for row, p in enumerate(pos):
        span = round_up(int(p) + 1, SPAN_BLOCK, cap)
        keys, values = keys_of(row, span)
        mask = (torch.arange(span, device=q.device) <= int(p))[None, None, None, :]
        o = attend(q[row:row + 1].clone(), keys, values, mask)
        if out is None:
            out = o.new_empty((q.shape[0], *o.shape[1:]))
        out[row] = o[0]
    return out


def round_up(n: int, block: int, cap: int) -> int:
    """n rounded up to a multiple of block, at most cap (cap >= n)."""
    return min(cap, -(-n // block) * block)


def prompt_groups(lengths: Sequence[int], invariant: Sequence[bool] | None, cap: int
                  ) -> list[tuple[list[int], int | None]]:
    """How a step's prompts are prefilled: [(prompt indices, padded length)], None = the
    longest of the group (the fast path); each invariant prompt in a call of its own,
    padded to its length rounded up to PROMPT_BLOCK (at most `cap`)."""
    if not invariant or not any(invariant):
        return [(list(range(len(lengths))), None)] if len(lengths) else []
    shared = [i for i in range(len(lengths)) if not invariant[i]]
    groups = [(shared, None)] if shared else []
    return groups + [([i], round_up(n, PROMPT_BLOCK, cap))
                     for i, n in enumerate(lengths) if invariant[i]]


def gemm_rows_invariant(device: torch.device | str = "cpu",
                        dtype: torch.dtype = torch.float32, k: int = 256, n: int = 96,
                        seed: int = 0) -> bool:
    """The self-check of rows_matmul (module docstring): does a row get the same bits for
    every batch size, at every place in the batch? Tries M = 1 .. 2 x SELF_CHECK_BLOCK + 8
    (every place), 64 (every place) and 257 rows (first, middle, last and the edges of a
    block), with random batch-mates; one column (the stop logit) too."""
    with invariant_step():
        return _probe(device, dtype, k, n, seed)


def _probe(device, dtype, k: int, n: int, seed: int) -> bool:
    gen = torch.Generator().manual_seed(seed)
    small = range(1, 2 * SELF_CHECK_BLOCK + 9)
    edges = (0, SELF_CHECK_BLOCK - 1, SELF_CHECK_BLOCK, 128, 255, 256)
    for cols in (n, 1):
        w_t = torch.randn((cols, k), generator=gen).to(device, dtype).T
        row = torch.randn((1, k), generator=gen).to(device, dtype)
        want = rows_matmul(row, w_t)[0]
        for m in (*small, 64, 257):
            for at in (range(m) if m <= 64 else edges):
                x = torch.randn((m, k), generator=gen).to(device, dtype)
                x[at] = row[0]
                if not torch.equal(rows_matmul(x, w_t)[at], want):
                    return False
    return True
