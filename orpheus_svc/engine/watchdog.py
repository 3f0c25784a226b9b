"""Slow or dead: what a watcher on another thread or process can tell about the engine.

    engine thread:   beat.begin() -> one step -> beat.end()       (StepBeat, engine/loop.py)
    a watcher tick:  EngineWatch.poll() -> seconds the current step has run so far
                     EngineLoop.failure -> why the thread died (an exception past its
                                           handlers, or a FatalBackendError), else None

A step that runs long is slow, not dead: this module only measures. What a measure means
(health NOT_SERVING, open calls ended, the process exits) is the owners' policy, with the
bounds server.engine_stall_timeout_seconds and server.engine_stall_exit_seconds:
server/engine_guard.py (single topology), ipc/frontend.py and app/topology.py (split);
docs/deploy.md, "Faults of our own processes".

Time the watcher did not run is not counted (StallMeter): when the whole process is frozen
(SIGSTOP, a container or VM pause, a suspended host) the watcher's ticks stop too, and a
gap between two ticks counts at most `max_gap` seconds. So a process paused for a minute
in the middle of a step is not judged stalled for a minute when it wakes.
"""

from __future__ import annotations

import time
from typing import Hashable, Protocol

# A watcher that ticks every quarter second counts a longer gap between two of its ticks
# as this much: its own process was frozen (or starved) meanwhile, not the engine alone.
MAX_GAP_S = 1.0


class StepBeat:
    """Written by the engine thread around each step, read by watchers on other threads
    without a lock: `state` is one tuple (steps begun, a step is running now), replaced
    whole, so a reader never sees half of an update."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state: tuple[int, bool] = (0, False)

    def begin(self) -> None:
        self.state = (self.state[0] + 1, True)

    def end(self) -> None:
        self.state = (self.state[0], False)


class StallMeter:
    """How long a condition has held, counted by its watcher's own ticks.

    update(now, holding, key) once per tick: the seconds since `holding` became true with
    the same `key` (a new key, e.g. the next step's number, starts again from 0). Each gap
    between two ticks adds at most `max_gap` seconds (see the module's docstring)."""

    def __init__(self, max_gap: float = MAX_GAP_S) -> None:
        self.max_gap = max_gap
        self.seconds = 0.0
        self._key: Hashable = None
        self._at: float | None = None

    def update(self, now: float, holding: bool, key: Hashable = None) -> float:
        if not holding or key != self._key:
            self.seconds = 0.0
        elif self._at is not None:
            self.seconds += min(max(now - self._at, 0.0), self.max_gap)
        self._key, self._at = key, now
        return self.seconds


class Watched(Protocol):
    """What EngineWatch reads of an EngineLoop."""

    beat: StepBeat
    failure: BaseException | None


class EngineWatch:
    """Polled by one watcher thread: how long the engine's current step has run
    (`stalled_s`, 0 between steps), and `failure` once the engine thread died."""

    def __init__(self, engine: Watched, max_gap: float = MAX_GAP_S) -> None:
        self._engine = engine
        self._meter = StallMeter(max_gap)
        self.stalled_s = 0.0  # the last poll's answer, for other readers (heartbeats)

    def poll(self, now: float | None = None) -> float:
        seq, running = self._engine.beat.state
        now = time.monotonic() if now is None else now
        self.stalled_s = self._meter.update(now, running, seq)
        return self.stalled_s

    @property
    def failure(self) -> BaseException | None:
        return self._engine.failure


# Health turns NOT_SERVING this far into a stall (the split topology's old heartbeat
# timeout): load balancers and readiness probes route new sessions elsewhere meanwhile.
NOT_SERVING_AFTER_S = 2.0


class StallPolicy:
    """What a stall of `stalled_s` seconds means, the same in both topologies
    (docs/deploy.md, "Faults of our own processes"):

        stalled_s >= min(2 s, timeout_s)    health NOT_SERVING (SERVING again below it)
        stalled_s >= timeout_s              open calls end UNAVAILABLE (new ones too)
        stalled_s >= exit_s (when > 0)      the engine cannot recover: the process exits
    """

    def __init__(self, timeout_s: float, exit_s: float = 0.0,
                 not_serving_after_s: float = NOT_SERVING_AFTER_S) -> None:
        self.timeout_s = timeout_s
        self.exit_s = exit_s
        self.not_serving_after_s = min(not_serving_after_s, timeout_s)

    @classmethod
    def from_config(cls, server) -> "StallPolicy":
        """From a ServerConfig (server.engine_stall_*)."""
        return cls(server.engine_stall_timeout_seconds, server.engine_stall_exit_seconds)

    def healthy(self, stalled_s: float) -> bool:
        return stalled_s < self.not_serving_after_s

    def ends_calls(self, stalled_s: float) -> bool:
        return stalled_s >= self.timeout_s

    def exits(self, stalled_s: float) -> bool:
        return self.exit_s > 0 and stalled_s >= self.exit_s

    def reason(self, stalled_s: float) -> str:
        """The status message of a call ended by a stall."""
        return (f"the engine made no progress for {stalled_s:.1f} s "
                f"(server.engine_stall_timeout_seconds={self.timeout_s:g}); retry "
                "(another replica)")
