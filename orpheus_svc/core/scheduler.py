"""The step scheduler: admission, batch choice and progress accounting. Pure Python.

    schedule(now[, in_flight])       admit waiting generations into free slots, release
                                     cancelled ones, choose at most max_batch_size to run
                                     (frozen rows for the backend: core/step.py); with the
                                     step still running on the device (run-ahead backends),
                                     the one after it, before its tokens are known
    update(plan, result, now)        advance counters, cut frames, finish, free slots: the
                                     step's complete output (core/output.py StepOutput)

Who owns what: the admission queue (core/admission.py) holds the generations without a slot
(waiting, or deferred by slack) and the cap on new sessions; the parking lot
(core/parking.py) the running ones beyond the playout horizon, until their wake time; the
session book (core/sessions.py) every session's playout clock; core/progress.py applies a
step's tokens to the batch rows; core/order.py chooses the rows in batch order. The Scheduler composes
them and keeps the rest: slot allocations, the running generations (their token state as
BatchState rows, core/batch.py), the row budget's measurements (core/budget.py: applied at
admission) and the step clock.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .admission import AdmissionError, AdmissionQueue
from .batch import BatchState
from .budget import RowBudget
from .events import FramePush
from .generation import Generation
from .order import all_fit, choose
from .output import SchedulerStats, StepOutput, finish_of
from .parking import ParkingLot
from .playout import PlayoutSnapshot
from .progress import StepTokens, in_flight_slots
from .prompt import fit_to_slot
from .scheduler_settings import SchedulerSettings
from .sessions import SessionBook
from .slots import SlotPool
from .step import StepPlan, StepResult

_NO_FRAMES = np.zeros((0, 7), np.int64)
_CLEAN = ("stop", "length")  # ends whose last frames go to the flusher with their Finish


class Scheduler:
    """The engine thread's scheduler (see the module docstring)."""

    def __init__(self, pool: SlotPool, settings: SchedulerSettings = SchedulerSettings()) -> None:
        self.pool = pool
        self.settings = settings
        # The running generations' token state, one row per slot (core/batch.py), and who
        # holds each slot: update() advances every row at once.
        self._batch = BatchState(pool.num_slots)
        self._by_slot: list[Generation | None] = [None] * pool.num_slots
        self._tokens = StepTokens(self._batch, self._by_slot)
        self._running: dict[int, Generation] = {}  # holding a slot
        self._unstarted: dict[int, Generation] = {}  # running, no token yet (prefill rows)
        self._waited: set[Generation] = set()  # may have steps_waited > 0 (left out)
        self._queue = AdmissionQueue(pool.num_slots)  # no slot yet: waiting or deferred
        # Per-step work is O(candidates), not O(running): a running generation beyond the
        # playout horizon waits in the parking lot (core/parking.py) instead.
        self._candidates: dict[int, Generation] = {}  # running and not parked
        self._parking = ParkingLot()
        self._parked_under: SchedulerSettings | None = None  # new settings: judge all afresh
        self._cancelled: list[Generation] = []  # running ones, released at the next step
        # while schedule() plans: the slots of the step in flight (schedule's in_flight)
        self._flying: np.ndarray | None = None
        self._sessions = SessionBook()
        self._step = 0
        # The step clock: when the last step ended (None after the engine waited for
        # work), and when the step being timed began after such a wait.
        self._last_end: float | None = None
        self._began: float | None = None
        # Real-time row budget (None: off): fed with every step that followed another.
        self._budget: RowBudget | None = None
        self._budget_for: SchedulerSettings | None = None
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
        self._sessions.add(gen)

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
        if self._last_end is None and self._began is None:
            self._began = now  # the first step after a wait: its period starts now
        released = []
        cancelled, self._cancelled = self._cancelled, []
        for gen in cancelled:
            if gen.gen_id in self._running:  # not ended on its own since
                self._finish(gen, "cancelled", now)
                released.append(gen)
        admitted, refused = self._admit(now)
        self._sessions.forget_idle(now)
        self._flying = in_flight_slots(self._batch, in_flight)
        horizon = self.settings.max_ahead_seconds
        self._unpark(now, everything=horizon <= 0 or self.settings is not self._parked_under)
        self._parked_under = self.settings
        told = dict(admitted=tuple(admitted), released=tuple(released), refused=refused)
        rows = self._everything_runs(now) if horizon <= 0 else None
        if rows is None:
            rows = self._choose(now, horizon)
        prefill, decode = rows
        idle_s = 0.0
        if not prefill and not len(decode) and in_flight is None:
            self._wait()  # the engine waits for work: not a step
            wake = min(self._parking.next_wakeup(), self._queue.next_due())
            idle_s = max(wake - now, 0.0) if wake < math.inf else 0.0
        return StepPlan(self._step, prefill, decode, idle_s=idle_s, **told)

    def _choose(self, now: float, horizon: float):
        """The rows in batch order (core/order.py choose), parking those beyond the horizon."""
        keyed = []
        for gen in list(self._candidates.values()):
            key = self._priority(gen, now)
            if horizon > 0 and key[0] == 2 and key[1] > horizon:
                self._park(gen, now + key[1] - horizon)
            else:
                keyed.append((key, gen.gen_id, gen))
        prefill, decode, left_out = choose(keyed, self.settings.max_batch_size,
                                           self.settings.max_prefill_tokens, self._needs_prefill)
        for gen in left_out:
            gen.steps_waited += 1
            self._waited.add(gen)
        for gen in prefill + decode:
            gen.steps_waited = 0
        self._waited = {g for g in self._waited if g.steps_waited and not g.finished}
        slots = np.array([g.slot for g in decode], np.int64)
        return tuple(g.row() for g in prefill), self._batch.rows(slots, self._flying)

    def _needs_prefill(self, gen: Generation) -> bool:
        """Whether `gen`'s prompt goes into the step being planned: not when its prefill is
        the step in flight (it decodes its second token next)."""
        return gen.needs_prefill and (self._flying is None or not self._flying[gen.slot])

    def _everything_runs(self, now: float):
        """The plan's rows when every candidate runs anyway (core/order.py all_fit), else
        None: the hot case, with no key computed for the decode rows. They are every row
        with a token in slot order (core/batch.py decode_slots; no backend relies on the
        order of decode rows), prefill rows in batch order: the same rows and steps_waited
        as the full path. Only with the playout horizon off: parking needs every key."""
        if len(self._candidates) > self.settings.max_batch_size:
            return None
        # need prefill (nothing is parked here), but not those whose prefill is in flight
        new = [g for g in self._unstarted.values() if self._needs_prefill(g)]
        new = all_fit(len(self._candidates), new, self.settings.max_batch_size,
                      self.settings.max_prefill_tokens, lambda g: self._priority(g, now))
        if new is None:
            return None
        for gen in self._waited:
            gen.steps_waited = 0
        self._waited.clear()
        batch, flying = self._batch, self._flying
        slots = batch.decode_slots() if flying is None else \
            np.flatnonzero((batch.num_generated > 0) | flying)
        return tuple(g.row() for g in new), batch.rows(slots, flying)

    def update(self, plan: StepPlan, result: StepResult, now: float) -> StepOutput:
        """Advance every row of `plan` by its tokens in `result` (core/progress.py), settle
        the step's frames and ends, and return all of it for the engine loop to move on:
        the flusher's pushes with their playout snapshots and Finishes, the drops, the step
        period. A generation that broke the grammar loses this step's frames."""
        progress, started = self._tokens.apply(plan, result, self._running)
        for gen in started:
            self._unstarted.pop(gen.gen_id, None)
            if gen.first_token_at is None:
                gen.first_token_at = now
        out = StepOutput()
        ended, sessions = progress.ended, self._sessions
        for gen, codes in progress.frames:
            if ended and ended.get(gen) == "error":
                continue
            gen.num_frames += len(codes)
            sessions.on_frames(gen, len(codes), now)
            out.frames.append((gen, codes))
        for gen, reason in ended.items():
            self._finish(gen, reason, now)
            out.finished.append(gen)
        self._counts["tokens"] += progress.tokens
        self._counts["grammar_violations"] += progress.grammar_violations
        self.freed(result.freed)  # after the finishes above: they free first
        start = self._last_end if self._last_end is not None else self._began
        out.period_s = now - (now if start is None else start)
        if self._budget is not None and self._last_end is not None:
            self._budget.observe(progress.tokens, out.period_s)
        self._began = None
        # With nothing left to run the engine waits for a command: the next step's time
        # would include that wait.
        self._last_end = now
        if not (self._running or self._queue):
            self._wait()
        self._hand_off(out, result, now)
        return out

    def _hand_off(self, out: StepOutput, result: StepResult, now: float) -> None:
        """The step's pushes and drops: frames with the playout clock when it moved (with
        the first ones, and whenever it moved: the flusher's chunk sizes and decode order
        follow it), clean ends with their last frames, other ends as drops."""
        pushes, update = out.pushes, self._sessions.playout_update
        for gen, codes in out.frames:
            clean = gen.finish_reason in _CLEAN
            pushes.append(FramePush(gen.gen_id, codes, clean, update(gen, now),
                                    finish_of(gen) if clean else None,
                                    None if gen.request.sampling.seed is None else gen.seed))
        for gen, playout in self._sessions.playout_moved(now):  # an earlier segment ended
            pushes.append(FramePush(gen.gen_id, _NO_FRAMES, False, playout))
        with_frames = {g.gen_id for g, _ in out.frames}
        for gen in out.finished:
            if gen.finish_reason not in _CLEAN:
                out.drops.append((gen.gen_id, finish_of(gen, result.errors.get(gen.gen_id))))
            elif gen.gen_id not in with_frames:
                pushes.append(FramePush(gen.gen_id, _NO_FRAMES, True, finish=finish_of(gen)))

    def _wait(self) -> None:
        """The engine waits for work now: the next step's period starts when it begins."""
        self._last_end = self._began = None

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
            risk = self._sessions.underrun_risk(now)
        return SchedulerStats(
            active=len(self._running), waiting=len(self._queue),
            free_slots=self.pool.num_free, used_slots=self.pool.num_used,
            total_slots=self.pool.num_slots, steps=self._step, underrun_risk=risk,
            row_budget=0 if self._budget is None else int(self._budget.cap), **self._counts)

    def playout_update(self, gen: Generation, now: float) -> PlayoutSnapshot | None:
        return self._sessions.playout_update(gen, now)  # core/sessions.py

    def playout_moved(self, now: float) -> list[tuple[Generation, PlayoutSnapshot]]:
        return self._sessions.playout_moved(now)

    def buffered_seconds(self, session_id: str, now: float) -> float:
        return self._sessions.buffered_seconds(session_id, now)

    # -- internals ------------------------------------------------------------------------

    def _priority(self, gen: Generation, now: float) -> tuple:
        return self.settings.priority(gen, self._sessions[gen], now, self.settings)

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
            self._start(gen, now)
        if not refused:
            return admitted, ()
        message = self._queue.full_message(max_waiting, max_waiting)
        for gen in refused:
            self._counts["submitted"] -= 1
            self._counts["rejected"] += 1
            self._leave_session(gen, now, heard=False)
        return admitted, tuple((gen, message) for gen in refused)

    def _start(self, gen: Generation, now: float) -> None:
        slot = self.pool.allocate(gen.gen_id)
        gen.attach(self._batch, slot)
        gen.admitted_at = now
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
        for other in self._sessions.leave(gen, now, heard):
            if self._parking.release(other.gen_id):
                self._candidates[other.gen_id] = other
            self._queue.judge_again(other)

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
