"""EngineLoop: the thread that owns the scheduler, the slot pool and the backend.

Message based on both sides, so it can move to its own process without a rewrite:

    submit(request) / cancel(gen_id)  ->  command queue  ->  engine thread
    write_adapter(slot, adapter)      ->  the same queue: a LoRA pool slot rewritten between steps
    add_prefix(ids) / drop_prefix(ids) ->  the same queue: a reference voice's KV in the prefix pool
    engine thread  ->  sink([Rejected ...])                 refusals (before a slot)
    engine thread  ->  flusher.push_many([FramePush ...])  once per step / drop(gen_id, finish)
    flusher thread ->  sink([AudioEvent ...])              one call per decode batch

A step is three calls; the loop only moves what they return (refusals to the sink, pushes
and drops to the flusher, ended generations back to the backend: runner.release, whose
answer the slot pool reads through Scheduler.freed):

    plan = scheduler.schedule(now, runner.in_flight)        core/scheduler.py
    done = runner.run(plan)                                 engine/runner.py
    out  = scheduler.update(done.plan, done.result, now)    core/output.py StepOutput

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

from orpheus_svc.core.errors import new_error_id
from orpheus_svc.core.events import EventBatch, EventSink, Finish, FramePush, Rejected
from orpheus_svc.core.generation import Generation
from orpheus_svc.core.output import SchedulerStats, StepOutput, finish_of
from orpheus_svc.core.prompt import PromptTooLong
from orpheus_svc.core.request import GenerationRequest, reduce_seed
from orpheus_svc.core.admission import AdmissionError
from orpheus_svc.core.scheduler import Scheduler
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.status import Status
from orpheus_svc.core.step import Backend, FatalBackendError, StepPlan
from orpheus_svc.engine.collector import CollectorPacer
from orpheus_svc.engine.intake import effective_settings, row_problem
from orpheus_svc.engine.runner import Ran, StepRunner, internal
from orpheus_svc.engine.watchdog import StepBeat
from orpheus_svc.threads import os_named

log = logging.getLogger(__name__)

# stats() is republished at least this often while generations run (Scheduler.stats scans
# every session: too costly after every step), and at once whenever a generation was
# submitted, admitted, rejected, cancelled or ended, and whenever the loop goes idle:
# GetStatus never misses a slot freeing.
STATS_INTERVAL_S = 0.05


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


class _Prefix(NamedTuple):
    """Command: add the prompt prefix `ids` to the backend's prefix pool (`add`) or let it
    go, between two steps; `done` resolves once done (or with why it failed)."""
    add: bool
    ids: tuple[int, ...]
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
        # called with each step's batch size and period (metrics: StepOutput.period_s)
        self._on_step = on_step
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
        self._runner = StepRunner(backend)
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._ids = itertools.count(1)
        self._stats = self._scheduler.stats()
        self._stats_at = float("-inf")  # clock time of the last publication
        self._stats_stale = False  # a generation came, went or changed state since then
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

    def add_prefix(self, ids: Sequence[int]) -> Future:
        """Queue the computation of the prompt prefix `ids` (a reference voice's) into the
        backend's prefix pool, between two steps (Backend.add_prefix). Returns a Future:
        resolved once it is held, or with the error (core/prefix_book.py PrefixPoolFull
        when it does not fit; RuntimeError without a pool or when the engine failed)."""
        return self._prefix_command(True, ids)

    def drop_prefix(self, ids: Sequence[int]) -> Future:
        """Queue the release of a prefix add_prefix computed (generations admitted later
        compute it themselves). Returns a Future resolved once it is let go."""
        return self._prefix_command(False, ids)

    def _prefix_command(self, add: bool, ids: Sequence[int]) -> Future:
        done: Future = Future()
        if not self.capabilities.prefix_pool_tokens:
            done.set_exception(RuntimeError(
                f"the {self.capabilities.name} backend has no prefix pool "
                f"(engine.prefix_pool_mb is 0, or the backend keeps none)"))
        elif self.failure is not None:
            done.set_exception(RuntimeError("the engine failed; no prefix can be written"))
        else:
            self._commands.put(_Prefix(add, tuple(ids), done))
        return done

    def stats(self) -> SchedulerStats:
        return self._stats

    # Read as racy, monotone snapshots (GetStatus, metrics): engine/runner.py keeps them.
    @property
    def ahead(self):
        return self._runner.ahead

    @property
    def failed_rows(self) -> int:
        return self._runner.failed_rows

    @property
    def isolation_retries(self) -> int:
        return self._runner.isolation_retries

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
            block = not self._has_work() or idle > 0
            timeout = idle or None
            if block and collector is not None:
                timeout = min(timeout or float("inf"), collector.idle_timeout())
            if not self._drain(events, block=block, timeout=timeout):
                break
            idle = 0.0
            if self._has_work():
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
                if collector is not None:  # idle > 0: nothing could run (all parked or
                    # held back): idle time; else while the device runs the next step
                    collector.on_idle() if idle > 0 else collector.after_step()
            elif collector is not None:
                collector.on_idle()
            going_idle = not self._scheduler.has_work or idle > 0
            self._publish_stats(going_idle=going_idle)
            if self.capabilities.runs_ahead:
                self.ahead.maybe_log(idle=going_idle)
            events.flush()
        events.flush()

    def _has_work(self) -> bool:
        return self._scheduler.has_work or self._runner.in_flight is not None

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
            elif isinstance(cmd, _Prefix):
                self._prefix(cmd)
            else:
                gen = self._scheduler.cancel(cmd.gen_id, self._clock())
                if gen is not None:  # was still waiting: ends now, it never held a slot
                    self.flusher.drop(gen.gen_id, finish_of(gen))
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

    def _prefix(self, cmd: _Prefix) -> None:
        """A prefix added to or dropped from the pool between steps (add_prefix). A
        FatalBackendError ends the thread as a step's would; any other error (a full pool)
        fails the command alone."""
        if not cmd.done.set_running_or_notify_cancel():
            return
        try:
            if cmd.add:
                self.backend.add_prefix(cmd.ids)
            else:
                self.backend.drop_prefix(cmd.ids)
        except FatalBackendError as exc:
            cmd.done.set_exception(exc)
            raise
        except Exception as exc:  # noqa: BLE001 - the caller (a registration) reports it
            cmd.done.set_exception(exc)
        else:
            cmd.done.set_result(None)

    def _admit(self, cmd: _Submit, events: EventBatch) -> None:
        req = cmd.request
        problem = row_problem(req, self.capabilities.max_adapters)
        if problem is not None:
            events.add(Rejected(cmd.gen_id, code=Status.INVALID_ARGUMENT, reason=problem))
            return
        if req.prefix_len and self.capabilities.prefix_pool_tokens:
            # the prefill budget counts only what the step computes (core/order.py)
            req = dataclasses.replace(req, prefix_cached=self.backend.holds_prefix(
                req.prompt_ids[:req.prefix_len]))
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

        A backend that runs ahead launches a step before the one in flight is read
        (engine/runner.py): the step after a wait is launched alone and the next planned at
        once behind it, so the device never waits for the host's work between them."""
        done = None
        while done is None:
            in_flight = self._runner.in_flight
            plan = self._scheduler.schedule(self._clock(), in_flight)
            self._tell(plan, events)
            if in_flight is None and plan.empty and not self._scheduler.pool.num_draining:
                self._runner.idle()
                return plan.idle_s
            done = self._runner.run(plan)
        self._move(done, self._scheduler.update(done.plan, done.result, self._clock()))
        return 0.0

    def _tell(self, plan: StepPlan, events: EventBatch) -> None:
        """What schedule decided besides the rows: refusals to the sink, cancelled rows
        back to the backend and ended at the flusher."""
        if plan.admitted or plan.released or plan.refused:
            self._stats_stale = True
        for gen, reason in plan.refused:
            events.add(Rejected(gen.gen_id, reason=reason))
        if plan.released:
            self._release(plan.released)
            for gen in plan.released:
                self.flusher.drop(gen.gen_id, finish_of(gen))

    def _move(self, done: Ran, out: StepOutput) -> None:
        """A step's output on: its period to the metrics, its ends back to the backend, its
        pushes to the flusher in one hand-off (one wake-up of its thread), its drops."""
        if self._on_step is not None and not done.plan.empty:
            self._on_step(done.plan.num_rows, out.period_s)
        if out.finished or done.result.freed:
            self._stats_stale = True
        if out.finished:  # the backend frees (aborts) what it still holds for them
            self._release(out.finished)
        for gen_id, finish in out.drops:
            self.flusher.drop(gen_id, finish)
        if out.pushes:
            self.flusher.push_many(out.pushes)

    def _release(self, gens) -> None:
        self._scheduler.freed(self._runner.release([g.gen_id for g in gens]))

    def _cancel_all(self) -> None:
        """Last resort after an unexpected error: end everything (slots free next step)."""
        error_id = new_error_id()
        log.error("engine bookkeeping failed (error id %s): ending %d running generations",
                  error_id, len(self._scheduler.running()))
        for gen in self._scheduler.running():
            self._scheduler.cancel(gen.gen_id, self._clock())
            self.flusher.drop(gen.gen_id, Finish("error", gen.num_prompt_tokens,
                                                 gen.num_generated, gen.num_frames,
                                                 internal(error_id)))
