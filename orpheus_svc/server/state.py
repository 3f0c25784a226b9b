"""Server-wide state owned by the asyncio loop: the runtime once loaded, readiness, counters,
the open calls and the watchdog that times them out.

    call opens --> ServerState.open_call() --(over server.max_sessions)--> RESOURCE_EXHAUSTED
                        |
    watchdog (one task while calls are open, ticking at a quarter of the smallest timeout):
        call.writing_since older than session.stalled_consumer_timeout_seconds
            --> call.stall(): its task is cancelled; the servicer ends it DEADLINE_EXCEEDED
        call.session idle (nothing to speak, no client message) for session.idle_timeout_seconds
            --> session.check_idle(): buffered text is spoken, then DEADLINE_EXCEEDED
        no config yet, session.idle_timeout_seconds after the call opened
            --> call.cut("idle"): its task is cancelled; DEADLINE_EXCEEDED

Everything here belongs to the event loop. Other threads (the Prometheus collector) read
`snapshot()`: an immutable MetricsSnapshot that the loop itself computes on their behalf,
so no other thread ever iterates the open calls or the counters while the loop changes them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from orpheus_svc import __version__
from orpheus_svc.config import Config
from orpheus_svc.core.status import Status
from orpheus_svc.runtime import Runtime


@dataclass(frozen=True)
class StatusSnapshot:
    serving: bool
    backend: str
    model: str
    active_sessions: int
    active_generations: int
    waiting_generations: int
    free_slots: int
    total_slots: int
    max_batch_size: int
    sessions_total: int
    generations_total: int
    rejected_total: int
    tokens_total: int
    steps_total: int
    grammar_violations: int
    audio_seconds_total: float
    uptime_seconds: float
    # Open calls with nothing to speak, waiting for the client (part of active_sessions).
    idle_sessions: int = 0
    max_sessions: int = 0                # server.max_sessions (0 = no limit)
    max_concurrent_streams: int = 0      # per connection (0 = gRPC's default)
    idle_timeout_seconds: float = 0.0
    stalled_consumer_timeout_seconds: float = 0.0
    sessions_refused_total: int = 0      # refused at once: server.max_sessions reached
    idle_timeouts_total: int = 0
    stalled_timeouts_total: int = 0
    failed_generations_total: int = 0    # failed by a backend or codec error
    server_version: str = __version__    # the orpheus-svc release (orpheus_svc/__init__.py)


@dataclass(frozen=True)
class MetricsSnapshot:
    """What a scrape reads: the status plus what only metrics show, frozen at one moment."""

    status: StatusSnapshot
    errors: tuple[tuple[str, int], ...]  # (status code name, calls), sorted by name
    underrun_risk: int
    row_budget: int = 0  # generations the real-time row budget lets run (0: off / unmeasured)
    # HTTP-edge requests and connections refused or ended by a bound (http.*), by reason
    http_refused: tuple[tuple[str, int], ...] = ()


class OpenCall:
    """One open StreamingSynthesize/Synthesize call, as the watchdog sees it."""

    __slots__ = ("session_id", "rpc", "task", "session", "writing_since", "cut_by",
                 "opened_at", "writes", "stalled_for")

    def __init__(self, session_id: str, rpc: str, task: "asyncio.Task | None") -> None:
        self.session_id = session_id
        self.rpc = rpc
        self.task = task
        self.session: Any = None  # the StreamSession once the config was accepted
        self.writing_since: float | None = None  # loop time a write to the client began
        self.cut_by: str | None = None  # "stalled" | "idle" once the watchdog cut the call
        self.opened_at = time.monotonic()
        self.writes = 0  # messages the client has taken (writes that completed)
        self.stalled_for = 0.0  # how long the write the watchdog cut had waited

    @property
    def stalled(self) -> bool:
        return self.cut_by == "stalled"

    def cut(self, why: str, waited: float = 0.0) -> None:
        """A time limit ran out ("stalled": one write to the client waited `waited` s;
        "idle": no config came): cancel the handler, which then ends the call
        DEADLINE_EXCEEDED."""
        if self.cut_by is None and self.task is not None:
            self.cut_by = why
            self.stalled_for = waited
            self.task.cancel()

    def stall_reason(self, limit: float) -> str:
        """What the stalled-consumer timeout measured, for the client and the log: the
        wait of one write, not whether the client read anything before (a client that
        reads slower than real time fills its window and stalls a write just the same)."""
        return (f"one write of audio waited {self.stalled_for:.1f} s for the client to take "
                f"it (session.stalled_consumer_timeout_seconds={limit:g}), after "
                f"{self.writes} messages had gone out: the client reads audio slower than "
                "it is made, or has stopped reading; its generations were cancelled")


class ServerState:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.runtime: Runtime | None = None
        self.serving = False
        self.started_at = time.monotonic()
        self.active_sessions = 0
        self.sessions_total = 0
        self.audio_seconds_total = 0.0
        self.outcomes: Counter[str] = Counter()
        # calls that ended with a status other than OK, by its name ("cancelled": by the client)
        self.errors: Counter[str] = Counter()
        self.metrics = None  # server/metrics.py Metrics, set by the app
        self.tracing = None  # telemetry/tracing.py Tracing, set by the app when tracing is on
        self.calls: set[OpenCall] = set()
        self.refused: Counter[str] = Counter()   # reason -> calls refused at once
        self.timeouts: Counter[str] = Counter()  # "idle" | "stalled" -> calls ended
        # HTTP edge: requests/connections refused or ended by an http.* bound, by reason
        # (http/limits.py names them)
        self.http_refused: Counter[str] = Counter()
        self._watchdog: asyncio.Task | None = None
        # the owning loop (set by the app when it starts; found here when built on it)
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None
        self._published = self.publish()  # nothing open yet: safe from any thread

    # -- open calls -----------------------------------------------------------------------

    def open_call(self, call: OpenCall) -> str | None:
        """Count `call` as open; or, when server.max_sessions calls are open, the reason
        to refuse it (it is then not counted)."""
        cap = self.config.server.max_sessions
        if cap and len(self.calls) >= cap:
            self.refused["max_sessions"] += 1
            return (f"server is at its limit of {cap} open calls (server.max_sessions); "
                    "retry later or on another replica")
        self.calls.add(call)
        self.session_started()
        if self._watchdog is None or self._watchdog.done():
            if self._tick() > 0:
                self._watchdog = asyncio.get_running_loop().create_task(self._watch())
        return None

    def close_call(self, call: OpenCall, outcome: str) -> None:
        if call in self.calls:
            self.calls.discard(call)
            self.session_ended(outcome)

    def idle_sessions(self) -> int:
        return sum(1 for c in self.calls if c.session is not None and c.session.idle)

    def _tick(self) -> float:
        s = self.config.session
        limits = [t for t in (s.idle_timeout_seconds, s.stalled_consumer_timeout_seconds) if t > 0]
        return min(max(min(limits) / 4, 0.01), 1.0) if limits else 0.0

    async def _watch(self) -> None:
        """Runs while calls are open; ends itself when none are left."""
        s = self.config.session
        loop = asyncio.get_running_loop()
        while self.calls:
            await asyncio.sleep(self._tick())
            now = loop.time()
            for call in list(self.calls):
                stall = s.stalled_consumer_timeout_seconds
                idle = s.idle_timeout_seconds
                if (stall > 0 and call.writing_since is not None
                        and now - call.writing_since >= stall):
                    call.cut("stalled", now - call.writing_since)
                elif idle > 0 and call.session is not None:
                    call.session.check_idle(now, idle)
                elif idle > 0 and call.rpc == "StreamingSynthesize" \
                        and now - call.opened_at >= idle:
                    call.cut("idle")  # no config yet

    def runtime_or_none(self) -> Runtime | None:
        return self.runtime if self.serving else None

    def session_started(self) -> None:
        self.active_sessions += 1
        self.sessions_total += 1

    def session_ended(self, outcome: str) -> None:
        self.active_sessions -= 1
        self.outcomes[outcome] += 1
        if outcome in ("idle", "stalled"):
            self.timeouts[outcome] += 1
            outcome = Status.DEADLINE_EXCEEDED
        if outcome != "ok":
            self.count_error(outcome)

    def count_error(self, code: Status | str) -> None:
        self.errors[str(code)] += 1

    def observe_ttfa(self, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.ttfa.observe(seconds)

    # -- snapshots for other threads --------------------------------------------------------

    def publish(self) -> MetricsSnapshot:
        """Loop only: freeze the state now (and keep it as the latest published)."""
        engine = self.runtime.engine.stats() if self.runtime is not None else None
        self._published = MetricsSnapshot(
            status=self.status(), underrun_risk=engine.underrun_risk if engine else 0,
            row_budget=engine.row_budget if engine else 0,
            errors=tuple(sorted(self.errors.items())),
            http_refused=tuple(sorted(self.http_refused.items())))
        return self._published

    def snapshot(self, timeout: float = 2.0) -> MetricsSnapshot:
        """Any thread: a fresh snapshot, computed by the loop. When the loop does not answer
        within `timeout` (busy, or closed at shutdown), the latest one it published."""
        loop = self.loop
        if loop is None or self._on_loop_thread(loop):
            return self.publish()
        done: concurrent.futures.Future = concurrent.futures.Future()

        def on_loop() -> None:
            if not done.cancelled():
                done.set_result(self.publish())
        try:
            loop.call_soon_threadsafe(on_loop)
            return done.result(timeout)
        except (RuntimeError, concurrent.futures.TimeoutError):  # loop closed / too busy
            done.cancel()
            return self._published

    @staticmethod
    def _on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
        try:
            return asyncio.get_running_loop() is loop
        except RuntimeError:
            return False

    def add_audio_seconds(self, seconds: float) -> None:
        self.audio_seconds_total += seconds

    def status(self) -> StatusSnapshot:
        rt = self.runtime
        e = self.config.engine
        st = rt.engine.stats() if rt is not None else None
        return StatusSnapshot(
            serving=self.serving, backend=e.backend,
            model=rt.model_name if rt is not None else "",
            active_sessions=self.active_sessions,
            active_generations=st.active if st else 0, waiting_generations=st.waiting if st else 0,
            free_slots=st.free_slots if st else 0,
            total_slots=st.total_slots if st else e.max_sessions,  # the backend's slots
            # the engine's effective batch cap (a backend may raise the configured one)
            max_batch_size=rt.engine.settings.max_batch_size if rt is not None
            else e.max_batch_size, sessions_total=self.sessions_total,
            generations_total=st.submitted if st else 0, rejected_total=st.rejected if st else 0,
            tokens_total=st.tokens if st else 0, steps_total=st.steps if st else 0,
            grammar_violations=st.grammar_violations if st else 0,
            audio_seconds_total=self.audio_seconds_total,
            uptime_seconds=time.monotonic() - self.started_at,
            idle_sessions=self.idle_sessions(), max_sessions=self.config.server.max_sessions,
            max_concurrent_streams=self.config.server.max_concurrent_streams,
            idle_timeout_seconds=self.config.session.idle_timeout_seconds,
            stalled_consumer_timeout_seconds=self.config.session.stalled_consumer_timeout_seconds,
            sessions_refused_total=sum(self.refused.values()),
            idle_timeouts_total=self.timeouts["idle"],
            stalled_timeouts_total=self.timeouts["stalled"],
            failed_generations_total=self._failed_generations())

    def _failed_generations(self) -> int:
        rt = self.runtime
        return getattr(rt.engine, "failed_rows", 0) + getattr(rt.router, "failed_audio", 0) \
            if rt is not None else 0
