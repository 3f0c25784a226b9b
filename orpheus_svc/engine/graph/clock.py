"""Times the graph engine's steps from outside GraphRunner.launch/collect (as gpt-fast keeps
timing out of generate): the runner does the step, this watches it.

    begin(ahead)         host clock; on CUDA a timing event recorded before the step's work
    launched(mark)       the engine thread's time inside launch()
    collected(mark, l)   the wait for the ids; the device's span (start event -> the runner's
                         end event) and the idle gap since the previous step's end

The counters (timing.py StepTimes) are what GraphBackend logs every TIMING_LOG_S.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from orpheus_svc.engine.graph.runner import EVENTS
from orpheus_svc.engine.graph.timing import StepTimes


@dataclass
class StepMark:
    t0: float
    start: object | None  # torch.cuda.Event before the step's first copy (CUDA), else None
    ahead: bool           # launched before the previous step was read
    host_ms: float = 0.0


class StepClock:
    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.times = StepTimes(time.monotonic())
        self._last_end = None  # the last collected step's end event (CUDA)
        # start events, reused as the runner's end events are (runner.py EVENTS): step i's
        # is read when step i is collected, before step i + EVENTS begins
        self._starts = [torch.cuda.Event(enable_timing=True) for _ in range(EVENTS)] \
            if cuda else None
        self._begun = 0

    def begin(self, ahead: bool) -> StepMark:
        start = None
        if self._starts is not None:
            start = self._starts[self._begun % EVENTS]
            start.record()
        self._begun += 1
        return StepMark(time.perf_counter(), start, ahead)

    def launched(self, mark: StepMark) -> None:
        mark.host_ms = (time.perf_counter() - mark.t0) * 1000

    def collected(self, mark: StepMark, launch, wait_ms: float) -> None:
        """After GraphRunner.collect(launch) returned (its end event has completed)."""
        span = gap = None
        if launch.event is not None and mark.start is not None:
            span = mark.start.elapsed_time(launch.event)
            if self._last_end is not None:
                gap = max(0.0, self._last_end.elapsed_time(mark.start))
            self._last_end = launch.event
        self.times.add(launch.num_prefill + launch.num_decode, launch.num_prefill > 0,
                       mark.ahead, span, gap, wait_ms, mark.host_ms)
