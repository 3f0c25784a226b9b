"""Generation state: what the scheduler knows about one utterance segment being generated.

A Generation is created from a GenerationRequest when it is submitted and is owned by the
EngineLoop thread from then on: only the scheduler reads and writes it. A backend sees a
frozen snapshot of it per step instead (row(), core/step.py).
Progress is kept as counters rather than phases:

    num_prompt_tokens  prompt length (prefilled when num_generated > 0 or prefilled is set)
    num_generated      sampled tokens, the stop id included
    num_frames         complete 7-token frames (= audio produced, 2048 samples each)

Its grammar state (frame position, whether the stop id is legal) follows the one rule of
core/grammar.py, whether it is read from its batch row while it runs (core/batch.py, where
the scheduler advances every running generation at once) or from its own copy otherwise;
so the tokens the scheduler validates and the next token a backend may sample agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .batch import TokenState
from .grammar import FrameParser, stop_allowed
from .request import GenerationRequest
from .step import StepRow

if TYPE_CHECKING:
    from .batch import BatchState

# StepRow(...) by field order without the NamedTuple's generated __new__ (a Python frame)
_row = tuple.__new__


@dataclass(eq=False)
class Generation:
    gen_id: int
    request: GenerationRequest
    arrival: float
    seed: int
    slot: int | None = None
    num_frames: int = 0
    cancelled: bool = False
    finish_reason: str | None = None
    # Consecutive steps this generation was runnable but left out of the batch (aging).
    steps_waited: int = 0
    # Frames produced while an earlier segment of the session was still generating;
    # they join the playout clock when this generation becomes the session's head.
    frames_not_in_playout: int = 0
    # The engine's clock when it got a slot and when its first token came (the Finish
    # carries both to the edge, for traces and histograms); None until then.
    admitted_at: float | None = None
    first_token_at: float | None = None
    # Token counters and grammar state while the generation holds no batch row (waiting,
    # ended): num_generated, last_token and the parser's. While it runs, its row of the
    # scheduler's BatchState (core/batch.py) holds them, and the properties read it.
    _tokens: TokenState = field(default=TokenState(0, None, 0, 0, False, ()), repr=False)
    _batch: "BatchState | None" = field(default=None, repr=False)

    # -- token counters (the batch row while attached) ------------------------------------

    def attach(self, batch: "BatchState", slot: int) -> None:
        """The scheduler gave it `slot`: its counters live in `batch` from now on."""
        self.slot = slot
        batch.attach(slot, self.gen_id, self.request, self.seed, self._tokens)
        self._batch = batch

    def detach(self) -> None:
        """It ended: its counters come back here (the row is cleared for the next one)."""
        if self._batch is not None:
            self._tokens = self._batch.detach(self.slot)
            self._batch = None

    def _state(self) -> TokenState:
        return self._tokens if self._batch is None else self._batch.read(self.slot)

    @property
    def num_generated(self) -> int:
        b = self._batch
        return self._tokens.num_generated if b is None else int(b.num_generated[self.slot])

    @property
    def last_token(self) -> int | None:
        return self._state().last_token

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.request.prompt_ids)

    @property
    def needs_prefill(self) -> bool:
        return self.num_generated == 0

    @property
    def frame_position(self) -> int:
        """Position (0..6) inside the frame of the next token to sample."""
        return self._state().position

    @property
    def stop_allowed(self) -> bool:
        """Whether the next token may be the stop id (core/grammar.py)."""
        t = self._state()
        return not t.stopped and stop_allowed(t.position, t.frames)

    @property
    def parser(self) -> FrameParser:
        """A copy of its grammar state as a FrameParser (what feeding it would accept next)."""
        t = self._state()
        return FrameParser(position=t.position, frames=t.frames, stopped=t.stopped,
                           _pending=list(t.pending))

    def row(self) -> StepRow:
        """This generation's work in the coming step, as the backend sees it (it must hold
        a slot). Decode feeds the last sampled token at its KV index."""
        t = self._state()
        n = t.num_generated
        req = self.request
        allowed = not t.stopped and stop_allowed(t.position, t.frames)
        if n == 0:
            return _row(StepRow, (self.gen_id, self.slot, req, self.seed, True, 0, None, 0,
                                  t.position, allowed))
        return _row(StepRow, (self.gen_id, self.slot, req, self.seed, False, n,
                              t.last_token, len(req.prompt_ids) + n - 1, t.position, allowed))

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
