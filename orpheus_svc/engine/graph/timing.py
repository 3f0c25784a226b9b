"""Where a serving graph engine's time goes, step by step (pure Python: clock.py feeds it).

Per step the backend (clock.py) reports what the device said (CUDA timing events, in ms) and what the
host did:

    span   the step on the device, from its first input copy to its ids' copy back
    gap    the device idle on this stream between the previous step's end and this start
           (the host had not launched it yet)
    wait   the engine thread blocked for the step's ids
    host   the engine thread inside launch()

so a step period that exceeds the graph's own time is split into a longer `span` (other
work on the same GPU, the SNAC codec's, slows the step itself) and `gap` (the device waited
for the host: prefill, steps that could not run ahead). Summed over a window and logged by
the backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _Kind:
    steps: int = 0
    rows: int = 0
    span_ms: float = 0.0
    gap_ms: float = 0.0

    def line(self, name: str) -> str:
        n = max(self.steps, 1)
        return (f"{name} {self.steps} (mean batch {self.rows / n:.1f}, device {self.span_ms / n:.2f}"
                f" ms, idle before {self.gap_ms / n:.2f} ms)")


@dataclass
class StepTimes:
    """Counters over one window (reset by `report`)."""

    started: float
    decode: _Kind = field(default_factory=_Kind)
    prefill: _Kind = field(default_factory=_Kind)  # steps with at least one prefill row
    ahead: int = 0          # steps launched before the previous one was read
    wait_ms: float = 0.0
    host_ms: float = 0.0

    def add(self, rows: int, prefill: bool, ahead: bool, span_ms: float | None,
            gap_ms: float | None, wait_ms: float, host_ms: float) -> None:
        kind = self.prefill if prefill else self.decode
        kind.steps += 1
        kind.rows += rows
        kind.span_ms += span_ms or 0.0
        kind.gap_ms += gap_ms or 0.0
        self.ahead += ahead
        self.wait_ms += wait_ms
        self.host_ms += host_ms

    @property
    def steps(self) -> int:
        return self.decode.steps + self.prefill.steps

    def report(self, now: float) -> str:
        """One log line for the window, and a fresh window from `now`."""
        n = max(self.steps, 1)
        line = (f"graph engine, last {now - self.started:.1f} s: {self.steps} steps, "
                f"{100 * self.ahead / n:.0f}% launched ahead; per step the engine thread spent "
                f"{self.host_ms / n:.2f} ms launching and {self.wait_ms / n:.2f} ms waiting; "
                f"{self.decode.line('decode-only steps')}; "
                f"{self.prefill.line('steps with prefill')}")
        self.__init__(now)  # type: ignore[misc]
        return line
