"""The backend contract: what EngineLoop hands a backend each step and what it gets back.

    scheduler --StepPlan (frozen rows)--> backend.step() --StepResult--> scheduler.update()

A backend sees a generation only as a StepRow: an immutable snapshot the scheduler takes
when it builds the plan (in the spirit of vLLM's SchedulerOutput). The decode rows, which
are most rows of most steps, come as one DecodeRows: the same snapshot as arrays, so that
neither the scheduler nor a batch-minded backend spends Python per row; iterated, it gives
StepRows. The scheduler's own Generation objects stay private to the engine thread's
bookkeeping; a backend can neither read their later changes nor write them. What a backend
is and needs is said once, in its BackendCapabilities, and EngineLoop derives the scheduler
settings from config plus capabilities in one place (engine/loop.py, effective_settings)
instead of each backend rewriting them.

Implemented by engine/torch (retry_safe), engine/graph (runs_ahead), engine/sim
(retry_safe) and engine/trtllm (streams_deltas, confirms_release). Pure Python and numpy:
no torch, no grpc.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple, Protocol, Sequence

import numpy as np

if TYPE_CHECKING:
    from .request import GenerationRequest


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


_ROW = tuple.__new__  # StepRow(...) by field order, without the generated __new__


class DecodeRows:
    """A step's decode rows as arrays, one entry per row (a frozen snapshot: read-only
    copies, made by core/batch.py BatchState.rows). A backend that works on the whole batch
    reads the arrays (the sim backend); one that works row by row iterates, or indexes, and
    gets StepRows (built once, on first use). `position` is the KV index of `last_token`;
    `adapter` each row's LoRA adapter slot (its request's, -1 = the base model), so a
    batch-minded backend needs no Python per row for it either; `seeded` whether the
    row's session gave a seed (its bits must not depend on the batch: StepPlan.seeded)."""

    __slots__ = ("gen_ids", "slots", "num_generated", "last_token", "position",
                 "frame_position", "stop_allowed", "requests", "seeds", "adapter", "seeded",
                 "_rows")

    def __init__(self, gen_ids: np.ndarray, slots: np.ndarray, num_generated: np.ndarray,
                 last_token: np.ndarray, position: np.ndarray, frame_position: np.ndarray,
                 stop_allowed: np.ndarray, requests: Sequence["GenerationRequest"],
                 seeds: Sequence[int], adapter: np.ndarray | None = None,
                 seeded: np.ndarray | None = None) -> None:
        if adapter is None:
            adapter = np.array([r.adapter for r in requests], np.int64) if len(requests) \
                else np.full(len(gen_ids), -1, np.int64)
        if seeded is None:
            seeded = np.array([r.sampling.seed is not None for r in requests], bool) \
                if len(requests) else np.zeros(len(gen_ids), bool)
        arrays = (gen_ids, slots, num_generated, last_token, position, frame_position,
                  stop_allowed, adapter, seeded)
        for a in arrays:
            a.flags.writeable = False
        (self.gen_ids, self.slots, self.num_generated, self.last_token, self.position,
         self.frame_position, self.stop_allowed, self.adapter, self.seeded) = arrays
        self.requests = tuple(requests)
        self.seeds = tuple(seeds)
        self._rows: tuple[StepRow, ...] | None = None

    @classmethod
    def from_rows(cls, rows: Sequence[StepRow]) -> "DecodeRows":
        def col(name: str, dtype: type = np.int64) -> np.ndarray:
            return np.array([getattr(r, name) for r in rows], dtype)
        if any(r.prefill for r in rows):
            raise ValueError("a prefill row among the decode rows")
        last = np.array([-1 if r.last_token is None else r.last_token for r in rows], np.int64)
        out = cls(col("gen_id"), col("slot"), col("num_generated"), last,
                  col("position"), col("frame_position"), col("stop_allowed", bool),
                  [r.request for r in rows], [r.seed for r in rows])
        out._rows = tuple(rows)
        return out

    def __setattr__(self, name: str, value: Any) -> None:
        if name != "_rows" and hasattr(self, "_rows"):
            raise AttributeError(f"DecodeRows is frozen: cannot set {name}")
        object.__setattr__(self, name, value)

    @property
    def rows(self) -> tuple[StepRow, ...]:
        if self._rows is None:
            self._rows = tuple(_ROW(StepRow, r) for r in zip(
                self.gen_ids.tolist(), self.slots.tolist(), self.requests, self.seeds,
                repeat(False), self.num_generated.tolist(), self.last_token.tolist(),
                self.position.tolist(), self.frame_position.tolist(),
                self.stop_allowed.tolist()))
        return self._rows

    def take(self, index: Sequence[int] | np.ndarray) -> "DecodeRows":
        """The rows at `index` (in that order), as their own snapshot."""
        idx = np.asarray(index, np.int64)
        return DecodeRows(*(a[idx] for a in (self.gen_ids, self.slots, self.num_generated,
                                             self.last_token, self.position,
                                             self.frame_position, self.stop_allowed)),
                          [self.requests[i] for i in idx.tolist()],
                          [self.seeds[i] for i in idx.tolist()], self.adapter[idx],
                          self.seeded[idx])

    def __len__(self) -> int:
        return len(self.gen_ids)

    def __iter__(self) -> Iterator[StepRow]:
        return iter(self.rows)

    def __getitem__(self, i):
        return self.rows[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DecodeRows):
            return self.rows == other.rows
        if isinstance(other, tuple):
            return self.rows == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"DecodeRows({len(self)} rows, gen_ids={self.gen_ids.tolist()[:8]}...)"


@dataclass(frozen=True)
class StepPlan:
    """One step: rows to prefill (in the scheduler's priority order) and rows to decode (in
    priority order too, unless every candidate runs this step: then in slot order, as no
    backend relies on it; core/scheduler.py Scheduler._everything_runs).

    `admitted`, `released` and `refused` are for EngineLoop's events (generations that got a
    slot, were cancelled, or were turned away by the admission cap with the message to send:
    core/scheduler.py Scheduler.add); no backend reads them: a backend hears of ended
    generations through Backend.release. `idle_s` > 0: nothing runs because every live
    generation is beyond the playout horizon; seconds until the first comes back under it."""

    step: int
    prefill: tuple[StepRow, ...] = ()
    decode: DecodeRows = ()  # type: ignore[assignment]  # StepRows are converted
    admitted: tuple[Any, ...] = ()
    released: tuple[Any, ...] = ()
    idle_s: float = 0.0
    refused: tuple[tuple[Any, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.decode, DecodeRows):
            object.__setattr__(self, "decode", DecodeRows.from_rows(tuple(self.decode)))
        if not isinstance(self.prefill, tuple):
            object.__setattr__(self, "prefill", tuple(self.prefill))

    @property
    def rows(self) -> tuple[StepRow, ...]:
        """Every row, prefill first (StepRows: for backends and tools that go row by row)."""
        return self.prefill + self.decode.rows

    def gen_ids(self) -> list[int]:
        """Every row's generation id, prefill first, the decode ones straight from their
        array (no StepRow built per row)."""
        return [r.gen_id for r in self.prefill] + self.decode.gen_ids.tolist()

    @property
    def num_rows(self) -> int:
        return len(self.prefill) + len(self.decode)

    @property
    def empty(self) -> bool:
        return not self.prefill and not len(self.decode)

    def part(self, prefill: Sequence[int], decode: Sequence[int]) -> "StepPlan":
        """The same step with only the rows at these indices of prefill and decode."""
        return StepPlan(self.step, tuple(self.prefill[i] for i in prefill),
                        self.decode.take(decode))

    @property
    def seeded(self) -> bool:
        """Does a row's session give a seed? Then the backend computes the whole step
        batch-invariant (engine/model/invariant.py), every row of it."""
        return (any(r.request.sampling.seed is not None for r in self.prefill)
                or bool(self.decode.seeded.any()))


@dataclass
class StepResult:
    """What a step produced, by gen_id. tokens: sampled this step, in order; one per row for
    backends that sample once per step (torch, sim), zero or several for those that stream
    deltas (trtllm). decode_tokens: instead of `tokens` for the plan's decode rows, one
    token per row in the order of plan.decode (an int array; the batch path: no Python
    per row). errors: why that row failed (the scheduler ends it with "error").
    freed: ended generations whose backend resources are now really gone (only from a
    backend with capabilities.confirms_release; their slots are free from now on)."""

    tokens: dict[int, Sequence[int]] = field(default_factory=dict)  # read only by the scheduler
    errors: dict[int, str] = field(default_factory=dict)
    freed: list[int] = field(default_factory=list)
    decode_tokens: np.ndarray | None = None


class FatalBackendError(RuntimeError):
    """A backend's way to say that it can run no further step (its device context is lost:
    e.g. a CUDA error such as an illegal memory access, which poisons the context for every
    later call). Raise it from step, launch, collect or release, usually as
    `raise FatalBackendError("...") from exc`. EngineLoop does not fail rows for it and
    does not retry: its thread ends (EngineLoop.failure) and the server exits non-zero for
    its supervisor to restart it (docs/deploy.md, "Faults"). An ordinary exception fails
    only the rows that caused it."""


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
        confirmed.
    runs_ahead: besides step(), the backend has launch(plan) -> handle, which queues the
        step on the device and returns, and collect(handle) -> StepResult, which waits
        for it. It keeps each decode row's last token on the device, so EngineLoop may
        launch the next step (Scheduler.schedule with the step in flight: its rows advanced
        by one token, their last_token -1) before it collects this one (docs/architecture.md, "The graph
        engine and run-ahead").
    max_prefill_tokens: the most prompt tokens one step should hold (the graph engine: what
        its captured step holds beside the decode rows); the scheduler's prefill budget is
        capped to it. None: no limit of the backend's own.
    max_adapters, max_lora_rank: the LoRA adapter slots the backend holds and the largest
        rank one may have (engine.max_adapters, engine.max_lora_rank); 0: no adapters, and a
        request with an adapter index is refused at admission.
    prefix_pool_tokens: the KV tokens of the backend's prefix pool (engine.prefix_pool_mb;
        Backend.add_prefix); 0: none, and a request's prefix is computed with its prompt.
    seed_refusal: why a client's per-request seed (SamplingParams.seed) cannot be honoured,
        naming what ignores it; None when it is (every backend but TensorRT-LLM's PyTorch
        runtime). The edge refuses such a request (runtime.FrontRuntime.request) rather
        than drop the seed silently."""

    name: str
    num_slots: int
    max_seq_len: int
    retry_safe: bool = False
    streams_deltas: bool = False
    confirms_release: bool = False
    runs_ahead: bool = False
    max_prefill_tokens: int | None = None
    seed_refusal: str | None = None
    max_adapters: int = 0
    max_lora_rank: int = 0
    prefix_pool_tokens: int = 0


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

    # A backend with an adapter pool (capabilities.max_adapters > 0) also has
    #
    #     write_adapter(slot, adapter) -> None
    #
    # which rewrites pool slot `slot` in place with `adapter` (a models/adapters.py
    # AdapterWeights: its layers' A and B and its scaling), or clears it when `adapter` is
    # None. EngineLoop calls it on the engine thread between steps, only for a slot no row
    # of a step reads (the runtime's adapter catalog, core/adapters.py, keeps it so);
    # nothing is recaptured or reallocated.
    #
    # A backend with a prefix pool (capabilities.prefix_pool_tokens > 0) also has
    #
    #     add_prefix(ids) -> None      compute the prompt prefix `ids` into the pool
    #                                  (core/prefix_book.py PrefixPoolFull when it does not fit)
    #     drop_prefix(ids) -> None     the pool lets it go
    #     holds_prefix(ids) -> bool
    #
    # called by EngineLoop on the engine thread between steps. Every backend honours a
    # request's prefix_len (core/request.py) with the pool or without it.
