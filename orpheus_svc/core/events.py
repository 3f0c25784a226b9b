"""Events that leave the engine (EngineLoop thread and Flusher thread) for their consumers.

One generation's stream: AudioEvent* with the last one final (carrying its Finish), or a
single Rejected (refused before it held a slot). Rejected comes from the engine thread, the
audio and the end from the flusher thread.

The engine boundary is message based: commands go in (see engine/loop.py), these come out,
in batches (a sink is called with a list), so that a consumer on an asyncio loop pays one
call_soon_threadsafe per batch rather than one per event. Everything here is plain data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence, Union

import numpy as np

from .playout import PlayoutSnapshot
from .status import Status


@dataclass(frozen=True)
class Rejected:
    """The generation was refused before it held a slot (admission queue full, bad request)."""

    gen_id: int
    reason: str
    code: Status = Status.RESOURCE_EXHAUSTED  # mapped to the wire at the edges

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", Status(self.code))  # a name is accepted, and checked


@dataclass(frozen=True)
class Finish:
    """How a generation ended; carried by its final AudioEvent.

    reason: "stop" (the model's stop id) | "length" (max_tokens) | "cancelled" | "error".
    The engine decides it and hands it to the flusher with the generation's last frames
    (or with drop), so the flusher thread is the one producer of a generation's events
    after admission: its audio, then this, in one ordered stream.

    queued_s, first_token_s: seconds from the generation's arrival at the engine to its
    admission (a KV slot) and to its first token, by the engine's clock (None: it never got
    there). They ride on this event, once per generation, so the edge can build its spans
    and histograms without the engine thread doing anything per step for them."""

    reason: str
    num_prompt_tokens: int
    num_generated: int
    num_frames: int
    error: str | None = None  # a message a person can act on (reason "error")
    queued_s: float | None = None
    first_token_s: float | None = None


@dataclass(frozen=True)
class AudioEvent:
    """PCM for one generation: float32 mono at 24 kHz, starting at `sample_offset`.

    Offsets are contiguous per generation: each event starts where the previous ended.
    The last event of a generation has final=True (its pcm may be empty) and, from the
    engine, its `finish`; nothing of the generation follows it. A generation that ended by
    "stop" or "length" has by then produced exactly num_frames x 2048 samples; one that was
    cancelled or failed ends with an empty final event where its audio stopped.
    """

    gen_id: int
    pcm: np.ndarray
    sample_offset: int
    final: bool = False
    finish: Finish | None = None  # set on the final event (None only from a bare Flusher)

    @property
    def num_samples(self) -> int:
        return int(self.pcm.shape[0])


class FramePush(NamedTuple):
    """One generation's part of a step's hand-off from the engine thread to the flusher
    (Flusher.push_many: once per step for every generation, so the flusher thread is woken
    once per step, not once per generation): its new frames ([n, 7] codes, n may be 0),
    whether no more will come, the playout clock when it moved (core/playout.py), how
    it ended (with its last frames), and its sampling seed when its session gave one (its
    audio is then reproducible: audio/flusher.py)."""

    gen_id: int
    frames: np.ndarray
    final: bool = False
    playout: PlayoutSnapshot | None = None
    finish: Finish | None = None
    seed: int | None = None


EngineEvent = Union[Rejected, AudioEvent]
EventSink = Callable[[Sequence[EngineEvent]], None]


@dataclass
class EventBatch:
    """Collects events during one step and hands them to the sink in one call."""

    sink: EventSink
    events: list[EngineEvent] = field(default_factory=list)

    def add(self, event: EngineEvent) -> None:
        self.events.append(event)

    def flush(self) -> None:
        if self.events:
            batch, self.events = self.events, []
            self.sink(batch)
