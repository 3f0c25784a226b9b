"""Batch state as arrays: the token state of every running generation, one row per KV slot.
Pure numpy; owned by the scheduler (the engine thread), like the slot pool it mirrors.

A step's per-token work is a handful of array operations for the whole batch, not Python
per row (per-row Python in the engine thread holds the GIL the serving loop needs):

    advance(slots, tokens)   the audio grammar (core/grammar.py) for one token per row:
                             validate, cut frames, count, and say which rows ended and why
    rows(slots, in_flight)   the backend's frozen view of those rows (core/step.py DecodeRows);
                             those of a step still in flight one token later (run-ahead)
    decode_slots()           the slots whose generation has its first token (decode rows)

Per slot (sketch of one row; `pending` holds the codes of the frame being built):

    gen_id  num_generated  last_token  position  frames  stopped  pending[0..6]  max_tokens
      17         23          128270+.      2        3      no     c0 c1 . . . . .   700

A generation is attached when it gets its slot and detached when it ends; between the two
this is the one copy of its counters (Generation reads them through, core/generation.py).
The same rule as FrameParser, applied to arrays; tests/core/test_batch.py checks the two
agree token for token, on legal and illegal streams.
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .grammar import MIN_FRAMES_BEFORE_STOP
from .step import DecodeRows
from .tokens import AUDIO_BASE, CODES_PER_POSITION, END_OF_SPEECH_ID, FRAME_TOKENS

if TYPE_CHECKING:
    from .request import GenerationRequest

# Why a row ended in advance() (Advanced.reasons); 0: it did not.
STOP, LENGTH, ERROR = 1, 2, 3
REASONS = {STOP: "stop", LENGTH: "length", ERROR: "error"}

_EMPTY = np.zeros(0, np.int64)


class Advanced(NamedTuple):
    """What one token per row did. Indices are into the `slots` given to advance().

    complete: rows whose token completed a frame; codes: those frames, [len(complete), 7]
    (the rows' own copy). ended: rows that ended with this token; reasons: STOP, LENGTH or
    ERROR for each (ERROR: the token broke the grammar; it is counted, its frame is not)."""

    complete: np.ndarray
    codes: np.ndarray
    ended: np.ndarray
    reasons: np.ndarray


class TokenState(NamedTuple):
    """One row's counters, as read out when a generation detaches (plain Python values)."""

    num_generated: int
    last_token: int | None
    position: int
    frames: int
    stopped: bool
    pending: tuple[int, ...]


class BatchState:
    def __init__(self, num_slots: int) -> None:
        n = num_slots
        self.gen_id = np.full(n, -1, np.int64)
        self.num_generated = np.zeros(n, np.int64)
        self.last_token = np.full(n, -1, np.int64)  # -1: none yet
        self.position = np.zeros(n, np.int64)       # frame position of the next token
        self.frames = np.zeros(n, np.int64)         # whole frames (the grammar's count)
        self.stopped = np.zeros(n, bool)
        self.pending = np.zeros((n, FRAME_TOKENS), np.int64)
        self.max_tokens = np.zeros(n, np.int64)
        self.prompt_len = np.zeros(n, np.int64)
        self.adapter = np.full(n, -1, np.int64)  # the request's LoRA adapter slot
        self.seeded = np.zeros(n, bool)  # the request's session gave a seed
        # per slot, for the rows' snapshot: the frozen request and the seed
        self.requests: list = [None] * n
        self.seeds: list[int] = [0] * n

    # -- attach / detach (admission and end) ---------------------------------------------

    def attach(self, slot: int, gen_id: int, req: "GenerationRequest", seed: int,
               state: TokenState) -> None:
        """Generation `gen_id` (of `req`, sampling with `seed`) holds `slot` from now on,
        with the counters it has so far (core/generation.py Generation.attach)."""
        self.gen_id[slot] = gen_id
        self.num_generated[slot] = state.num_generated
        self.last_token[slot] = -1 if state.last_token is None else state.last_token
        self.position[slot] = state.position
        self.frames[slot] = state.frames
        self.stopped[slot] = state.stopped
        self.pending[slot, :len(state.pending)] = state.pending
        self.max_tokens[slot] = req.max_tokens
        self.prompt_len[slot] = len(req.prompt_ids)
        self.adapter[slot] = req.adapter
        self.seeded[slot] = req.sampling.seed is not None
        self.requests[slot] = req
        self.seeds[slot] = seed

    def read(self, slot: int) -> TokenState:
        position = int(self.position[slot])
        last = int(self.last_token[slot])
        return TokenState(int(self.num_generated[slot]), None if last < 0 else last, position,
                          int(self.frames[slot]), bool(self.stopped[slot]),
                          tuple(int(c) for c in self.pending[slot, :position]))

    def detach(self, slot: int) -> TokenState:
        """The row's counters, and the row cleared (its slot no longer decodes)."""
        state = self.read(slot)
        self.gen_id[slot] = -1
        self.num_generated[slot] = 0
        self.last_token[slot] = -1
        self.position[slot] = self.frames[slot] = 0
        self.stopped[slot] = False
        self.requests[slot] = None
        return state

    # -- the step ------------------------------------------------------------------------

    def decode_slots(self) -> np.ndarray:
        """Slots whose generation has sampled at least one token, in slot order."""
        return np.flatnonzero(self.num_generated)

    def rows(self, slots: np.ndarray, in_flight: np.ndarray | None = None) -> DecodeRows:
        """The decode rows of `slots` as the backend sees them (copies, read-only).

        `in_flight` (a bool per slot, for a backend that runs ahead: core/step.py
        BackendCapabilities.runs_ahead) marks the rows of a step still running on the device,
        whose token is not known yet: each such row is given one token later, as rows()
        will give it once the row has taken one more legal audio token (its frame position
        one further, a frame more after position 6), with last_token -1 (the device feeds
        the token it sampled); one that token ends by length (max_tokens) is left out. The
        scheduler's run-ahead (Scheduler.schedule with in_flight)."""
        ahead = None if in_flight is None else in_flight[slots]
        if ahead is None or not ahead.any():
            return self._rows(slots, self.num_generated[slots], self.position[slots],
                              self.frames[slots], self.last_token[slots])
        n = self.num_generated[slots] + ahead
        keep = ~ahead | (n < self.max_tokens[slots])
        if not keep.all():
            slots, n, ahead = slots[keep], n[keep], ahead[keep]
        p = self.position[slots]
        wraps = ahead & (p == FRAME_TOKENS - 1)
        position = np.where(ahead, np.where(wraps, 0, p + 1), p)
        return self._rows(slots, n, position, self.frames[slots] + wraps,
                          np.where(ahead, -1, self.last_token[slots]))

    def _rows(self, slots: np.ndarray, n: np.ndarray, position: np.ndarray,
              frames: np.ndarray, last: np.ndarray) -> DecodeRows:
        stop_allowed = (position == 0) & (frames >= MIN_FRAMES_BEFORE_STOP) \
            & ~self.stopped[slots]
        if len(slots) == 1:
            s = int(slots[0])
            requests, seeds = (self.requests[s],), (self.seeds[s],)
        elif len(slots):
            pick = itemgetter(*slots.tolist())
            requests, seeds = pick(self.requests), pick(self.seeds)
        else:
            requests = seeds = ()
        return DecodeRows(self.gen_id[slots], np.array(slots, np.int64), n, last,
                          self.prompt_len[slots] + n - 1, position, stop_allowed, requests,
                          seeds, self.adapter[slots], self.seeded[slots])

    def advance(self, slots: np.ndarray, tokens: np.ndarray) -> Advanced:
        """Feed one token to each row of `slots` (distinct slots, attached rows).

        Per row, as FrameParser.feed_one and the scheduler's limits: the token counts
        (num_generated, last_token) whatever it is; an audio code legal at the row's frame
        position joins the pending frame (the seventh completes it); the stop id ends the row
        where the grammar allows it; anything else is an ERROR. A row that reaches its
        max_tokens with a legal audio token ends with LENGTH."""
        tokens = np.asarray(tokens, np.int64)
        position = self.position[slots]
        code = tokens - (AUDIO_BASE + CODES_PER_POSITION * position)
        audio = (code >= 0) & (code < CODES_PER_POSITION) & ~self.stopped[slots]
        n = self.num_generated[slots] + 1
        self.num_generated[slots] = n
        self.last_token[slots] = tokens
        if audio.all():
            a_idx, a_slots, a_pos, a_code = None, slots, position, code
        else:
            a_idx = np.flatnonzero(audio)
            a_slots, a_pos, a_code = slots[a_idx], position[a_idx], code[a_idx]
        self.pending[a_slots, a_pos] = a_code
        done = a_pos == FRAME_TOKENS - 1
        self.position[a_slots] = np.where(done, 0, a_pos + 1)
        complete = np.flatnonzero(done) if a_idx is None else a_idx[done]
        c_slots = slots[complete]
        self.frames[c_slots] += 1  # distinct slots: no lost increments
        codes = self.pending[c_slots]
        at_limit = n >= self.max_tokens[slots]
        if a_idx is None and not at_limit.any():
            return Advanced(complete, codes, _EMPTY, _EMPTY)
        other = ~audio
        stop = other & (tokens == END_OF_SPEECH_ID) & (position == 0) \
            & (self.frames[slots] >= MIN_FRAMES_BEFORE_STOP) & ~self.stopped[slots]
        self.stopped[slots[stop]] = True
        reasons = np.where(stop, STOP, np.where(other, ERROR, np.where(at_limit, LENGTH, 0)))
        ended = np.flatnonzero(reasons)
        return Advanced(complete, codes, ended, reasons[ended])
