"""EngineLoop: the thread that owns the scheduler, the slot pool and the backend.

Message based on both sides, so it can move to its own process without a rewrite:

    submit(request) / cancel(gen_id)  ->  command queue  ->  engine thread
    write_adapter(slot, adapter)      ->  the same queue: a LoRA pool slot rewritten between steps
    engine thread  ->  sink([Admitted | Rejected ...])     before the step's frames move on
    engine thread  ->  flusher.push_many([FramePush ...]) once per step / drop(gen_id, finish)
    flusher thread ->  sink([AudioEvent ...])              one call per decode batch

The backend is driven through core/step.py (frozen rows in, tokens out, release on every
end); the scheduler's playout clock travels to the flusher as a PlayoutSnapshot.

A generation's end (its Finish) goes to the flusher with its last frames or with drop, and
comes out on its final AudioEvent: after admission the flusher thread alone speaks for a
generation, so its consumer gets one ordered stream.

If the thread dies (an exception past the loop's own handlers, or a FatalBackendError from
the backend), `failure` says why and later submits are rejected at once; the owner ends the
open generations and exits (engine/watchdog.py, server/engine_guard.py, app/topology.py).
`beat` tells a watcher whether a step is running and since which step (slow is not dead).

Nothing outside the engine thread touches scheduler or backend state; stats() returns the
immutable snapshot the thread last published: after any step where a generation came or
went, when it goes idle, and otherwise at most STATS_INTERVAL_S apart (underrun_risk, which
scans every session, only when idle and at that interval).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import queue
import threading
import time
from concurrent.futures import Future
from typing import Callable, NamedTuple, Protocol, Sequence

import numpy as np

from orpheus_svc.core.errors import internal_message, new_error_id
from orpheus_svc.core.events import Admitted, EventBatch, EventSink, Finish, FramePush, Rejected
from orpheus_svc.core.generation import Generation, GenerationRequest
from orpheus_svc.core.prompt import PromptTooLong
from orpheus_svc.core.request import reduce_seed
from orpheus_svc.core.scheduler import AdmissionError, Scheduler, SchedulerSettings, SchedulerStats
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.status import Status
from orpheus_svc.core.step import (Backend, BackendCapabilities, FatalBackendError, StepPlan,
                                   StepResult, StepRow)
from orpheus_svc.core.tokens import FRAME_TOKENS
from orpheus_svc.engine.ahead import AheadRecord
from orpheus_svc.engine.collector import CollectorPacer
from orpheus_svc.engine.watchdog import StepBeat
from orpheus_svc.threads import os_named

log = logging.getLogger(__name__)

# stats() is republished at least this often while generations run (Scheduler.stats scans
# every session: about 3% of the host's time when it ran after every step, BENCHMARKS.md
# issue 16), and at once whenever a generation was submitted, admitted, rejected, cancelled
# or ended, and whenever the loop goes idle: GetStatus never misses a slot freeing.
STATS_INTERVAL_S = 0.05

_NO_FRAMES = np.zeros((0, FRAME_TOKENS), np.int64)


def _internal(error_id: str) -> str:
    """What a client learns of a failed step: no exception text, just the id."""
    return internal_message("internal error while generating", error_id)


def _row_problem(req: GenerationRequest, max_adapters: int = 0) -> str | None:
    """Why a request's per-row inputs cannot go to a backend, or None.

    A guard, not a second validation: a request from an edge was validated there
    (server/settings.py) with the same rule, `SamplingParams.validate`, so this never
    refuses one. It stays because the engine is an edge of its own (a split topology's
    engine process takes requests off a socket; warm-up and benchmarks submit
    directly), and a NaN or a non-integer seed must fail its own row, not a batch."""
    try:
        req.sampling.validate()
    except ValueError as exc:
        return f"sampling: {exc}"
    if req.max_tokens < 1:
        return f"max_tokens must be >= 1, got {req.max_tokens}"
    if not req.prompt_ids:
        return "empty prompt"
    if not (isinstance(req.adapter, int) and -1 <= req.adapter < max_adapters):
        # a pool slot the backend does not hold would read another adapter's weights or
        # none: the row fails alone (BackendCapabilities.max_adapters)
        return (f"adapter slot {req.adapter!r} is not one of this engine's "
                f"{max_adapters} (engine.max_adapters; -1 is the base model)")
    return None


def _split(plan: StepPlan) -> list[StepPlan]:
    """Parts to retry a failed step in: without the suspects first (rows new this step),
    else two halves (rows in plan order: prefill, then decode)."""
    p, d = len(plan.prefill), len(plan.decode)
    if p and d:
        return [plan.part((), range(d)), plan.part(range(p), ())]
    half = (p + d) // 2
    first, second = range(half), range(half, p + d)
    return [plan.part([i for i in idx if i < p], [i - p for i in idx if i >= p])
            for idx in (first, second)]


def effective_settings(settings: SchedulerSettings,
                       caps: BackendCapabilities) -> SchedulerSettings:
    """The scheduler settings a backend really runs with: the configured ones, adjusted
    here and only here for what the backend is (core/step.py, BackendCapabilities). A
    backend that streams deltas gets every running generation in every plan, no prefill
    budget and no playout horizon; one with a prefill limit of its own a budget no larger."""
    if caps.max_prefill_tokens and caps.max_prefill_tokens < settings.max_prefill_tokens:
        settings = dataclasses.replace(settings, max_prefill_tokens=caps.max_prefill_tokens)
    if not caps.streams_deltas:
        return settings
    return dataclasses.replace(
        settings, max_batch_size=max(settings.max_batch_size, caps.num_slots),
        max_prefill_tokens=caps.num_slots * caps.max_seq_len, max_ahead_seconds=0.0)


class FrameSink(Protocol):
    def push_many(self, pushes: Sequence[FramePush]) -> None: ...

    def drop(self, gen_id: int, finish: Finish | None = None) -> None: ...


class _Submit(NamedTuple):
    """Command: admit `request` as generation `gen_id` (queued at `arrival`)."""
    gen_id: int
    request: GenerationRequest
    arrival: float


class _Cancel(NamedTuple):
    """Command: end generation `gen_id` (waiting: now; running: at the next step)."""
    gen_id: int


class _WriteAdapter(NamedTuple):
    """Command: rewrite LoRA pool slot `slot` with `adapter` (None: clear it), between two
    steps; `done` resolves once it is written (or with why it failed)."""
    slot: int
    adapter: object
    done: Future


_STOP = object()


class EngineLoop:
    def __init__(self, backend: Backend, flusher: FrameSink, sink: EventSink, *,
                 settings: SchedulerSettings = SchedulerSettings(), seed: int | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 on_step: Callable[[int, float], None] | None = None,
                 collector: CollectorPacer | None = None) -> None:
        self.backend = backend
        # The cyclic GC at the engine's pace (engine/collector.py; engine.gc_pacing), or
        # None: the collector stays automatic (tests, tools).
        self.collector = collector
        self.flusher = flusher
        self._sink = sink
        self._clock = clock
        # called with each step's batch size and period (metrics): the time since the end
        # of the previous step, or since this one began after the loop waited for work
        self._on_step = on_step
        self._last_step_end: float | None = None
        self._seed = int.from_bytes(os.urandom(4), "little") if seed is None else seed
        self.capabilities = caps = backend.capabilities
        effective = effective_settings(settings, caps)  # what GetStatus reports
        if effective != settings:
            log.info("%s backend: scheduler runs with max_batch_size %d, max_prefill_tokens %d, "
                     "max_ahead_seconds %g", caps.name, effective.max_batch_size,
                     effective.max_prefill_tokens, effective.max_ahead_seconds)
        self._scheduler = Scheduler(SlotPool(caps.num_slots, caps.max_seq_len,
                                             confirm_frees=caps.confirms_release), effective)
        self._thread: threading.Thread | None = None
        # Run-ahead (capabilities.runs_ahead): the next step, launched before this one's
        # tokens were read, as (plan, the backend's handle); None when nothing is in flight.
        self._ahead: tuple[StepPlan, object] | None = None
        self.ahead = AheadRecord()  # whether each step ran ahead, and why not (engine/ahead.py)
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._ids = itertools.count(1)
        self._stats = self._scheduler.stats()
        self._stats_at = float("-inf")  # clock time of the last publication
        self._stats_stale = False  # a generation came, went or changed state since then
        # Engine thread only; read as a racy, monotone snapshot (GetStatus, metrics).
        self.failed_rows = 0        # generations failed by a backend error
        self.isolation_retries = 0  # steps re-run in parts to find the rows that fail
        self.beat = StepBeat()      # around each step, for watchers (engine/watchdog.py)
        # Why the engine thread died, or None: set once, by the thread itself, as it ends.
        self.failure: BaseException | None = None

    # -- any thread -----------------------------------------------------------------------

    def start(self) -> None:
        if self.collector is not None:
            self.collector.start()
        self._thread = threading.Thread(target=os_named(self._run), name="engine-core",
                                        daemon=True)
        try:
            self._thread.start()
        except BaseException:
            if self.collector is not None:
                self.collector.stop()
            raise

    def stop(self, timeout: float | None = 10.0) -> None:
        self._commands.put(_STOP)
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive() and self.collector is not None:
                self.collector.stop()  # stuck in a step: collection back to automatic

    def new_id(self) -> int:
        """A fresh generation id, so a consumer can route events before submitting."""
        return next(self._ids)

    def submit(self, request: GenerationRequest, gen_id: int | None = None) -> int:
        """Queue a generation; returns its id. Admission, rejection and progress arrive as events."""
        gen_id = self.new_id() if gen_id is None else gen_id
        if self.failure is not None:  # nobody reads the queue any more: say so at once
            self._sink([Rejected(gen_id, code=Status.UNAVAILABLE,
                                 reason="the engine failed; retry (another replica)")])
            return gen_id
        self._commands.put(_Submit(gen_id, request, self._clock()))
        return gen_id

    def cancel(self, gen_id: int) -> None:
        self._commands.put(_Cancel(gen_id))

    def write_adapter(self, slot: int, adapter: object | None) -> Future:
        """Queue a rewrite of LoRA pool slot `slot` with `adapter` (a models/adapters.py
        AdapterWeights; None clears the slot): the engine thread, which owns the device
        state, does it between two steps (Backend.write_adapter), after every command
        queued before it (a cancel of a generation on the slot included) and before every
        one queued after it (a submit that uses the new adapter). Returns a Future that
        resolves once it is written, or with the error: ValueError at once for a slot
        outside the pool, RuntimeError when the engine failed."""
        done: Future = Future()
        if not 0 <= slot < self.capabilities.max_adapters:
            done.set_exception(ValueError(
                f"adapter slot {slot} is not one of this engine's "
                f"{self.capabilities.max_adapters} (engine.max_adapters)"))
        elif self.failure is not None:
            done.set_exception(RuntimeError("the engine failed; no adapter can be written"))
        else:
            self._commands.put(_WriteAdapter(slot, adapter, done))
        return done

    def stats(self) -> SchedulerStats:
        return self._stats

    @property
    def settings(self) -> SchedulerSettings:
        """The scheduler settings this loop runs with: the effective ones (the configured
        ones as adjusted for the backend's capabilities by effective_settings)."""
        return self._scheduler.settings

    @settings.setter
    def settings(self, settings: SchedulerSettings) -> None:
        if self._thread is not None:
            raise RuntimeError("scheduler settings are fixed once the engine thread runs")
        self._scheduler.settings = settings

    # -- engine thread --------------------------------------------------------------------

    def _run(self) -> None:
        collector = self.collector  # started by start(), before this thread
        try:
            self._loop(EventBatch(self._sink), collector)
        except BaseException as exc:  # noqa: BLE001 - past every handler: no step runs again
            self.failure = exc
            log.critical("engine thread died (%s: %s): no further step will run; the server "
                         "ends its calls and exits", type(exc).__name__, exc, exc_info=exc)
        finally:
            if collector is not None:
                collector.stop()

    def _loop(self, events: EventBatch, collector: CollectorPacer | None) -> None:
        idle = 0.0  # > 0: every live generation is far ahead of playback; wait that long
        while True:
            has_work = self._scheduler.has_work or self._ahead is not None
            block = not has_work or idle > 0
            timeout = idle or None
            if block and collector is not None:
                timeout = min(timeout or float("inf"), collector.idle_timeout())
            if not self._drain(events, block=block, timeout=timeout):
                break
            idle = 0.0
            if self._scheduler.has_work or self._ahead is not None:
                self.beat.begin()
                try:
                    idle = self._step(events)
                except FatalBackendError:
                    raise  # the device is lost for every row: the thread ends (_run)
                except Exception:  # a bug past the backend: fail loudly, keep the thread alive
                    log.exception("engine step failed; cancelling every running generation")
                    self._cancel_all()
                    self._stats_stale = True
                finally:
                    self.beat.end()
                if collector is None:
                    pass
                elif idle > 0:  # nothing could run (all parked or held back): idle time
                    collector.on_idle()
                else:  # while the device runs the next step
                    collector.after_step()
            elif collector is not None:
                collector.on_idle()
            going_idle = not self._scheduler.has_work or idle > 0
            self._publish_stats(going_idle=going_idle)
            if self.capabilities.runs_ahead:
                self.ahead.maybe_log(idle=going_idle)
            events.flush()
        events.flush()

    def _publish_stats(self, going_idle: bool) -> None:
        """The counters whenever something came or went; underrun_risk (a scan of every
        session) only when idle and at most every STATS_INTERVAL_S: under load a generation
        comes or goes nearly every step."""
        now = self._clock()
        if going_idle or now - self._stats_at >= STATS_INTERVAL_S:
            self._stats = self._scheduler.stats(now)
            self._stats_at = now
            self._stats_stale = False
        elif self._stats_stale:
            self._stats = self._scheduler.stats(risk=self._stats.underrun_risk)
            self._stats_stale = False

    def _drain(self, events: EventBatch, block: bool, timeout: float | None = None) -> bool:
        """Apply queued commands (waiting up to `timeout` for one when `block`); False once
        stop was requested."""
        if block:  # waiting for work is not part of the next step's period
            self._last_step_end = None
        try:
            cmd = self._commands.get(timeout=timeout) if block else self._commands.get_nowait()
        except queue.Empty:
            return True
        self._stats_stale = True  # a submit or a cancel: waiting, rejected or cancelled moved
        while True:
            if cmd is _STOP:
                return False
            if isinstance(cmd, _Submit):
                self._admit(cmd, events)
            elif isinstance(cmd, _WriteAdapter):
                self._write_adapter(cmd)
            else:
                gen = self._scheduler.cancel(cmd.gen_id, self._clock())
                if gen is not None:  # was still waiting: ends now, it never held a slot
                    self.flusher.drop(gen.gen_id, self._finish(gen))
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                return True

    def _write_adapter(self, cmd: _WriteAdapter) -> None:
        """A pool slot rewritten between steps (write_adapter). A FatalBackendError ends the
        thread as a step's would; any other error fails the write alone."""
        if not cmd.done.set_running_or_notify_cancel():
            return
        try:
            self.backend.write_adapter(cmd.slot, cmd.adapter)
        except FatalBackendError as exc:
            cmd.done.set_exception(exc)
            raise
        except Exception as exc:  # noqa: BLE001 - the caller (the admin call) reports it
            log.error("writing LoRA adapter slot %d failed", cmd.slot, exc_info=exc)
            cmd.done.set_exception(exc)
        else:
            cmd.done.set_result(None)

    def _admit(self, cmd: _Submit, events: EventBatch) -> None:
        req = cmd.request
        problem = _row_problem(req, self.capabilities.max_adapters)
        if problem is not None:
            events.add(Rejected(cmd.gen_id, code=Status.INVALID_ARGUMENT, reason=problem))
            return
        seed = req.sampling.seed
        if seed is None:
            seed = (self._seed * 0x100000001B3 + cmd.gen_id) & 0xFFFFFFFFFFFF
        # Backends hold seeds in 64 bits: no caller can hand a backend one that overflows.
        seed = reduce_seed(seed)
        gen = Generation(gen_id=cmd.gen_id, request=req, arrival=cmd.arrival, seed=seed)
        try:  # the scheduler fits max_tokens to the slot, or refuses a prompt that cannot fit
            self._scheduler.add(gen)
        except PromptTooLong as exc:
            events.add(Rejected(cmd.gen_id, code=Status.INVALID_ARGUMENT, reason=str(exc)))
        except AdmissionError as exc:
            events.add(Rejected(cmd.gen_id, reason=str(exc)))

    def _step(self, events: EventBatch) -> float:
        """One engine step; returns how long to wait before the next when nothing could run.

        With a backend that runs ahead, the step is the one launched last time when there
        is one; the next is planned and launched (Scheduler.schedule with the step in
        flight) before this one's tokens are read, so the device never waits for the
        host's work between them, whatever joins or leaves: new, cancelled and finished
        generations change the step after next."""
        if self._last_step_end is None:  # the first step after a wait: its period starts now
            self._last_step_end = self._clock()
        if self._ahead is not None:
            plan, handle = self._ahead
            self._ahead = None
            self._launch_next(events, plan)
            return self._finish_step(plan, self._collect(plan, handle))
        plan = self._plan(events, None)
        if plan.empty and not self._scheduler.pool.num_draining:
            self.ahead.not_next("idle")
            return plan.idle_s
        # (an empty plan still steps while slots drain: the backend confirms their ends)
        if self.capabilities.runs_ahead and not plan.empty:
            try:
                handle = self.backend.launch(plan)
            except FatalBackendError:
                raise
            except Exception as exc:  # noqa: BLE001 - not retry_safe: the step's rows fail
                return self._finish_step(plan, self._failed(plan.rows, exc))
            self.ahead.launched(False)
            self._launch_next(events, plan)
            result = self._collect(plan, handle)
        else:
            result = self._isolated_step(plan)
        return self._finish_step(plan, result)

    def _plan(self, events: EventBatch, in_flight: StepPlan | None) -> StepPlan:
        """Scheduler.schedule, and what it decided told: refusals and admissions out at
        once, released generations back to the backend and ended at the flusher."""
        now = self._clock()
        plan = self._scheduler.schedule(now, in_flight)
        if plan.admitted or plan.released or plan.refused:
            self._stats_stale = True
        for gen, reason in plan.refused:
            events.add(Rejected(gen.gen_id, reason=reason))
        for gen in plan.admitted:
            gen.admitted_at = now
            events.add(Admitted(gen.gen_id, gen.slot))
        if plan.admitted:
            # out before this step's frames reach the flusher, whose thread emits the audio:
            # a generation's stream is [Admitted] AudioEvent*, in that order
            events.flush()
        if plan.released:
            self._scheduler.freed(self.backend.release([gen.gen_id for gen in plan.released]))
            for gen in plan.released:
                self.flusher.drop(gen.gen_id, self._finish(gen))
        return plan

    def _launch_next(self, events: EventBatch, in_flight: StepPlan) -> None:
        """Plan the step after `in_flight` and launch it now, while `in_flight` runs; it is
        collected at the next _step. A launch that fails is forgotten: the next _step plans
        afresh once `in_flight` is read, and its rows lose nothing (what the plan admitted
        stays admitted and is prefilled then; what it released stays released)."""
        plan = self._plan(events, in_flight)
        if plan.empty:
            self.ahead.not_next("next_empty")
            return
        try:
            self._ahead = (plan, self.backend.launch(plan))
            self.ahead.launched(True)
        except FatalBackendError:
            raise
        except Exception as exc:  # noqa: BLE001
            log.error("launching the next step ahead failed; it is planned again after this "
                      "one", exc_info=exc)
            self.ahead.not_next("launch_failed")

    def _collect(self, plan: StepPlan, handle: object) -> StepResult:
        """The launched step's tokens (a backend that runs ahead); a failure fails its rows."""
        try:
            return self.backend.collect(handle)
        except Exception as exc:  # noqa: BLE001
            return self._failed(plan.rows, exc)

    def _finish_step(self, plan: StepPlan, result: StepResult) -> float:
        """The step's tokens to the scheduler, its frames and ends to the flusher."""
        now = self._clock()
        if self._on_step is not None and not plan.empty:
            self._on_step(plan.num_rows, now - self._last_step_end)
        self._last_step_end = now
        # rows that were to get their first token this step (once per generation: a few
        # per step at most), looked up while they still run
        firsts = [self._scheduler.get(r.gen_id) for r in plan.prefill] if plan.prefill else ()
        outcome = self._scheduler.update(plan, result, now)
        for gen in firsts:
            if gen is not None and gen.first_token_at is None and gen.num_generated:
                gen.first_token_at = now
        if outcome.finished or result.freed:
            self._stats_stale = True
        if outcome.finished:  # the backend frees (aborts) what it still holds for them
            self._scheduler.freed(self.backend.release([g.gen_id for g in outcome.finished]))
        # One hand-off per step (FramePush): the step's frames, as the scheduler cut them
        # from its batch arrays, and one wake-up of the flusher thread.
        pushes: list[FramePush] = []
        playout_update = self._scheduler.playout_update
        for gen, codes in outcome.frames:
            ended = gen.finish_reason in ("stop", "length")
            # The scheduler's playout clock rides with the frames (with the first ones, and
            # whenever it moved): the flusher's chunk sizes and decode order follow it.
            pushes.append(FramePush(gen.gen_id, codes, ended, playout_update(gen, now),
                                    self._finish(gen) if ended else None,
                                    None if gen.request.sampling.seed is None else gen.seed))
        for gen, playout in self._scheduler.playout_moved(now):  # an earlier segment ended
            pushes.append(FramePush(gen.gen_id, _NO_FRAMES, False, playout))
        with_frames = {g.gen_id for g, _ in outcome.frames}
        for gen in outcome.finished:
            if gen.finish_reason in ("stop", "length"):
                if gen.gen_id not in with_frames:
                    pushes.append(FramePush(gen.gen_id, _NO_FRAMES, True,
                                            finish=self._finish(gen)))
            else:
                self.flusher.drop(gen.gen_id, self._finish(gen, result.errors.get(gen.gen_id)))
        if pushes:
            self.flusher.push_many(pushes)
        return 0.0

    def _isolated_step(self, plan: StepPlan) -> StepResult:
        """backend.step(plan), failing only the rows that make it raise.

        A step that raises is retried without its suspects (the rows that joined this step:
        the others ran fine one step ago), then by halves, down to single rows: one bad row
        of 32 costs about 2 x log2(32) extra steps, once. Retrying is safe for backends
        whose step has no side effect before it can raise for a row (torch, sim:
        capabilities.retry_safe); for the others the whole step fails, as it must."""
        try:
            return self.backend.step(plan)
        except FatalBackendError:
            raise  # no row caused it and none would pass a retry
        except Exception as exc:  # noqa: BLE001 - one bad row must not fail its neighbours
            if len(plan.rows) <= 1 or not self.capabilities.retry_safe:
                return self._failed(plan.rows, exc)
            self.isolation_retries += 1
        merged = StepResult()
        for part in _split(plan):
            sub = self._isolated_step(part)
            merged.tokens.update(sub.tokens)
            if sub.decode_tokens is not None:  # by gen_id, as the whole plan's rows differ
                merged.tokens.update(zip(part.decode.gen_ids.tolist(),
                                         ((t,) for t in sub.decode_tokens.tolist())))
            merged.errors.update(sub.errors)
            merged.freed.extend(sub.freed)
        return merged

    def _failed(self, gens: tuple[StepRow, ...], exc: BaseException) -> StepResult:
        """Fail `gens` for `exc`: the client gets a short message with an error id, the log
        the whole exception with each generation's session. A FatalBackendError is no
        row's fault: it is raised on, and the engine thread ends."""
        if isinstance(exc, FatalBackendError):
            raise exc
        error_id = new_error_id()
        self.failed_rows += len(gens)
        log.error("backend step failed (error id %s) for %d generation(s): %s",
                  error_id, len(gens),
                  ", ".join(f"gen {g.gen_id} session {g.request.session_id} segment "
                            f"{g.request.segment_index}" for g in gens),
                  exc_info=exc)
        return StepResult(errors={g.gen_id: _internal(error_id) for g in gens})

    def _cancel_all(self) -> None:
        """Last resort after an unexpected error: end everything (slots free next step)."""
        error_id = new_error_id()
        log.error("engine bookkeeping failed (error id %s): ending %d running generations",
                  error_id, len(self._scheduler.running()))
        for gen in self._scheduler.running():
            self._scheduler.cancel(gen.gen_id, self._clock())
            self.flusher.drop(gen.gen_id, Finish("error", gen.num_prompt_tokens,
                                                 gen.num_generated, gen.num_frames,
                                                 _internal(error_id)))

    @staticmethod
    def _finish(gen: Generation, error: str | None = None) -> Finish:
        """How `gen` ended, for the flusher to put on its final event."""
        if gen.finish_reason == "error" and error is None:
            error = "the model emitted a token outside the audio grammar"
        return Finish(gen.finish_reason or "cancelled", gen.num_prompt_tokens,
                      gen.num_generated, gen.num_frames, error,
                      None if gen.admitted_at is None else gen.admitted_at - gen.arrival,
                      None if gen.first_token_at is None else gen.first_token_at - gen.arrival)
