"""The torch backend: one engine step = batched prefill of new generations + batched decode
of the others, each slot at its own position, then constrained per-row sampling."""

from __future__ import annotations

import torch

from orpheus_svc.core.generation import Generation
from orpheus_svc.core.scheduler import StepPlan, StepResult

from orpheus_svc.engine.torch.llama import SlotLlama
from orpheus_svc.engine.torch.sampling import RowParams, SeenAudio, apply_repetition_penalty, constrained_logits, sample_rows

_MASK64 = (1 << 64) - 1


class TorchBackend:
    name = "torch"
    # A step that raises can be re-run on a subset of its rows (EngineLoop isolates the row
    # that fails): prefill rewrites a slot from position 0, decode rewrites the same KV
    # position, and the seen-token marks are only set after sampling succeeded.
    retry_safe = True

    def __init__(self, model: SlotLlama) -> None:
        self.model = model
        self.seen = SeenAudio(model.num_slots, model.device)

    @property
    def num_slots(self) -> int:
        return self.model.num_slots

    @property
    def max_seq_len(self) -> int:
        return self.model.max_seq_len

    def release(self, gens: list[Generation]) -> None:
        """Cancelled generations: nothing to free (KV is preallocated, reset at next prefill)."""

    def step(self, plan: StepPlan) -> StepResult:
        parts = []
        if plan.prefill:
            self.seen.reset([g.slot for g in plan.prefill])
            parts.append(self.model.prefill([g.slot for g in plan.prefill],
                                            [g.request.prompt_ids for g in plan.prefill]))
        decode = sorted(plan.decode, key=lambda g: g.slot)  # contiguous slots read K/V as views
        if decode:
            parts.append(self.model.decode([g.slot for g in decode],
                                           [g.last_token for g in decode],
                                           [g.next_position for g in decode]))
        gens = plan.prefill + decode
        if not gens:
            return StepResult()
        hidden = parts[0] if len(parts) == 1 else torch.cat(parts)
        tokens = self.sample(gens, hidden)
        return StepResult(tokens={g.gen_id: [t] for g, t in zip(gens, tokens)})

    @torch.inference_mode()
    def sample(self, gens: list[Generation], hidden: torch.Tensor) -> list[int]:
        slots = [g.slot for g in gens]
        params = RowParams(
            positions=[g.frame_position for g in gens],
            stop_allowed=[g.stop_allowed for g in gens],
            temperature=[g.request.sampling.temperature for g in gens],
            top_p=[g.request.sampling.top_p for g in gens],
            repetition_penalty=[g.request.sampling.repetition_penalty for g in gens],
            seeds=[g.seed & _MASK64 for g in gens],  # EngineLoop already reduces them
            counters=[g.num_generated for g in gens],
        )
        logits = constrained_logits(hidden, self.model.lm_head, params.positions,
                                    params.stop_allowed)
        penalty = torch.as_tensor(params.repetition_penalty, dtype=torch.float32,
                                  device=logits.device)
        logits = apply_repetition_penalty(logits, self.seen.rows(slots, params.positions), penalty)
        tokens = sample_rows(logits, params)
        self.seen.mark(slots, tokens)
        return tokens
