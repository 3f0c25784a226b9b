"""The two CUDA stream priorities of the service: the LM step's above SNAC's.

One GPU runs both the engine's decode step and the flusher's SNAC calls. A SNAC call of a
few ms that the GPU runs while a step is due delays that step, and with it every stream's
next token; a step that waits delays first audio too. CUDA schedules ready blocks of a
higher-priority stream first, so with the step on a high-priority stream and SNAC on a
low one, SNAC fills the gaps the step leaves (between its kernels, under its tail) and
yields the SMs as soon as step kernels are queued. Priorities reorder block scheduling,
never preempt a running block, so a SNAC kernel in flight still finishes (microseconds).

    lm_stream(device)     the greatest priority the device has (the engine thread's step)
    codec_stream(device)  the least, the same as the default stream's (the flusher's SNAC)

The codec makes its own stream with codec_stream; the engine side makes its step stream
with lm_stream, once per thread that launches the step, and runs the step inside
`with torch.cuda.stream(...)` (its CUDA graphs captured and replayed there).
"""

from __future__ import annotations

import torch


def stream_priorities() -> tuple[int, int]:
    """(least, greatest) stream priority of this CUDA build: lower numbers run first."""
    least, greatest = torch.cuda.Stream.priority_range()
    return int(least), int(greatest)


def lm_stream(device: torch.device | str) -> torch.cuda.Stream:
    """A stream at the device's greatest priority, for the LM step."""
    return torch.cuda.Stream(torch.device(device), priority=stream_priorities()[1])


def codec_stream(device: torch.device | str) -> torch.cuda.Stream:
    """A stream at the device's least priority, for SNAC."""
    return torch.cuda.Stream(torch.device(device), priority=stream_priorities()[0])
