"""A step's tokens applied to the running generations: the scheduler's hot path. Pure
Python and numpy.

The decode rows' one token each (StepResult.decode_tokens) go through the batch arrays in
one call (core/batch.py BatchState.advance); tokens by gen_id (prefill rows, backends that
stream deltas) go the same way, one round per token index. Python work per row is left
only for the rows that complete a frame (one step in seven) or end. What comes out is the
step's progress: its frames per generation and its ends, not yet told to anyone (the
scheduler settles them: core/scheduler.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .batch import ERROR, REASONS, BatchState
from .generation import Generation
from .step import StepPlan, StepResult


def frozen(codes: np.ndarray) -> np.ndarray:
    codes.flags.writeable = False
    return codes


@dataclass
class Progress:
    """What one step's tokens did: per generation with new frames their codes ([n, 7],
    read-only; several rows merged when a row had several tokens), the generations that
    ended and why ("stop", "length", "error"), the tokens counted, the grammar breaks."""

    frames: list[tuple[Generation, np.ndarray]] = field(default_factory=list)
    ended: dict[Generation, str] = field(default_factory=dict)
    tokens: int = 0
    grammar_violations: int = 0


def in_flight_slots(batch: BatchState, plan: StepPlan | None) -> np.ndarray | None:
    """A bool per slot: the rows of `plan` (the step in flight) whose generation still
    holds its slot; None without a step in flight."""
    if plan is None or plan.empty:
        return None
    gen_ids = np.array([r.gen_id for r in plan.prefill] + plan.decode.gen_ids.tolist(),
                       np.int64)
    slots = np.array([r.slot for r in plan.prefill] + plan.decode.slots.tolist(), np.int64)
    flying = np.zeros(len(batch.gen_id), bool)
    flying[slots[batch.gen_id[slots] == gen_ids]] = True
    return flying


class StepTokens:
    """Applies StepResults to the batch rows (core/batch.py) of the generations in
    `by_slot`; both are the scheduler's, read and advanced here."""

    def __init__(self, batch: BatchState, by_slot: list[Generation | None]) -> None:
        self._batch = batch
        self._by_slot = by_slot

    def apply(self, plan: StepPlan, result: StepResult,
              running: dict[int, Generation]) -> tuple[Progress, list[Generation]]:
        """Advance every row of `plan` by its tokens in `result`; returns the progress and
        the generations that got their first token from result.tokens."""
        out = Progress()
        errors = result.errors
        decode = plan.decode
        if errors:
            in_plan = set(plan.gen_ids())
            for gen_id in errors:
                gen = running.get(gen_id)
                if gen is not None and gen_id in in_plan:
                    out.ended[gen] = "error"
        if result.decode_tokens is not None and len(decode):
            slots = decode.slots
            live = self._batch.gen_id[slots] == decode.gen_ids  # not ended since the plan
            if errors:
                live &= ~np.isin(decode.gen_ids, np.fromiter(errors, np.int64, len(errors)))
            tokens = np.asarray(result.decode_tokens, np.int64)
            if not live.all():
                slots, tokens = slots[live], tokens[live]
            self._advance(out, slots, tokens)
        started: list[Generation] = []
        if result.tokens and self._advance_by_id(out, plan, result, running, started) > 1:
            # several tokens per row: a row may have several frames
            merged: dict[Generation, list[np.ndarray]] = {}
            for gen, codes in out.frames:
                merged.setdefault(gen, []).append(codes)
            out.frames = [(g, frozen(np.concatenate(c))) for g, c in merged.items()]
        return out, started

    def _advance_by_id(self, out: Progress, plan: StepPlan, result: StepResult,
                       running: dict[int, Generation], started: list[Generation]) -> int:
        """result.tokens (0..n per row, by gen_id) for the plan's rows: token i of every
        row that has one, as one batch call per i, until each row ends or runs out.
        Returns the number of rounds."""
        tokens_of, errors = result.tokens, result.errors
        ids = [r.gen_id for r in plan.prefill]
        if result.decode_tokens is None:
            ids += plan.decode.gen_ids.tolist()
        rows = []
        for gen_id in ids:
            toks = tokens_of.get(gen_id)
            gen = running.get(gen_id)
            if toks and gen is not None and gen_id not in errors:
                if not gen.num_generated:
                    started.append(gen)
                rows.append((gen.slot, toks))
        i = 0
        while rows:
            ended = self._advance(out, np.fromiter((s for s, _ in rows), np.int64, len(rows)),
                                  np.fromiter((t[i] for _, t in rows), np.int64, len(rows)))
            i += 1
            rows = [(s, t) for s, t in rows if len(t) > i and s not in ended]
        return i

    def _advance(self, out: Progress, slots: np.ndarray, tokens: np.ndarray) -> set[int]:
        """One token for each row of `slots`; records frames and ends; returns the slots
        that ended."""
        adv = self._batch.advance(slots, tokens)
        out.tokens += len(slots)
        by_slot = self._by_slot
        if len(adv.complete):
            codes = frozen(adv.codes)
            out.frames.extend(
                (by_slot[s], codes[j:j + 1])
                for j, s in enumerate(slots[adv.complete].tolist()))
        if not len(adv.ended):
            return set()
        ended = slots[adv.ended].tolist()
        for slot, reason in zip(ended, adv.reasons.tolist()):
            out.ended[by_slot[slot]] = REASONS[reason]
            if reason == ERROR:
                out.grammar_violations += 1
        return set(ended)
