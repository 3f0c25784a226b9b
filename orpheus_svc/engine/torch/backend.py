"""The torch backend: one engine step = batched prefill of new generations + batched decode
of the others, each slot at its own position, then constrained per-row sampling."""

from __future__ import annotations

import logging
from typing import Sequence

import torch

from orpheus_svc.core.step import BackendCapabilities, StepPlan, StepResult, StepRow

from orpheus_svc.engine.model.device import fatal_if_device_lost
from orpheus_svc.engine.model.invariant import invariant_step
from orpheus_svc.engine.model.llama import SlotLlama
from orpheus_svc.engine.model.prefix_pool import PrefixPool
from orpheus_svc.engine.model.sampling import RowParams, SeenAudio, apply_repetition_penalty, constrained_logits, sample_rows

log = logging.getLogger(__name__)

def adapters_of(rows: Sequence[StepRow]) -> list[int] | None:
    """Each row's LoRA adapter slot, or None when every row runs on the base model."""
    out = [r.request.adapter for r in rows]
    return out if any(a >= 0 for a in out) else None


class TorchBackend:
    def __init__(self, model: SlotLlama, prefixes: PrefixPool | None = None) -> None:
        self.model = model
        self.prefixes = prefixes  # reference voices' KV (prefix_pool.py); None: no pool
        self.seen = SeenAudio(model.num_slots, model.device)
        # retry_safe: a step that raises can be re-run on a subset of its rows (EngineLoop
        # isolates the row that fails): prefill rewrites a slot from position 0, decode
        # rewrites the same KV position, and the seen-token marks are only set after
        # sampling succeeded.
        self.capabilities = BackendCapabilities(
            name="torch", num_slots=model.num_slots, max_seq_len=model.max_seq_len,
            retry_safe=True, max_adapters=model.lora.capacity if model.lora else 0,
            max_lora_rank=model.lora.rank if model.lora else 0,
            prefix_pool_tokens=prefixes.tokens if prefixes else 0)

    def release(self, gen_ids: Sequence[int]) -> list[int]:
        """Ended generations: nothing to free (KV is preallocated, reset at next prefill)."""
        return list(gen_ids)

    def close(self) -> None:
        """Nothing to stop: the model is freed with this object."""

    def write_adapter(self, slot: int, adapter) -> None:
        """Rewrite LoRA pool slot `slot` with `adapter` (None: clear it) in place
        (Backend.write_adapter; engine/model/lora.py LoraPool.write)."""
        try:
            self.model.lora.write(slot, adapter)
        except Exception as exc:
            fatal_if_device_lost(exc)
            raise

    def add_prefix(self, ids: Sequence[int]) -> None:
        """Backend.add_prefix: compute the prefix `ids` into the pool (PrefixPoolFull)."""
        try:
            self.prefixes.add(ids)
        except Exception as exc:
            fatal_if_device_lost(exc)
            raise

    def drop_prefix(self, ids: Sequence[int]) -> None:
        """Backend.drop_prefix: the pool lets the prefix go."""
        self.prefixes.drop(ids)

    def holds_prefix(self, ids: Sequence[int]) -> bool:
        return self.prefixes is not None and ids in self.prefixes.book

    def step(self, plan: StepPlan) -> StepResult:
        """A step that holds a seeded row runs batch-invariant, every row of it
        (StepPlan.seeded; engine/model/invariant.py); any other on the fast path."""
        try:
            with invariant_step(plan.seeded):
                return self._step(plan)
        except Exception as exc:
            fatal_if_device_lost(exc)  # a poisoned CUDA context fails every later step
            raise

    def _step(self, plan: StepPlan) -> StepResult:
        seeded = plan.seeded
        parts = []
        if plan.prefill:
            self.seen.reset([r.slot for r in plan.prefill])
            starts = [self._place_prefix(r) for r in plan.prefill]
            parts.append(self.model.prefill([r.slot for r in plan.prefill],
                                            [r.request.prompt_ids[s:]
                                             for r, s in zip(plan.prefill, starts)],
                                            [seeded] * len(plan.prefill),
                                            adapters_of(plan.prefill), starts))
        decode = sorted(plan.decode, key=lambda r: r.slot)  # contiguous slots read K/V as views
        if decode:
            parts.append(self.model.decode([r.slot for r in decode],
                                           [r.last_token for r in decode],
                                           [r.position for r in decode],
                                           [seeded] * len(decode), adapters_of(decode)))
        rows = plan.prefill + tuple(decode)
        if not rows:
            return StepResult()
        hidden = parts[0] if len(parts) == 1 else torch.cat(parts)
        tokens = self.sample(rows, hidden)
        return StepResult(tokens={r.gen_id: [t] for r, t in zip(rows, tokens)})

    def _place_prefix(self, row: StepRow) -> int:
        """Put a row's prompt prefix (GenerationRequest.prefix_len) into its slot: copied
        from the pool, or computed there in a call of its own when the pool does not hold
        it. Returns where the rest of the prompt starts (0: no prefix)."""
        n = row.request.prefix_len
        if not n:
            return 0
        ids = row.request.prompt_ids[:n]
        if self.prefixes is None or not self.prefixes.copy_into(ids, row.slot):
            # alone and padded as prefix_kv runs it: in a seeded (invariant) step the
            # same call, so the same bits as the pool's
            self.model.prefill([row.slot], [ids], [True])
        return n

    @torch.inference_mode()
    def sample(self, rows: Sequence[StepRow], hidden: torch.Tensor) -> list[int]:
        slots = [r.slot for r in rows]
        params = RowParams(
            positions=[r.frame_position for r in rows],
            stop_allowed=[r.stop_allowed for r in rows],
            temperature=[r.request.sampling.temperature for r in rows],
            top_p=[r.request.sampling.top_p for r in rows],
            repetition_penalty=[r.request.sampling.repetition_penalty for r in rows],
            seeds=[r.seed for r in rows],  # 64-bit: EngineLoop reduced them
            counters=[r.num_generated for r in rows],
        )
        logits = constrained_logits(hidden, self.model.lm_head, params.positions,
                                    params.stop_allowed)
        penalty = torch.as_tensor(params.repetition_penalty, dtype=torch.float32,
                                  device=logits.device)
        logits = apply_repetition_penalty(logits, self.seen.rows(slots, params.positions), penalty)
        tokens = sample_rows(logits, params)
        self.seen.mark(slots, tokens)
        return tokens
