"""Batch invariance: a row's bits do not depend on the rows that share its step (issue 33).

A seeded session must give the same audio whether it runs alone or beside 200 others. Its
sampler is already per row (a counter-based uniform keyed by seed and token index), so what
can move its tokens is the arithmetic before it: a kernel whose order of summation depends
on the batch. Measured on the CPU (torch 2.15, MKL and oneDNN, 2 threads; docs/api.md,
"Seeds"), for one row's result:

* GEMM (x @ W.T, every linear layer and the LM head): MKL computes rows in blocks of 4,
  and a row in a block of 4 gets the same bits whatever M is and wherever the block lies;
  a row in a tail of 1-3 rows (M = 1 is even a GEMV) takes another kernel and other bits.
  So every matmul pads its rows to a multiple of GEMM_ROW_BLOCK (`rows_matmul`): at most
  three zero rows, a copy of the input only when M is not a multiple already.
  `gemm_rows_invariant()` checks the property on the machine it runs on (the torch backend
  logs it at start-up, the tests assert it).
* Attention (torch's SDPA on the CPU, its flash kernel): a batch attends over
  max(position) + 1 keys, which its batch-mates decide, and a row's output changes with
  that span even where the extra keys are masked: the kernel walks the keys in blocks of
  min(span, 512), so the span moves the block edges. With a span that is a multiple of 512
  (or the slot's whole length) the edges are fixed: a row's blocks are the same, and the
  blocks past its length are fully masked, which adds exact zeros to the online softmax.
  So a step with an invariant row attends over its span rounded up to SPAN_BLOCK
  (`attention_span`); measured the same bits for 1 to 79 rows, spans 512 to 2048, K/V read
  through a view or gathered.
* Prefill: the same for the prompt length a batch is padded to. Invariant prompts are
  prefilled in groups padded to their own length rounded up to PROMPT_BLOCK.
* RMSNorm, softmax, top-k, sort, cumsum, elementwise ops: per row already (measured).

Which rows pay: invariance is kept for steps that hold a row whose session gave a seed
(only they can ask for the same audio twice): the backend runs such a step inside
`invariant_step()`. An unseeded step takes exactly the path it took before (padding a
single row to four made the CPU's batch-1 step 45% slower: MKL's GEMV beats its GEMM). On CUDA cuBLAS chooses its
kernel by shape and none of this holds; docs/api.md says where seeds hold.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator, Sequence

import torch

GEMM_ROW_BLOCK = 4  # MKL's row block: a row in a full block keeps its bits (module docstring)
SPAN_BLOCK = 512    # torch's CPU flash attention walks keys in blocks of 512 (docstring)
PROMPT_BLOCK = 32   # an invariant prompt is padded to its length rounded up to this


_INVARIANT = contextvars.ContextVar("invariant_step", default=False)


@contextlib.contextmanager
def invariant_step(on: bool = True) -> Iterator[None]:
    """Inside: rows_matmul pads (`on`: the step holds a row that must be invariant)."""
    token = _INVARIANT.set(on)
    try:
        yield
    finally:
        _INVARIANT.reset(token)


def padding_rows() -> bool:
    """Is the current step an invariant one (invariant_step)?"""
    return _INVARIANT.get()


def rows_matmul(x: torch.Tensor, w_t: torch.Tensor) -> torch.Tensor:
    """x [M, K] @ w_t [K, N]; inside invariant_step, on the CPU, with M padded to a multiple
    of GEMM_ROW_BLOCK (module docstring), so that a row's result does not depend on how
    many rows came with it or where it sits among them."""
    m = x.shape[0]
    rows = max(GEMM_ROW_BLOCK, -(-m // GEMM_ROW_BLOCK) * GEMM_ROW_BLOCK)
    if rows == m or x.device.type != "cpu" or not _INVARIANT.get():
        return x @ w_t
    padded = x.new_zeros((rows, x.shape[1]))
    padded[:m] = x
    return (padded @ w_t)[:m]


def round_up(n: int, block: int, cap: int) -> int:
    """n rounded up to a multiple of block, at most cap (cap >= n)."""
    return min(cap, -(-n // block) * block)


def attention_span(spans: Sequence[int], invariant: Sequence[bool] | None, cap: int) -> int:
    """The key span a decode step attends over: the longest row's (the fast path), or, when
    a row must be invariant, that rounded up to SPAN_BLOCK, at most `cap` (the slot)."""
    span = max(spans)
    if not invariant or not any(invariant):
        return span
    return round_up(span, SPAN_BLOCK, cap)


def prompt_groups(lengths: Sequence[int], invariant: Sequence[bool] | None, cap: int
                  ) -> list[tuple[list[int], int | None]]:
    """How a step's prompts are prefilled: [(prompt indices, padded length)], None = the
    longest of the group (the fast path); invariant prompts grouped by their length
    rounded up to PROMPT_BLOCK (at most `cap`)."""
    if not invariant or not any(invariant):
        return [(list(range(len(lengths))), None)] if len(lengths) else []
    groups: dict[object, list[int]] = {}
    for i, n in enumerate(lengths):
        groups.setdefault(round_up(n, PROMPT_BLOCK, cap) if invariant[i] else None,
                          []).append(i)
    return [(members, pad_to) for pad_to, members in groups.items()]


def gemm_rows_invariant(device: torch.device | str = "cpu",
                        dtype: torch.dtype = torch.float32, k: int = 256, n: int = 96,
                        seed: int = 0) -> bool:
    """Does a row of rows_matmul get the same bits for every batch size, at every place in
    the batch, on this machine? Tries M = 1 .. 24 (every place) and 33, 64 and 257 rows
    (first, middle, last), with random batch-mates; one column (the stop logit) too."""
    with invariant_step():
        return _probe(device, dtype, k, n, seed)


def _probe(device, dtype, k: int, n: int, seed: int) -> bool:
    gen = torch.Generator().manual_seed(seed)
    for cols in (n, 1):
        w_t = torch.randn((cols, k), generator=gen).to(device, dtype).T
        row = torch.randn((1, k), generator=gen).to(device, dtype)
        want = rows_matmul(row, w_t)[0]
        for m in (*range(1, 25), 33, 64, 257):
            for at in (range(m) if m <= 24 else (0, m // 2, m - 1)):
                x = torch.randn((m, k), generator=gen).to(device, dtype)
                x[at] = row[0]
                if not torch.equal(rows_matmul(x, w_t)[at], want):
                    return False
    return True
