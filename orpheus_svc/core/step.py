"""The backend contract: what EngineLoop hands a backend each step and what it gets back.

    scheduler --StepPlan (frozen rows)--> backend.step() --StepResult--> scheduler.update()

A backend sees a generation only as a StepRow: an immutable snapshot the scheduler takes
when it builds the plan (in the spirit of vLLM's SchedulerOutput). The scheduler's own
Generation objects stay private to the engine thread's bookkeeping; a backend can neither
read their later changes nor write them. What a backend is and needs is said once, in its
BackendCapabilities, and EngineLoop derives the scheduler settings from config plus
capabilities in one place (engine/loop.py, effective_settings) instead of each backend
rewriting them.

Implemented by engine/torch (retry_safe), engine/sim (retry_safe) and engine/trtllm
(streams_deltas, confirms_release). Pure Python: no torch, no grpc.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, Sequence

if TYPE_CHECKING:
    from .generation import GenerationRequest


class StepRow(NamedTuple):
    """One generation's work in one step. A NamedTuple: immutable and cheap to build for
    every live row of every step.

    prefill: feed request.prompt_ids into `slot` from position 0, then sample.
    decode:  feed `last_token` at KV index `position` of `slot`, then sample.
    The token sampled now is the generation's `num_generated`-th (0-based: the counter of
    a counter-based RNG); it must follow the audio grammar (core/grammar.py): frame
    position `frame_position`, stop id legal iff `stop_allowed`."""

    gen_id: int
    slot: int
    request: "GenerationRequest"  # frozen: prompt ids, max_tokens, sampling, session, segment
    seed: int                     # already reduced to 64 bits by EngineLoop
    prefill: bool
    num_generated: int
    last_token: int | None        # decode: the token fed this step; prefill: None
    position: int                 # decode: KV index of last_token; prefill: 0
    frame_position: int
    stop_allowed: bool


@dataclass(frozen=True)
class StepPlan:
    """One step: rows to prefill (in the scheduler's priority order) and rows to decode (in
    priority order too, unless every candidate runs this step: then in admission order, as
    no backend reads it; core/scheduler.py Scheduler._everything_runs).

    `admitted` and `released` are for EngineLoop's events (generations that got a slot or
    were cancelled this step); no backend reads them: a backend hears of ended generations
    through Backend.release. `idle_s` > 0: nothing runs because every live generation is
    beyond the playout horizon; seconds until the first comes back under it."""

    step: int
    prefill: tuple[StepRow, ...] = ()
    decode: tuple[StepRow, ...] = ()
    admitted: tuple[Any, ...] = ()
    released: tuple[Any, ...] = ()
    idle_s: float = 0.0

    @property
    def rows(self) -> tuple[StepRow, ...]:
        return self.prefill + self.decode

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode


@dataclass
class StepResult:
    """What a step produced, by gen_id. tokens: sampled this step, in order; one per row for
    backends that sample once per step (torch, sim), zero or several for those that stream
    deltas (trtllm). errors: why that row failed (the scheduler ends it with "error").
    freed: ended generations whose backend resources are now really gone (only from a
    backend with capabilities.confirms_release; their slots are free from now on)."""

    tokens: dict[int, Sequence[int]] = field(default_factory=dict)  # read only by the scheduler
    errors: dict[int, str] = field(default_factory=dict)
    freed: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class BackendCapabilities:
    """What a backend is, read once by EngineLoop (and reported by GetStatus).

    num_slots, max_seq_len: the KV slots it really holds; the scheduler's slot pool is
        sized from them.
    retry_safe: a step that raised may be re-run on a subset of its rows: step() has no
        side effect before it can raise for a row (EngineLoop then isolates the bad row).
    streams_deltas: the backend batches internally and delivers 0..n tokens per row per
        step (TensorRT-LLM). Then every running generation must be in every plan (one left
        out cannot take its tokens), prefill is not budgeted (the backend chunks it; a row
        stays "prefill" until its first token arrives) and there is no playout horizon (the
        backend keeps every request running anyway).
    confirms_release: what the backend holds for a generation outlives our end of it (an
        abort completes later); the slot stays taken until a StepResult names the
        generation in `freed`, so the scheduler's slot pool is the only admission gate.
        EngineLoop keeps stepping (with empty plans, if need be) until every one is
        confirmed."""

    name: str
    num_slots: int
    max_seq_len: int
    retry_safe: bool = False
    streams_deltas: bool = False
    confirms_release: bool = False


class Backend(Protocol):
    """What EngineLoop drives. Every method runs on the engine thread, except close(),
    which the owner calls once after EngineLoop.stop()."""

    capabilities: BackendCapabilities

    def step(self, plan: StepPlan) -> StepResult: ...

    def release(self, gen_ids: Sequence[int]) -> Sequence[int]:
        """Generations that ended (finished, failed or cancelled): free what the backend
        keeps for them (abort a running request, forget a stream). Returns the ids it no
        longer holds anything for (all of them, but for a backend with confirms_release,
        which names the others in a later StepResult.freed)."""

    def close(self) -> None:
        """Server shutdown: free devices, stop threads, abort what still runs."""
