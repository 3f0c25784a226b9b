"""Server-wide state owned by the asyncio loop: the runtime once loaded, readiness, counters."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from orpheus_svc.config import Config
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
        self.errors: Counter[str] = Counter()  # grpc status code name -> calls
        self.metrics = None  # server/metrics.py Metrics, set by the app

    def runtime_or_none(self) -> Runtime | None:
        return self.runtime if self.serving else None

    def session_started(self) -> None:
        self.active_sessions += 1
        self.sessions_total += 1

    def session_ended(self, outcome: str) -> None:
        self.active_sessions -= 1
        self.outcomes[outcome] += 1
        if outcome != "ok":
            self.count_error(outcome)

    def count_error(self, code: str) -> None:
        self.errors[code] += 1

    def observe_ttfa(self, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.ttfa.observe(seconds)

    def underrun_risk(self) -> int:
        return self.runtime.core.stats().underrun_risk if self.runtime is not None else 0

    def add_audio_seconds(self, seconds: float) -> None:
        self.audio_seconds_total += seconds

    def status(self) -> StatusSnapshot:
        rt = self.runtime
        e = self.config.engine
        st = rt.core.stats() if rt is not None else None
        return StatusSnapshot(
            serving=self.serving, backend=e.backend,
            model=rt.model_name if rt is not None else "",
            active_sessions=self.active_sessions,
            active_generations=st.active if st else 0, waiting_generations=st.waiting if st else 0,
            free_slots=st.free_slots if st else 0, total_slots=e.max_sessions,
            max_batch_size=e.max_batch_size, sessions_total=self.sessions_total,
            generations_total=st.submitted if st else 0, rejected_total=st.rejected if st else 0,
            tokens_total=st.tokens if st else 0, steps_total=st.steps if st else 0,
            grammar_violations=st.grammar_violations if st else 0,
            audio_seconds_total=self.audio_seconds_total,
            uptime_seconds=time.monotonic() - self.started_at)
