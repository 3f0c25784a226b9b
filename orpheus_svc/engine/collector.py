"""CPython's cyclic garbage collector, run by the engine thread at the engine's pace.

Left automatic, the collector runs in whichever thread happens to cross its allocation
threshold, and it holds the GIL for the whole pass. Under load that is often the engine
thread in the middle of a step, and the passes are long: the threshold counts
allocations minus frees, so while old objects die (calls ending) the young generation
grows to ten thousand objects and more before a pass is due. Such a pass takes
milliseconds (young) to tens of milliseconds (middle, full), and one that runs in the engine
thread makes its step late ("host-bound").

So, while the engine runs, automatic collection is off and the engine thread collects
right after a step, while the device works on the next one:

    every young_every steps    gc.collect(0)   the young generation: a few hundred objects
    every middle_every steps   gc.collect(1)   young and middle
    full pass, gc.collect(2)   when the engine has been idle for full_after_idle_s and
                               full_min_interval_s have passed since the last, or under
                               unbroken load every full_max_interval_s (one long pause)

Almost no cyclic garbage outlives the young passes, so full passes can be rare. An idle
engine still wakes every idle_check_s: what the front-end allocated meanwhile (health
checks, refused calls) gets a young and middle pass once it passes CPython's own threshold
(700), and a full pass once full_min_interval_s have passed.

Process-wide: the first pacer to start turns automatic collection off, the last to stop
turns it back on if it was on before (tests run several engines in one process).
"""

from __future__ import annotations

import gc
import threading
import time
from dataclasses import dataclass
from typing import Callable

_lock = threading.Lock()
# per collector module (the real gc, or a test's stand-in): [pacers running, was enabled]
_switches: dict[int, list] = {}


@dataclass(frozen=True)
class CollectorSettings:
    young_every: int = 2
    middle_every: int = 16
    full_after_idle_s: float = 0.1
    full_min_interval_s: float = 60.0
    full_max_interval_s: float = 600.0
    idle_check_s: float = 1.0
    idle_young_threshold: int = 700


class CollectorPacer:
    """Driven by the engine (engine/loop.py): start() before its thread runs, stop() when
    the thread ends; after_step() after every step, idle_timeout() and on_idle() while
    idle (engine thread)."""

    def __init__(self, settings: CollectorSettings = CollectorSettings(), *,
                 clock: Callable[[], float] = time.monotonic, collector=gc) -> None:
        self.settings = settings
        self._clock = clock
        self._gc = collector
        self._steps = 0
        self._last_step = float("-inf")
        self._last_full = float("-inf")
        self._stepped_since_full = False
        self._on = False  # this pacer holds automatic collection off (under _lock)
        # counts and seconds per generation (read as a racy, monotone snapshot)
        self.passes = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]

    def start(self) -> None:
        """Automatic collection off (process-wide) until the last running pacer stops."""
        with _lock:
            if self._on:
                return
            self._on = True
            switch = _switches.setdefault(id(self._gc), [0, True])
            if switch[0] == 0:
                switch[1] = self._gc.isenabled()
                self._gc.disable()
            switch[0] += 1
        self._last_full = self._clock()

    def stop(self) -> None:
        """Idempotent: the engine thread calls it when it ends, and EngineLoop.stop() too
        when that thread does not end in time (stuck in a device call), so that automatic
        collection does not stay off for the rest of the process."""
        with _lock:
            if not self._on:
                return
            self._on = False
            switch = _switches[id(self._gc)]
            switch[0] -= 1
            if switch[0] == 0:
                del _switches[id(self._gc)]
                if switch[1]:
                    self._gc.enable()

    def after_step(self) -> None:
        """A step ran: a young or middle pass when due, or a full one under unbroken load."""
        s = self.settings
        self._steps += 1
        now = self._clock()
        self._last_step = now
        self._stepped_since_full = True
        if now - self._last_full >= s.full_max_interval_s:
            self._collect(2, now)
        elif self._steps % s.middle_every == 0:
            self._collect(1, now)
        elif self._steps % s.young_every == 0:
            self._collect(0, now)

    def idle_timeout(self) -> float:
        """How long an idle engine may block before on_idle() may have work to do."""
        s = self.settings
        if not self._stepped_since_full:
            return s.idle_check_s
        now = self._clock()
        due = max(self._last_step + s.full_after_idle_s, self._last_full + s.full_min_interval_s)
        return min(max(due - now, 0.0), s.idle_check_s)

    def on_idle(self) -> None:
        """The engine found no work when its wait ended: a full pass if one is due, else a
        young and middle one if enough was allocated meanwhile."""
        s = self.settings
        now = self._clock()
        if now - self._last_step < s.full_after_idle_s:
            return
        allocated = self._gc.get_count()[0]
        if now - self._last_full >= s.full_min_interval_s and (
                self._stepped_since_full or allocated > 0):
            self._collect(2, now)
        elif allocated >= s.idle_young_threshold:
            self._collect(1, now)

    def _collect(self, generation: int, now: float) -> None:
        t0 = time.perf_counter()
        self._gc.collect(generation)
        self.seconds[generation] += time.perf_counter() - t0
        self.passes[generation] += 1
        if generation == 2:
            self._last_full = now
            self._stepped_since_full = False
