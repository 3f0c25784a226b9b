"""FROZEN: core/scheduler.py as it was before issue 38 split it (commit b7731ee), kept
only as the reference of tests/unit/test_scheduler_replay.py. Do not edit it, do not import
it from anywhere else: the replay test feeds it and today's Scheduler the same life and
checks they decide the same things, step for step. Only its imports were made absolute.

The original docstring follows.

The step scheduler: admission, batch choice and progress accounting. Pure Python.

    schedule(now) -> StepPlan        admit waiting generations into free slots, release
                                     cancelled ones, choose at most max_batch_size to run
                                     (frozen rows for the backend: core/step.py)
    schedule_ahead(plan, now)        the step after `plan` before its tokens are known,
                                     where that is certain (run-ahead backends), else None
    update(plan, result, now)        advance counters, cut frames, finish, free slots

Batch order (docs/architecture.md, "Where each idea lives"):
    0. aged:   runnable but left out for >= aging_steps steps in a row (so nothing starves)
    1. TTFB:   the listener hears silence until this generation's first frame; oldest first
    2. others: least playout slack first (see core/playout.py); a session seconds ahead
               yields to one about to run dry, and a session's later segment comes after
               the one being played
When everything fits in the batch, everything runs (and with the playout horizon off no
order is computed for the decode rows then: Scheduler._everything_runs).

With the real-time row budget on (engine.row_budget, core/budget.py), admission keeps the
running generations within what the engine can run at real time: later segments wait in
the queue, in the same order, until a row ends or they are needed within MIN_SLACK_S.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from orpheus_svc.core.batch import ERROR, REASONS, BatchState
from orpheus_svc.core.budget import MIN_SLACK_S, RowBudget
from orpheus_svc.core.checks import is_finite, is_int, require
from orpheus_svc.core.generation import Generation
from orpheus_svc.core.playout import PlayoutSnapshot, SessionPlayout
from orpheus_svc.core.prompt import PromptTooLong, fit_to_slot
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.step import StepPlan, StepResult


def _frozen(codes: np.ndarray) -> np.ndarray:
    codes.flags.writeable = False
    return codes


def deadline_priority(gen: Generation, session: SessionPlayout, now: float,
                      settings: "SchedulerSettings") -> tuple:
    """The batch order of the module docstring, as a sort key (smaller runs first). The
    playout horizon relies on its shape: a key (2, slack) carries the slack in seconds."""
    if gen.steps_waited >= settings.aging_steps:
        return (0, -gen.steps_waited)
    if session.listener_waiting(gen, now):
        return (1, gen.arrival)
    return (2, session.slack(gen, now))


# A batch order: (generation, its session's playout, now, settings) -> sort key.
PriorityFn = Callable[[Generation, SessionPlayout, float, "SchedulerSettings"], tuple]


@dataclass(frozen=True)
class SchedulerSettings:
    """The scheduler's settings. The names are the config file's (engine.<name>,
    docs/configuration.md); each field checks itself here and nowhere else."""

    max_batch_size: int = 32
    max_waiting: int = 64
    aging_steps: int = 64
    # Prompt tokens prefilled in one step; the oldest candidate always goes, however long.
    max_prefill_tokens: int = 4096
    # Playout horizon (0 = off): a generation whose listener has more than this many seconds
    # buffered ahead sits the step out (and does not age), so sessions far ahead of playback
    # do not lengthen everyone's steps. Measured in BENCHMARKS.md (longform, 256 sessions).
    max_ahead_seconds: float = 0.0
    # Real-time row budget (core/budget.py): admit a later segment only while the running
    # generations fit what the engine measurably runs at real time x (1 + headroom); one
    # whose listener waits, or will within a second, is admitted regardless. Off by
    # default; the GPU deployment turns it on (BENCHMARKS.md, issue 16, third round).
    # Headroom 1.0 (2 x real time) matches the flusher's chunk growth of 1.0, which keeps
    # a listener fed only while its generation runs at >= (1 + growth) x real time early
    # on (audio/settings.py); 0.1 and 0.5 left underruns at 512 sessions (BENCHMARKS.md).
    row_budget: bool = False
    row_budget_headroom: float = 1.0
    # The batch order. Not a config setting: the server always runs deadline_priority; the
    # baselines of the scheduling comparison (BENCHMARKS.md) are injected by the benchmark
    # (bench/orpheus_bench/policies.py).
    priority: PriorityFn = deadline_priority

    def __post_init__(self) -> None:
        for name, floor in (("max_batch_size", 1), ("max_waiting", 0), ("aging_steps", 1),
                            ("max_prefill_tokens", 1)):
            value = getattr(self, name)
            require(is_int(value) and value >= floor, self, name, f"must be >= {floor}")
        require(is_finite(self.max_ahead_seconds) and self.max_ahead_seconds >= 0, self,
                "max_ahead_seconds", "must be >= 0")
        require(isinstance(self.row_budget, bool), self, "row_budget", "must be true or false")
        require(is_finite(self.row_budget_headroom) and 0 <= self.row_budget_headroom <= 4,
                self, "row_budget_headroom", "must be between 0 and 4")
        require(callable(self.priority), self, "priority", "must be a function")


class AdmissionError(RuntimeError):
    """The admission queue is full; the caller should answer RESOURCE_EXHAUSTED."""


@dataclass
class StepOutcome:
    """What a step did: per generation with new frames, their codes ([n, 7], read-only);
    the generations that ended (finish_reason set, slot freed)."""

    frames: list[tuple[Generation, np.ndarray]] = field(default_factory=list)
    finished: list[Generation] = field(default_factory=list)


@dataclass
class SchedulerStats:
    active: int
    waiting: int
    free_slots: int
    used_slots: int
    total_slots: int
    submitted: int
    finished: int
    cancelled: int
    rejected: int
    steps: int
    tokens: int
    grammar_violations: int
    # sessions generating now whose listener has less than UNDERRUN_RISK_SECONDS of audio
    # buffered (after their first audio): they run dry soon unless they get steps
    underrun_risk: int = 0
    # generations the real-time row budget lets run now (0: budget off or not measured yet)
    row_budget: int = 0


UNDERRUN_RISK_SECONDS = 0.25


class Scheduler:
    def __init__(self, pool: SlotPool, settings: SchedulerSettings = SchedulerSettings()) -> None:
        self.pool = pool
        self.settings = settings
        # The running generations' token state, one row per slot (core/batch.py), and who
        # holds each slot: update() advances every row at once.
        self._batch = BatchState(pool.num_slots)
        self._by_slot: list[Generation | None] = [None] * pool.num_slots
        self._unstarted: dict[int, Generation] = {}  # running, no token yet (prefill rows)
        self._waited: set[Generation] = set()  # may have steps_waited > 0 (left out)
        # update()'s scratch for the step in progress
        self._step_frames: list[tuple[Generation, np.ndarray]] = []
        self._step_ended: dict[Generation, str] = {}
        self._step_tokens = 0
        self._step_rounds = 0  # by-id rounds: more than one, and a row may have two frames
        self._waiting: list[Generation] = []
        # First segments (new sessions) holding no slot, waiting or deferred: what
        # max_waiting caps; and those the cap turned away at the last admission.
        self._new_waiting = 0
        self._refused: list[tuple[Generation, str]] = []
        self._running: dict[int, Generation] = {}  # holding a slot
        # Per-step work is O(candidates), not O(running): a generation beyond the playout
        # horizon is parked until its slack can first fall back under it (time lowers the
        # slack by at most 1 s per s; an earlier segment ending can lower it at once, so
        # that unparks its session). Parked: gen_id -> wake time; heap entries may be stale.
        self._candidates: dict[int, Generation] = {}  # running and not parked
        self._parked: dict[int, float] = {}
        self._wakeups: list[tuple[float, int]] = []
        self._parked_under: SchedulerSettings | None = None  # new settings: judge all afresh
        self._cancelled: list[Generation] = []  # running ones, released at the next step
        self._sessions: dict[str, SessionPlayout] = {}
        self._playout_moved: dict[str, SessionPlayout] = {}  # lost a generation: playout_moved
        # (when its audio has played, session id) for sessions left without generations
        self._idle_at: list[tuple[float, str]] = []
        self._step = 0
        # Real-time row budget (None: off): fed with every step that followed another
        # without an idle wait; _last_step_end is None after such a wait.
        self._budget: RowBudget | None = None
        self._budget_for: SchedulerSettings | None = None
        self._last_step_end: float | None = None
        # Waiting generations the budget holds back (later segments, not yet due): a heap
        # by the time their slack falls to MIN_SLACK_S, which is also their slack order.
        # Entries are stale unless _deferred_ids holds the same time (lazy deletion).
        self._deferred: list[tuple[float, int, Generation]] = []
        self._deferred_ids: dict[int, float] = {}
        self._counts = dict(submitted=0, finished=0, cancelled=0, rejected=0, tokens=0,
                            grammar_violations=0)

    # -- commands -------------------------------------------------------------------------

    def add(self, gen: Generation) -> None:
        """Queue `gen` for admission; AdmissionError when the waiting queue is full.

        max_waiting caps the new sessions (first segments) that wait for a KV slot beyond
        the slots free now: a generation queued since the last step takes a free slot at the
        next one, so it does not wait. Only a first segment can be refused: a later segment
        belongs to a session the server already accepted (callers bound how many of those
        are in flight), and refusing it would break a conversation midway; so later
        segments wait outside the cap. Should one of them take a free slot a new session
        was counted against, _admit turns the newest session away at that step: the cap
        holds exactly (tests/unit/test_admission_cap.py)."""
        if gen.request.segment_index == 0:
            queued = self._new_waiting - self.pool.num_free
            if queued >= self.settings.max_waiting:
                self._counts["rejected"] += 1
                raise AdmissionError(self._full_message(queued))
            self._new_waiting += 1
        self._counts["submitted"] += 1
        self._waiting.append(gen)
        self._session(gen).add(gen)

    def _full_message(self, queued: int) -> str:
        return (f"server is at capacity: all {self.pool.num_slots} KV slots are taken and "
                f"{queued} new sessions wait for one (engine.max_waiting="
                f"{self.settings.max_waiting}); retry later or on another replica")

    def cancel(self, gen_id: int, now: float) -> Generation | None:
        """Cancel a generation. A waiting one ends now (returned); a running one gives its
        slot back at the next schedule(). None if unknown or already finished."""
        for gen in self._waiting:
            if gen.gen_id == gen_id:
                self._waiting.remove(gen)
                self._finish(gen, "cancelled", now)
                return gen
        if self._deferred_ids.pop(gen_id, None) is not None:
            gen = next(g for _, _, g in self._deferred if g.gen_id == gen_id)
            self._finish(gen, "cancelled", now)
            return gen
        gen = self._running.get(gen_id)
        if gen is None or gen.cancelled:
            return None
        gen.cancelled = True
        self._cancelled.append(gen)
        return None

    # -- the step -------------------------------------------------------------------------

    def schedule(self, now: float) -> StepPlan:
        self._step += 1
        released = []
        cancelled, self._cancelled = self._cancelled, []
        for gen in cancelled:
            if gen.gen_id in self._running:  # not ended on its own since
                self._finish(gen, "cancelled", now)
                released.append(gen)
        admitted = self._admit(now)
        refused, self._refused = tuple(self._refused), []
        self._forget_idle_sessions(now)
        horizon = self.settings.max_ahead_seconds
        self._unpark(now, everything=horizon <= 0 or self.settings is not self._parked_under)
        self._parked_under = self.settings
        if horizon <= 0:
            fast = self._everything_runs(now)
            if fast is not None:
                if not (fast[0] or fast[1]):
                    self._last_step_end = None  # the engine waits for work: not a step
                    idle_s = max(self._next_due() - now, 0.0)
                    return StepPlan(self._step, (), (), tuple(admitted), tuple(released),
                                    idle_s if idle_s < math.inf else 0.0, refused)
                return StepPlan(self._step, fast[0], fast[1], tuple(admitted),
                                tuple(released), 0.0, refused)
        keyed = []
        for gen in list(self._candidates.values()):
            key = self._priority(gen, now)
            if horizon > 0 and key[0] == 2 and key[1] > horizon:
                self._park(gen, now + key[1] - horizon)
            else:
                keyed.append((key, gen.gen_id, gen))
        idle_s = 0.0
        if not keyed:
            self._last_step_end = None  # the engine waits for work: not a step
            wake = min(self._next_wakeup() if self._parked else math.inf,
                       self._next_due())
            idle_s = max(wake - now, 0.0) if wake < math.inf else 0.0
        keyed.sort()  # ties: submission order (gen ids are unique, so gens never compare)
        prefill_budget = self.settings.max_prefill_tokens
        prefill, decode = [], []
        for _, _, gen in keyed:
            if len(prefill) + len(decode) >= self.settings.max_batch_size:
                gen.steps_waited += 1
                self._waited.add(gen)
                continue
            if gen.needs_prefill:
                if prefill and gen.num_prompt_tokens > prefill_budget:
                    gen.steps_waited += 1
                    self._waited.add(gen)
                    continue
                prefill_budget -= gen.num_prompt_tokens
                prefill.append(gen.row())
            else:
                decode.append(gen.slot)
            gen.steps_waited = 0
        self._waited = {g for g in self._waited if g.steps_waited and not g.finished}
        return StepPlan(self._step, tuple(prefill),
                        self._batch.rows(np.array(decode, np.int64)), tuple(admitted),
                        tuple(released), idle_s, refused)

    def schedule_ahead(self, plan: StepPlan, now: float) -> StepPlan | None:
        """The step after `plan` while `plan` is still running on the device, before its
        tokens are known (a backend that runs ahead: core/step.py). update() has seen every
        step before `plan`, not `plan` itself.

        Only where it is what schedule() would run after update(plan): nothing is waiting
        (later segments the row budget holds back and would not admit yet may be), nothing
        was cancelled, no slot drains, the playout horizon is off, and every candidate is
        in `plan` and fits the batch. Then the next step is `plan`'s rows that still run,
        each one token further (core/batch.py rows_ahead), less those `plan`'s token ends
        by length. Two things lag one step: a row that `plan`'s token stops (the stop id)
        is in it all the same, and update() drops its extra token (its slot holds another
        generation, or none, by then); and a slot or budget room that `plan`'s ends free
        is used one step later. Else None: the engine collects `plan` and calls schedule()
        as usual. Nothing is admitted or released here."""
        if (self._cancelled or self._waiting or self._admits_deferred(now)
                or self.pool.num_draining or self.settings.max_ahead_seconds > 0
                or len(self._candidates) > self.settings.max_batch_size):
            return None
        gen_ids = np.array([r.gen_id for r in plan.prefill] + plan.decode.gen_ids.tolist(),
                           np.int64)
        slots = np.array([r.slot for r in plan.prefill] + plan.decode.slots.tolist(), np.int64)
        live = self._batch.gen_id[slots] == gen_ids  # not ended since plan was made
        if int(live.sum()) != len(self._candidates):
            return None  # a candidate that is not in the plan: schedule() decides
        # (BatchState.rows_ahead(slots) was rows(slots) with every row in flight)
        rows = self._batch.rows(np.sort(slots[live]), np.ones(len(self._batch.gen_id), bool))
        if not len(rows):
            return None
        self._step += 1
        return StepPlan(self._step, (), rows)

    def _admits_deferred(self, now: float) -> bool:
        """Whether schedule() at `now` would admit a generation the row budget holds back
        (one due, or room in the budget and a free slot): _admit's conditions."""
        if not self._deferred_ids:
            return False
        if self._next_due() <= now:
            return True
        return bool(self.pool.num_free) and self._budget_room() > 0

    def _everything_runs(self, now: float):
        """The plan's rows when every candidate runs anyway (room for all of them in the
        batch, and their prompts fit the prefill budget or only one needs prefill), else
        None. Then the batch order cannot change who runs, so no key is computed for the
        decode rows (the hot case: the profile in BENCHMARKS.md, issue 16): they are every
        batch row with a token, in slot order (core/batch.py decode_slots), which no backend
        relies on (torch re-sorts by slot, sim and trtllm key by slot or gen_id). Prefill rows
        keep the priority order: trtllm submits them in it. Same rows and the same
        steps_waited (0 for all: only generations left out of a batch are reset) as the
        full path. Only with the playout horizon off: parking needs every row's key."""
        if len(self._candidates) > self.settings.max_batch_size:
            return None
        new = list(self._unstarted.values())  # need prefill (nothing is parked here)
        if len(new) > 1:
            if sum(g.num_prompt_tokens for g in new) > self.settings.max_prefill_tokens:
                return None
            new.sort(key=lambda g: (self._priority(g, now), g.gen_id))
        for gen in self._waited:
            gen.steps_waited = 0
        self._waited.clear()
        batch = self._batch
        return tuple(g.row() for g in new), batch.rows(batch.decode_slots())

    def update(self, plan: StepPlan, result: StepResult, now: float) -> StepOutcome:
        """Advance every row of `plan` by its tokens in `result`: the engine thread's hot
        path. The decode rows' one token each (result.decode_tokens) go through the batch
        arrays in one call (core/batch.py); tokens by gen_id (prefill rows, backends that
        stream deltas) go the same way, one round per token index. Python work per row is
        left only for the rows that complete a frame (one step in seven: playout, the
        outcome) or end."""
        self._step_frames, self._step_ended, self._step_tokens = [], {}, 0
        self._step_rounds = 0
        running = self._running
        errors = result.errors
        decode = plan.decode
        if errors:
            in_plan = set(plan.gen_ids())
            for gen_id in errors:
                gen = running.get(gen_id)
                if gen is not None and gen_id in in_plan:
                    self._step_ended[gen] = "error"
        if result.decode_tokens is not None and len(decode):
            slots = decode.slots
            live = self._batch.gen_id[slots] == decode.gen_ids  # not ended since the plan
            if errors:
                live &= ~np.isin(decode.gen_ids, np.fromiter(errors, np.int64, len(errors)))
            tokens = np.asarray(result.decode_tokens, np.int64)
            if not live.all():
                slots, tokens = slots[live], tokens[live]
            self._advance(slots, tokens)
        if result.tokens:
            self._advance_by_id(plan, result)
        out = self._settle(now)
        self.freed(result.freed)  # after the finishes above: they free first
        if self._budget is not None and self._last_step_end is not None:
            self._budget.observe(self._step_tokens, now - self._last_step_end)
        # With nothing left to run the engine waits for a command: the next step's time
        # would include that wait.
        self._last_step_end = now if (running or self._num_waiting) else None
        return out

    def _advance_by_id(self, plan: StepPlan, result: StepResult) -> None:
        """result.tokens (0..n per row, by gen_id) for the plan's rows: token i of every
        row that has one, as one batch call per i, until each row ends or runs out."""
        tokens_of, errors, running = result.tokens, result.errors, self._running
        ids = [r.gen_id for r in plan.prefill]
        if result.decode_tokens is None:
            ids += plan.decode.gen_ids.tolist()
        rows = []
        for gen_id in ids:
            toks = tokens_of.get(gen_id)
            gen = running.get(gen_id)
            if toks and gen is not None and gen_id not in errors:
                self._unstarted.pop(gen_id, None)
                rows.append((gen.slot, toks))
        i = 0
        while rows:
            ended = self._advance(np.fromiter((s for s, _ in rows), np.int64, len(rows)),
                                  np.fromiter((t[i] for _, t in rows), np.int64, len(rows)))
            i += 1
            rows = [(s, t) for s, t in rows if len(t) > i and s not in ended]
        self._step_rounds = i

    def _advance(self, slots: np.ndarray, tokens: np.ndarray) -> set[int]:
        """One token for each row of `slots`; records frames and ends; returns the slots
        that ended."""
        adv = self._batch.advance(slots, tokens)
        self._step_tokens += len(slots)
        by_slot = self._by_slot
        if len(adv.complete):
            codes = adv.codes
            codes.flags.writeable = False
            self._step_frames.extend(
                (by_slot[s], codes[j:j + 1])
                for j, s in enumerate(slots[adv.complete].tolist()))
        if not len(adv.ended):
            return set()
        ended = slots[adv.ended].tolist()
        for slot, reason in zip(ended, adv.reasons.tolist()):
            self._step_ended[by_slot[slot]] = REASONS[reason]
            if reason == ERROR:
                self._counts["grammar_violations"] += 1
        return set(ended)

    def _settle(self, now: float) -> StepOutcome:
        """The step's frames to the playout clocks and the outcome, then its ends (a
        generation that broke the grammar loses this step's frames)."""
        out = StepOutcome()
        ended, sessions = self._step_ended, self._sessions
        frames = self._step_frames
        if self._step_rounds > 1:  # several tokens per row: a row may have several frames
            merged: dict[Generation, list[np.ndarray]] = {}
            for gen, codes in frames:
                merged.setdefault(gen, []).append(codes)
            frames = [(g, _frozen(np.concatenate(c))) for g, c in merged.items()]
        for gen, codes in frames:
            if ended and ended.get(gen) == "error":
                continue
            gen.num_frames += len(codes)
            sessions[gen.request.session_id].on_frames(gen, len(codes), now)
            out.frames.append((gen, codes))
        for gen, reason in ended.items():
            self._finish(gen, reason, now)
            out.finished.append(gen)
        self._counts["tokens"] += self._step_tokens
        return out

    def freed(self, gen_ids) -> None:
        """The backend holds nothing more for these ended generations: their draining slots
        are free now (core/slots.py; a no-op for a pool that does not drain)."""
        for gen_id in gen_ids:
            self.pool.confirm(gen_id)

    # -- queries --------------------------------------------------------------------------

    def get(self, gen_id: int) -> Generation | None:
        return self._running.get(gen_id) or next(
            (g for g in self._waiting if g.gen_id == gen_id), None) or next(
            (g for _, _, g in self._deferred if self._deferred_ids.get(g.gen_id) is not None
             and g.gen_id == gen_id), None)

    def running(self) -> list[Generation]:
        return list(self._running.values())

    @property
    def has_work(self) -> bool:
        # a draining slot (core/slots.py) needs steps until the backend confirms it
        return bool(self._running or self._num_waiting or self.pool.num_draining)

    @property
    def _num_waiting(self) -> int:
        return len(self._waiting) + len(self._deferred_ids)

    def stats(self, now: float | None = None, risk: int = 0) -> SchedulerStats:
        """The counters; underrun_risk counted at `now` (a scan of every session), else
        `risk` as given (a caller's earlier count)."""
        if now is not None:
            risk = sum(1 for s in self._sessions.values()
                       if s.gens and s.playout_end is not None
                       and s.playout_end - now < UNDERRUN_RISK_SECONDS)
        return SchedulerStats(
            active=len(self._running), waiting=self._num_waiting,
            free_slots=self.pool.num_free, used_slots=self.pool.num_used,
            total_slots=self.pool.num_slots, steps=self._step, underrun_risk=risk,
            row_budget=self._budget_rows(), **self._counts)

    def _budget_rows(self) -> int:
        return 0 if self._budget is None else int(self._budget.cap)

    def playout_update(self, gen: Generation, now: float) -> PlayoutSnapshot | None:
        """When the listener reaches `gen`'s audio (core/playout.py), if that may have moved
        since the last snapshot of `gen` handed out (always with the first); else None, also
        once `gen` has ended (its session no longer tracks it). The engine hands it to the
        flusher with `gen`'s frames: the flusher keeps no clock of its own."""
        session = self._sessions.get(gen.request.session_id)
        if gen.finished or session is None or not session.moved(gen):
            return None
        return session.snapshot(gen, now)

    def playout_moved(self, now: float) -> list[tuple[Generation, PlayoutSnapshot]]:
        """Fresh snapshots for generations with frames whose session lost a generation since
        the last call. An earlier segment ending can bring a later one's listener closer at
        once (it stopped short of its estimate), and the later one may make no frames for a
        while (parked): so the flusher hears it now, not with its next frames. The other
        moves only put listeners later, and ride with the next frames."""
        out = []
        for session in self._playout_moved.values():
            out.extend((g, session.snapshot(g, now)) for g in session.gens
                       if g.num_frames and session.moved(g))
        self._playout_moved.clear()
        return out

    def buffered_seconds(self, session_id: str, now: float) -> float:
        s = self._sessions.get(session_id)
        return 0.0 if s is None else s.buffered_seconds(now)

    # -- internals ------------------------------------------------------------------------

    def _session(self, gen: Generation) -> SessionPlayout:
        sid = gen.request.session_id
        if sid not in self._sessions:
            self._sessions[sid] = SessionPlayout(sid)
        return self._sessions[sid]

    def _priority(self, gen: Generation, now: float) -> tuple:
        return self.settings.priority(gen, self._sessions[gen.request.session_id], now,
                                      self.settings)

    def _admit(self, now: float) -> list[Generation]:
        """Move waiting generations into free slots in batch order. With the row budget on,
        a later segment not due within MIN_SLACK_S waits in `_deferred` (by slack) while
        the running ones fill the budget; the others are admitted regardless. Per step the
        work is O(new arrivals + generations coming due), not O(everything queued)."""
        admitted: list[Generation] = []
        if not self.pool.num_free:
            return admitted
        room = self._budget_room()
        heap, ids = self._deferred, self._deferred_ids
        due: list[Generation] = []
        while heap and heap[0][0] <= now:  # their slack reached MIN_SLACK_S: judge afresh
            t, _, gen = heapq.heappop(heap)
            if ids.get(gen.gen_id) == t:
                del ids[gen.gen_id]
                due.append(gen)
        if self._waiting or due:
            keyed = sorted([(self._priority(g, now), g.gen_id, g)
                            for g in (*self._waiting, *due)])
            self._waiting = []
            for key, _, gen in keyed:
                if key[0] == 2 and key[1] > MIN_SLACK_S:  # the listener has audio ahead
                    t = now + key[1] - MIN_SLACK_S
                    ids[gen.gen_id] = t
                    heapq.heappush(heap, (t, gen.gen_id, gen))
                elif self.pool.num_free:
                    self._start(gen)
                    admitted.append(gen)
                    room -= 1
                else:
                    self._waiting.append(gen)
        while room > 0 and heap and self.pool.num_free:  # room left: least slack first
            t, _, gen = heapq.heappop(heap)
            if ids.get(gen.gen_id) == t:
                del ids[gen.gen_id]
                self._start(gen)
                admitted.append(gen)
                room -= 1
        excess = self._new_waiting - self.pool.num_free - self.settings.max_waiting
        if excess > 0:  # later segments took slots new sessions were counted against
            self._refuse_newest(excess, now)
        return admitted

    def _refuse_newest(self, n: int, now: float) -> None:
        """Turn away the `n` newest first segments that hold no slot (as add() would have,
        had it known): they go out with the next plan (StepPlan.refused)."""
        ids = self._deferred_ids
        firsts = [g for g in self._waiting if g.request.segment_index == 0]
        firsts += [g for _, _, g in self._deferred
                   if g.request.segment_index == 0 and ids.get(g.gen_id) is not None]
        message = self._full_message(self.settings.max_waiting)
        for gen in sorted(firsts, key=lambda g: (g.arrival, g.gen_id))[-n:]:
            if ids.pop(gen.gen_id, None) is None:
                self._waiting.remove(gen)
            self._new_waiting -= 1
            self._counts["submitted"] -= 1
            self._counts["rejected"] += 1
            self._leave_session(gen, now, heard=False)
            self._refused.append((gen, message))

    def _start(self, gen: Generation) -> None:
        if gen.request.segment_index == 0:
            self._new_waiting -= 1
        slot = self.pool.allocate(gen.gen_id)
        self._fit_to_slot(gen)
        gen.attach(self._batch, slot)
        self._by_slot[slot] = gen
        self._running[gen.gen_id] = gen
        self._candidates[gen.gen_id] = gen
        if not gen.num_generated:
            self._unstarted[gen.gen_id] = gen

    def _next_due(self) -> float:
        """When the first deferred generation falls due (inf: none)."""
        heap = self._deferred
        while heap and self._deferred_ids.get(heap[0][2].gen_id) != heap[0][0]:
            heapq.heappop(heap)  # stale
        return heap[0][0] if heap else math.inf

    def _budget_room(self) -> float:
        """How many more generations the row budget admits now (infinite when it is off;
        at least one while nothing runs, so a queue is never stuck behind its own budget)."""
        if not self.settings.row_budget:
            self._budget = self._budget_for = None
            return math.inf
        if self._budget_for is not self.settings:  # new settings: measure afresh
            self._budget = RowBudget(self.settings.row_budget_headroom)
            self._budget_for = self.settings
        return max(math.floor(self._budget.cap), 1) - len(self._running)

    def _fit_to_slot(self, gen: Generation) -> None:
        """Cut max_tokens to what the slot holds after the prompt, so the generation ends
        ("length") where every backend can still write KV: the one place a budget is cut
        (EngineLoop refuses a prompt that cannot fit before it gets here; for other callers
        one that cannot fit is left for the backend to refuse)."""
        req = gen.request
        try:
            budget = fit_to_slot(len(req.prompt_ids), req.max_tokens, self.pool.max_seq_len)
        except PromptTooLong:
            return
        if budget != req.max_tokens:
            gen.request = dataclasses.replace(req, max_tokens=budget)

    def _finish(self, gen: Generation, reason: str, now: float) -> None:
        gen.finish_reason = reason
        self._counts["cancelled" if reason == "cancelled" else "finished"] += 1
        if gen.slot is not None:
            gen.detach()
            self._by_slot[gen.slot] = None
            self._unstarted.pop(gen.gen_id, None)
            self.pool.free(gen.slot, gen.gen_id)
            del self._running[gen.gen_id]
            self._candidates.pop(gen.gen_id, None)
            self._parked.pop(gen.gen_id, None)
        elif gen.request.segment_index == 0:
            self._new_waiting -= 1
        self._leave_session(gen, now, heard=reason != "cancelled")

    def _leave_session(self, gen: Generation, now: float, heard: bool) -> None:
        """`gen` is no longer its session's: the rest of the session is judged afresh."""
        session = self._sessions[gen.request.session_id]
        session.remove(gen, now, heard=heard)
        if session.gens:
            self._playout_moved[session.session_id] = session
        for other in session.gens:  # their slack may have dropped: judge them afresh
            if self._parked.pop(other.gen_id, None) is not None:
                self._candidates[other.gen_id] = other
            if self._deferred_ids.pop(other.gen_id, None) is not None:
                self._waiting.append(other)
        if not session.gens:
            heapq.heappush(self._idle_at, (session.playout_end or now, session.session_id))

    def _park(self, gen: Generation, wake: float) -> None:
        del self._candidates[gen.gen_id]
        self._parked[gen.gen_id] = wake
        heapq.heappush(self._wakeups, (wake, gen.gen_id))

    def _unpark(self, now: float, everything: bool = False) -> None:
        if everything:
            self._candidates.update((gid, self._running[gid]) for gid in self._parked)
            self._parked.clear()
            self._wakeups.clear()
            return
        while self._wakeups and self._wakeups[0][0] <= now:
            wake, gid = heapq.heappop(self._wakeups)
            if self._parked.get(gid) == wake:
                del self._parked[gid]
                self._candidates[gid] = self._running[gid]

    def _next_wakeup(self) -> float:
        while self._parked.get(self._wakeups[0][1]) != self._wakeups[0][0]:
            heapq.heappop(self._wakeups)  # stale: unparked or ended since
        return self._wakeups[0][0]

    def _forget_idle_sessions(self, now: float) -> None:
        # A session's clock outlives its generations while its audio plays: a segment that
        # arrives during playback is queued behind it, not treated as a fresh request.
        while self._idle_at and self._idle_at[0][0] <= now:
            _, sid = heapq.heappop(self._idle_at)
            s = self._sessions.get(sid)
            if s is not None and not s.gens and s.buffered_seconds(now) == 0.0:
                del self._sessions[sid]
            # else: gone already, or busy again (pushed anew when it next runs out of work)
