"""The step scheduler: admission, batch choice and progress accounting. Pure Python.

    schedule(now[, in_flight])       admit waiting generations into free slots, release
                                     cancelled ones, choose at most max_batch_size to run
                                     (frozen rows for the backend: core/step.py); with the
                                     step still running on the device (run-ahead backends),
                                     the one after it, before its tokens are known
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

Who owns what: the admission queue (core/admission.py) holds the generations without a slot
(waiting, or deferred by slack) and the cap on new sessions; the parking lot
(core/parking.py) the running ones beyond the playout horizon, until their wake time. The
Scheduler composes the two and keeps the rest: slot allocations, the running generations
(their token state as BatchState rows, core/batch.py), the batch order, the row budget's
measurements and each session's playout clock (core/playout.py).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .admission import AdmissionError, AdmissionQueue
from .batch import ERROR, REASONS, BatchState
from .budget import RowBudget
from .checks import is_finite, is_int, require
from .generation import Generation
from .parking import ParkingLot
from .playout import PlayoutSnapshot, SessionPlayout
from .prompt import fit_to_slot
from .slots import SlotPool
from .step import StepPlan, StepResult

# AdmissionError is defined with the queue (core/admission.py) and importable from here too,
# as callers always did.
__all__ = ["AdmissionError", "PriorityFn", "Scheduler", "SchedulerSettings", "SchedulerStats",
           "StepOutcome", "UNDERRUN_RISK_SECONDS", "deadline_priority"]


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
    """The engine thread's scheduler (see the module docstring). It owns the slot pool's
    allocations, the running generations (their token state in one BatchState), the batch
    order, the row budget's measurements and every session's playout clock; it composes the
    admission queue (generations without a slot) and the parking lot (running ones beyond
    the playout horizon)."""

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
        self._queue = AdmissionQueue(pool.num_slots)  # no slot yet: waiting or deferred
        self._running: dict[int, Generation] = {}  # holding a slot
        # Per-step work is O(candidates), not O(running): a running generation beyond the
        # playout horizon waits in the parking lot (core/parking.py) instead.
        self._candidates: dict[int, Generation] = {}  # running and not parked
        self._parking = ParkingLot()
        self._parked_under: SchedulerSettings | None = None  # new settings: judge all afresh
        self._cancelled: list[Generation] = []  # running ones, released at the next step
        # while schedule() plans: the slots of the step in flight (schedule's in_flight)
        self._flying: np.ndarray | None = None
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
        self._counts = dict(submitted=0, finished=0, cancelled=0, rejected=0, tokens=0,
                            grammar_violations=0)

    # -- commands -------------------------------------------------------------------------

    def add(self, gen: Generation) -> None:
        """Queue `gen` for admission, its max_tokens cut to what its slot holds after the
        prompt (core/prompt.py fit_to_slot: the one place a budget is fitted, so the
        generation ends, "length", where every backend can still write KV).

        PromptTooLong when the prompt leaves no room for a frame (the engine answers
        INVALID_ARGUMENT); AdmissionError when engine.max_waiting new sessions wait already
        (RESOURCE_EXHAUSTED: core/admission.py AdmissionQueue.add has the rule)."""
        req = gen.request
        budget = fit_to_slot(len(req.prompt_ids), req.max_tokens, self.pool.max_seq_len)
        if budget != req.max_tokens:
            gen.request = dataclasses.replace(req, max_tokens=budget)
        try:
            self._queue.add(gen, self.pool.num_free, self.settings.max_waiting)
        except AdmissionError:
            self._counts["rejected"] += 1
            raise
        self._counts["submitted"] += 1
        self._session(gen).add(gen)

    def cancel(self, gen_id: int, now: float) -> Generation | None:
        """Cancel a generation. A waiting one ends now (returned); a running one gives its
        slot back at the next schedule(). None if unknown or already finished."""
        gen = self._queue.remove(gen_id)
        if gen is not None:
            self._finish(gen, "cancelled", now)
            return gen
        gen = self._running.get(gen_id)
        if gen is None or gen.cancelled:
            return None
        gen.cancelled = True
        self._cancelled.append(gen)
        return None

    # -- the step -------------------------------------------------------------------------

    def schedule(self, now: float, in_flight: StepPlan | None = None) -> StepPlan:
        """The next step. `in_flight`: the step launched last, still running on the device
        (a backend that runs ahead: core/step.py), whose tokens update() has not seen; every
        step before it has been updated. Then the plan is the step after it, made now so the
        device need not wait for the host between the two: its rows that still run are
        given one token further (core/batch.py BatchState.rows), and whatever else happens
        happens as it does without run-ahead (admissions, cancels, parking, the batch order,
        the budget), one step later than it would have been seen. Two things lag one step:
        a row that the in-flight token stops (the stop id) is in the plan all the same, and
        update() drops its extra token (its slot holds another generation, or none, by
        then); and a slot or budget room that the in-flight step's ends free is used one step
        later. A cancelled row still in flight gives its slot back now: the device runs the
        two steps in order, so a prompt prefilled into that slot next writes after it, and
        update() drops the cancelled row's token."""
        self._step += 1
        released = []
        cancelled, self._cancelled = self._cancelled, []
        for gen in cancelled:
            if gen.gen_id in self._running:  # not ended on its own since
                self._finish(gen, "cancelled", now)
                released.append(gen)
        admitted, refused = self._admit(now)
        self._forget_idle_sessions(now)
        self._flying = self._in_flight(in_flight)
        horizon = self.settings.max_ahead_seconds
        self._unpark(now, everything=horizon <= 0 or self.settings is not self._parked_under)
        self._parked_under = self.settings
        if horizon <= 0:
            fast = self._everything_runs(now)
            if fast is not None:
                if not (fast[0] or fast[1]):
                    if in_flight is not None:  # the engine collects that step first
                        return StepPlan(self._step, (), (), tuple(admitted), tuple(released),
                                        0.0, refused)
                    self._last_step_end = None  # the engine waits for work: not a step
                    idle_s = max(self._queue.next_due() - now, 0.0)
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
        if not keyed and in_flight is None:
            self._last_step_end = None  # the engine waits for work: not a step
            wake = min(self._parking.next_wakeup(), self._queue.next_due())
            idle_s = max(wake - now, 0.0) if wake < math.inf else 0.0
        keyed.sort()  # ties: submission order (gen ids are unique, so gens never compare)
        prefill_budget = self.settings.max_prefill_tokens
        prefill, decode = [], []
        for _, _, gen in keyed:
            if len(prefill) + len(decode) >= self.settings.max_batch_size:
                gen.steps_waited += 1
                self._waited.add(gen)
                continue
            if self._needs_prefill(gen):
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
                        self._batch.rows(np.array(decode, np.int64), self._flying),
                        tuple(admitted), tuple(released), idle_s, refused)

    def _in_flight(self, plan: StepPlan | None) -> np.ndarray | None:
        """A bool per slot: the rows of `plan` (in flight) whose generation still holds its
        slot; None without a step in flight."""
        if plan is None or plan.empty:
            return None
        gen_ids = np.array([r.gen_id for r in plan.prefill] + plan.decode.gen_ids.tolist(),
                           np.int64)
        slots = np.array([r.slot for r in plan.prefill] + plan.decode.slots.tolist(), np.int64)
        flying = np.zeros(len(self._batch.gen_id), bool)
        flying[slots[self._batch.gen_id[slots] == gen_ids]] = True
        return flying

    def _needs_prefill(self, gen: Generation) -> bool:
        """Whether `gen`'s prompt goes into the step being planned: not when its prefill is
        the step in flight (it decodes its second token next)."""
        return gen.needs_prefill and (self._flying is None or not self._flying[gen.slot])

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
        # need prefill (nothing is parked here), but not those whose prefill is in flight
        new = [g for g in self._unstarted.values() if self._needs_prefill(g)]
        if len(new) > 1:
            if sum(g.num_prompt_tokens for g in new) > self.settings.max_prefill_tokens:
                return None
            new.sort(key=lambda g: (self._priority(g, now), g.gen_id))
        for gen in self._waited:
            gen.steps_waited = 0
        self._waited.clear()
        batch, flying = self._batch, self._flying
        slots = batch.decode_slots() if flying is None else \
            np.flatnonzero((batch.num_generated > 0) | flying)
        return tuple(g.row() for g in new), batch.rows(slots, flying)

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
        self._last_step_end = now if (running or self._queue) else None
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
        """A generation not yet ended, running or queued; None if unknown or ended."""
        return self._running.get(gen_id) or self._queue.get(gen_id)

    def running(self) -> list[Generation]:
        return list(self._running.values())

    @property
    def has_work(self) -> bool:
        # a draining slot (core/slots.py) needs steps until the backend confirms it
        return bool(self._running or self._queue or self.pool.num_draining)

    def stats(self, now: float | None = None, risk: int = 0) -> SchedulerStats:
        """The counters; underrun_risk counted at `now` (a scan of every session), else
        `risk` as given (a caller's earlier count)."""
        if now is not None:
            risk = sum(1 for s in self._sessions.values()
                       if s.gens and s.playout_end is not None
                       and s.playout_end - now < UNDERRUN_RISK_SECONDS)
        return SchedulerStats(
            active=len(self._running), waiting=len(self._queue),
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

    def _admit(self, now: float) -> tuple[list[Generation], tuple]:
        """Give free slots to queued generations (core/admission.py decides who, in batch
        order, within the row budget); the first segments the waiting cap turns away go
        out with the plan (StepPlan.refused) and leave their sessions."""
        # A full pool (the common case under load): nobody to judge, and a refusal the cap
        # owes waits for the next free slot too.
        if not self.pool.num_free:
            return [], ()
        max_waiting = self.settings.max_waiting
        admitted, refused = self._queue.admit(now, self.pool.num_free, self._budget_room(),
                                              self._priority, max_waiting)
        for gen in admitted:
            self._start(gen)
        if not refused:
            return admitted, ()
        message = self._queue.full_message(max_waiting, max_waiting)
        for gen in refused:
            self._counts["submitted"] -= 1
            self._counts["rejected"] += 1
            self._leave_session(gen, now, heard=False)
        return admitted, tuple((gen, message) for gen in refused)

    def _start(self, gen: Generation) -> None:
        slot = self.pool.allocate(gen.gen_id)
        gen.attach(self._batch, slot)
        self._by_slot[slot] = gen
        self._running[gen.gen_id] = gen
        self._candidates[gen.gen_id] = gen
        if not gen.num_generated:
            self._unstarted[gen.gen_id] = gen

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
            self._parking.release(gen.gen_id)
        self._leave_session(gen, now, heard=reason != "cancelled")

    def _leave_session(self, gen: Generation, now: float, heard: bool) -> None:
        """`gen` is no longer its session's: the rest of the session is judged afresh."""
        session = self._sessions[gen.request.session_id]
        session.remove(gen, now, heard=heard)
        if session.gens:
            self._playout_moved[session.session_id] = session
        for other in session.gens:  # their slack may have dropped: judge them afresh
            if self._parking.release(other.gen_id):
                self._candidates[other.gen_id] = other
            self._queue.judge_again(other)
        if not session.gens:
            heapq.heappush(self._idle_at, (session.playout_end or now, session.session_id))

    def _park(self, gen: Generation, wake: float) -> None:
        del self._candidates[gen.gen_id]
        self._parking.park(gen.gen_id, wake)

    def _unpark(self, now: float, everything: bool = False) -> None:
        parking = self._parking
        if not parking:
            return
        running, candidates = self._running, self._candidates
        for gen_id in parking.wake_all() if everything else parking.wake(now):
            candidates[gen_id] = running[gen_id]

    def _forget_idle_sessions(self, now: float) -> None:
        # A session's clock outlives its generations while its audio plays: a segment that
        # arrives during playback is queued behind it, not treated as a fresh request.
        while self._idle_at and self._idle_at[0][0] <= now:
            _, sid = heapq.heappop(self._idle_at)
            s = self._sessions.get(sid)
            if s is not None and not s.gens and s.buffered_seconds(now) == 0.0:
                del self._sessions[sid]
            # else: gone already, or busy again (pushed anew when it next runs out of work)
