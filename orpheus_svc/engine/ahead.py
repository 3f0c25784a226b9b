"""Whether each step ran ahead, and why not: the engine loop's record for a
backend that runs ahead (core/step.py BackendCapabilities.runs_ahead). A step runs ahead when
it was launched while the step before it was still on the device; one that was not leaves the
device idle for the host's work between the two. Engine thread only; read as a racy snapshot.

Why a step did not run ahead (the reasons, in the order they are checked):
    idle           no step was in flight when it was planned: the first step after the
                   engine waited for work (a command, a parked session's wake time)
    next_empty     the step before it had nothing to run after it when it was planned (every
                   row it held ended by length, or everything else was parked); what came
                   next was planned once its tokens were known
    launch_failed  launching it ahead raised (logged); it was planned again once the step
                   before it was read
"""

from __future__ import annotations

import logging
import time
from collections import Counter

log = logging.getLogger(__name__)

REASONS = ("idle", "next_empty", "launch_failed")
LOG_EVERY_S = 10.0       # while the engine is busy
LOG_IDLE_EVERY_S = 1.0   # when it goes idle (the end of a load: its whole record)


class AheadRecord:
    def __init__(self, clock=time.monotonic) -> None:
        self.ahead = 0                 # steps launched while another was in flight
        self.alone: Counter = Counter()  # the others, by reason
        self._why = "idle"             # why the next step launched alone will be alone
        self._clock = clock
        self._logged_at = clock()
        self._logged = (0, 0)

    @property
    def steps(self) -> int:
        return self.ahead + sum(self.alone.values())

    @property
    def share(self) -> float:
        """The share of steps that ran ahead (0 before the first step)."""
        return self.ahead / self.steps if self.steps else 0.0

    def launched(self, ahead: bool) -> None:
        if ahead:
            self.ahead += 1
        else:
            self.alone[self._why] += 1
            self._why = "idle"

    def not_next(self, reason: str) -> None:
        """The step after the one in flight will be launched alone, for `reason`."""
        assert reason in REASONS, reason
        self._why = reason

    def as_dict(self) -> dict:
        return {"steps": self.steps, "ahead": self.ahead, "share": round(self.share, 4),
                "alone": {r: self.alone[r] for r in REASONS}}

    def maybe_log(self, idle: bool = False) -> None:
        """The share of the steps since the last line that ran ahead, and the whole record:
        at most every LOG_EVERY_S while busy, LOG_IDLE_EVERY_S as the engine goes `idle`,
        and only when steps ran since."""
        now = self._clock()
        if now - self._logged_at < (LOG_IDLE_EVERY_S if idle else LOG_EVERY_S):
            return
        steps, ahead = self.steps - self._logged[0], self.ahead - self._logged[1]
        if steps:
            log.info("run-ahead: %d of %d steps (%.1f%%) since the last report; in all %s",
                     ahead, steps, 100.0 * ahead / steps, self.as_dict())
        self._logged_at, self._logged = now, (self.steps, self.ahead)
