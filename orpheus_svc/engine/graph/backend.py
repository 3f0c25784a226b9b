"""The graph engine as a backend (core/step.py): the torch Llama over the KV slot pool, its
decode step held in one CUDA graph per batch bucket, the token choice inside the graph, and
run-ahead (capabilities.runs_ahead: launch(plan) returns before the step's ids exist).

    launch(plan)   the decode rows and every new prompt's tokens (rows.py) queued on the
                   device as replays of the captured step; the decode rows' input tokens are
                   read on the device
                   (last_ids), so a plan whose decode rows carry last_token -1 (one made
                   while the step before it was in flight: Scheduler.schedule's in_flight)
                   is fine
    collect(l)     waits for that step's ids: tokens for prefill rows, decode_tokens
    step(plan)     collect(launch(plan)): what a caller that does not run ahead uses

Not retry_safe: a step writes device state (KV, last_ids, the seen marks) for every row at
once, so a failed step cannot be re-run on a subset. Per-row inputs cannot make it fail:
EngineLoop validates sampling parameters and prompt lengths at admission, and the scheduler
keeps every position inside the slot (core/prompt.py fit_to_slot).
"""

from __future__ import annotations

import logging
import time
from typing import Sequence

import numpy as np

from orpheus_svc.core.step import BackendCapabilities, StepPlan, StepResult
from orpheus_svc.engine.graph.clock import StepClock, StepMark
from orpheus_svc.engine.graph.rows import PrefillRow
from orpheus_svc.engine.graph.runner import GraphRunner, Launch
from orpheus_svc.engine.model.device import fatal_if_device_lost
from orpheus_svc.engine.model.invariant import invariant_step
from orpheus_svc.engine.model.sampling import int64_bits
from orpheus_svc.engine.model.llama import SlotLlama
from orpheus_svc.engine.model.prefix_pool import PrefixPool

log = logging.getLogger(__name__)

# How often the step timings (engine/graph/timing.py) go to the log while steps run.
TIMING_LOG_S = 10.0


class GraphBackend:
    def __init__(self, model: SlotLlama, max_batch_size: int, *, graphs: bool,
                 kernel: str = "auto", buckets: Sequence[int] | None = None,
                 fused: str = "auto", prefill_rows: int = 0,
                 prefixes: PrefixPool | None = None) -> None:
        """prefill_rows: prompt tokens a step's graphs hold beside the decode rows
        (engine.graph_prefill_rows); the scheduler's prefill budget is capped to it, so a
        step with new prompts is one replay (a lone longer prompt takes several). 0: the
        budget is capped to one slot's length instead, what the runner's staging holds
        beside the decode rows. prefixes: the reference voices' KV (prefix_pool.py); a
        request's prefix goes into its slot before its rows, which start after it (from
        the pool, or computed by the model's own prefill as the pool computes it). With an
        FP8 KV cache the model's prefill cannot write the slot: there the whole prompt is
        rows of the step and no pool is kept."""
        self.runner = GraphRunner(model, max_batch_size, graphs=graphs, kernel=kernel,
                                  buckets=buckets, fused=fused, prefill_rows=prefill_rows)
        self.model = model
        self.prefixes = None if model.kv_fp8 else prefixes
        self.clock = StepClock(model.device.type == "cuda")  # timing, from outside the runner
        self._in_flight = 0  # steps launched and not collected yet
        self.capabilities = BackendCapabilities(
            name="graph", num_slots=model.num_slots, max_seq_len=model.max_seq_len,
            runs_ahead=True, max_prefill_tokens=prefill_rows or model.max_seq_len,
            max_adapters=model.lora.capacity if model.lora else 0,
            max_lora_rank=model.lora.rank if model.lora else 0,
            prefix_pool_tokens=self.prefixes.tokens if self.prefixes else 0)

    def launch(self, plan: StepPlan) -> tuple[tuple[int, ...], Launch, StepMark]:
        """Queue the step; one that holds a seeded row runs batch-invariant, every row of
        it (StepPlan.seeded; GraphRunner._run)."""
        ahead = self._in_flight > 0  # launched before the step before it was read
        with self.runner.on_stream():  # the start event on the step's stream
            mark = self.clock.begin(ahead)
            try:
                starts = [self._place_prefix(r, plan.seeded) for r in plan.prefill]
                launched = self.runner.launch(_prefill_rows(plan, starts),
                                              _decode_rows(plan.decode), invariant=plan.seeded)
            except Exception as exc:
                fatal_if_device_lost(exc)  # a poisoned CUDA context fails every later step
                raise
        self.clock.launched(mark)
        self._in_flight += 1
        return tuple(r.gen_id for r in plan.prefill), launched, mark

    def collect(self, launched: tuple[tuple[int, ...], Launch, StepMark]) -> StepResult:
        prefill_ids, launch, mark = launched
        t0 = time.perf_counter()
        self._in_flight -= 1
        try:
            first, decode = self.runner.collect(launch)
        except Exception as exc:
            fatal_if_device_lost(exc)
            raise
        self.clock.collected(mark, launch, (time.perf_counter() - t0) * 1000)
        now = time.monotonic()
        if now - self.clock.times.started >= TIMING_LOG_S:
            log.info(self.clock.times.report(now))
        return StepResult(tokens={g: (int(t),) for g, t in zip(prefill_ids, first)},
                          decode_tokens=decode if launch.num_decode else None)

    def step(self, plan: StepPlan) -> StepResult:
        return self.collect(self.launch(plan))

    def release(self, gen_ids: Sequence[int]) -> list[int]:
        """Nothing to free: a slot's state is rewritten by its next prefill."""
        return list(gen_ids)

    def write_adapter(self, slot: int, adapter) -> None:
        """Rewrite LoRA pool slot `slot` with `adapter` (None: clear it) in place
        (Backend.write_adapter; engine/model/lora.py LoraPool.write)."""
        try:
            with self.runner.on_stream():  # in order with the steps that read the pool
                self.model.lora.write(slot, adapter)
        except Exception as exc:
            fatal_if_device_lost(exc)
            raise

    def add_prefix(self, ids: Sequence[int]) -> None:
        """Backend.add_prefix: compute the prefix `ids` into the pool (PrefixPoolFull)."""
        try:
            with self.runner.on_stream():  # in order with the steps that copy it
                self.prefixes.add(ids)
        except Exception as exc:
            fatal_if_device_lost(exc)
            raise

    def drop_prefix(self, ids: Sequence[int]) -> None:
        """Backend.drop_prefix: the pool lets the prefix go (a step queued before still
        copies what it held: the range is rewritten only by a later add, queued after)."""
        self.prefixes.drop(ids)

    def holds_prefix(self, ids: Sequence[int]) -> bool:
        return self.prefixes is not None and ids in self.prefixes.book

    def _place_prefix(self, row, seeded: bool) -> int:
        """Put a row's prompt prefix into its slot (torch/backend.py TorchBackend's rule:
        in a seeded step computed batch-invariant, as the pool computes it); returns where
        its rows start (0: no prefix, or an FP8 KV cache)."""
        n = row.request.prefix_len
        if not n or self.model.kv_fp8:
            return 0
        ids = row.request.prompt_ids[:n]
        if self.prefixes is None or not self.prefixes.copy_into(ids, row.slot):
            with invariant_step(seeded):
                self.model.prefill([row.slot], [ids], [True])
        return n

    def close(self) -> None:
        """Nothing to stop: graphs and buffers are freed with this object."""


def _prefill_rows(plan: StepPlan, starts: Sequence[int]) -> list[PrefillRow]:
    """The plan's new prompts as the runner's rows (rows.py), each from its start."""
    return [PrefillRow(slot=r.slot, prompt_ids=r.request.prompt_ids[s:], start=s,
                       temperature=r.request.sampling.temperature,
                       top_p=r.request.sampling.top_p,
                       repetition_penalty=r.request.sampling.repetition_penalty,
                       seed=int(int64_bits([r.seed])[0]), frame_position=r.frame_position,
                       stop_allowed=r.stop_allowed, counter=r.num_generated,
                       invariant=r.request.sampling.seed is not None, adapter=r.request.adapter)
            for r, s in zip(plan.prefill, starts)]


def _decode_rows(d) -> np.ndarray | None:
    """The plan's decode rows as the runner's [6, n] array (rows.py step_rows)."""
    if not len(d):
        return None
    return np.stack([d.slots, d.position, d.frame_position, d.stop_allowed.astype(np.int64),
                     d.num_generated, d.adapter])
