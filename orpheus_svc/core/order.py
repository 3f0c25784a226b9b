"""The batch choice: which candidates run in a step, in the batch order (the sort keys of
core/scheduler_settings.py deadline_priority). Pure Python.

Within the batch size, prefill rows also fit the prefill token budget (the first always
goes, however long). When everything fits, everything runs, and no order is computed for
the decode rows (`all_fit`): the batch order cannot change who runs then.
"""

from __future__ import annotations

from typing import Callable

from .generation import Generation

# The key of one generation now (the scheduler binds its session and settings).
KeyFn = Callable[[Generation], tuple]


def choose(keyed: list[tuple[tuple, int, Generation]], max_batch_size: int,
           max_prefill_tokens: int, needs_prefill: Callable[[Generation], bool]
           ) -> tuple[list[Generation], list[Generation], list[Generation]]:
    """The step's rows from the candidates `keyed` as (key, gen_id, gen): sorted, then
    taken in order within max_batch_size and max_prefill_tokens. Returns the prefill rows,
    the decode rows (both in batch order) and the candidates left out."""
    keyed.sort()  # ties: submission order (gen ids are unique, so gens never compare)
    budget = max_prefill_tokens
    prefill, decode, left_out = [], [], []
    for _, _, gen in keyed:
        if len(prefill) + len(decode) >= max_batch_size:
            left_out.append(gen)
        elif not needs_prefill(gen):
            decode.append(gen)
        elif prefill and gen.request.prefill_tokens > budget:
            left_out.append(gen)
        else:
            budget -= gen.request.prefill_tokens
            prefill.append(gen)
    return prefill, decode, left_out


def all_fit(num_candidates: int, new: list[Generation], max_batch_size: int,
            max_prefill_tokens: int, key: KeyFn) -> list[Generation] | None:
    """When every candidate runs anyway (room for all `num_candidates` in the batch, and
    the prompts of `new`, those needing prefill, fit the prefill budget, or only one needs
    prefill): `new` in batch order (trtllm submits them in it). Else None."""
    if num_candidates > max_batch_size:
        return None
    if len(new) > 1:
        if sum(g.request.prefill_tokens for g in new) > max_prefill_tokens:
            return None
        new.sort(key=lambda g: (key(g), g.gen_id))
    return new
