"""The audio grammar: which token may come next in a generation's output. Pure Python.

Written once, here; every user follows it:

    FrameParser            validates a token stream and cuts its frames (the scheduler,
                           which also keeps each generation's grammar state in its parser
                           and hands it to the backend in every StepRow)
    position_id_range      the legal ids at a position: the torch backend's LM-head slice,
                           the trtllm logits processor's mask
    state_after_token      the state read from the last token alone (the trtllm processor,
                           which sees only the sequence)

The rule (every backend follows it; docs/architecture.md):

    a generation's output = frame* stop, frame = 7 tokens at positions 0..6
    at position p only the 4096 ids [AUDIO_BASE + p*4096, AUDIO_BASE + (p+1)*4096) are legal
    the stop id (128258) is legal only at a frame boundary, and only after at least one
    frame: an utterance is whole frames of audio, never none (nothing to play, and an
    empty segment would pass for speech)

Position-relative codes are what keep phase through code 0 and reject "code 4096" (as a raw
id, the next position's code 0); see core/tokens.py for the id layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from .tokens import AUDIO_BASE, AUDIO_VOCAB, CODES_PER_POSITION, END_OF_SPEECH_ID, FRAME_TOKENS

MIN_FRAMES_BEFORE_STOP = 1


class AudioGrammarError(ValueError):
    """A token that the audio grammar does not allow at this point of the stream."""


def position_id_range(position: int) -> tuple[int, int]:
    """[start, stop) of the ids legal at frame `position`: a contiguous LM-head slice."""
    start = AUDIO_BASE + position * CODES_PER_POSITION
    return start, start + CODES_PER_POSITION


def split_audio_token(token_id: int) -> tuple[int, int]:
    """(position, code) of an audio token id; raises AudioGrammarError otherwise."""
    offset = token_id - AUDIO_BASE
    if not 0 <= offset < AUDIO_VOCAB:
        raise AudioGrammarError(f"token {token_id} is not an audio token")
    return divmod(offset, CODES_PER_POSITION)


def stop_allowed(position: int, frames: int) -> bool:
    """Whether the stop id is legal next, at frame `position` after `frames` whole frames."""
    return position == 0 and frames >= MIN_FRAMES_BEFORE_STOP


def state_after_token(last_token: int | None) -> tuple[int, bool]:
    """(position of the next token, stop legal) from a sequence's last token alone: a prompt
    end (no audio yet) is position 0 without stop; audio at position 6 ends a frame, and a
    legal stream that ended a frame holds at least one."""
    if last_token is None:
        return 0, False
    offset = last_token - AUDIO_BASE
    if not 0 <= offset < AUDIO_VOCAB:
        return 0, False
    position = (offset // CODES_PER_POSITION + 1) % FRAME_TOKENS
    return position, stop_allowed(position, 1 if position == 0 else 0)


@dataclass
class FrameParser:
    """Turns a generation's token stream into complete frames, never losing phase.

    feed() returns the frames completed by the new tokens and raises AudioGrammarError on
    a token the grammar forbids; after the stop id nothing more is accepted. `position`
    and `stop_allowed` are the generation's grammar state: what the next token may be."""

    position: int = 0
    frames: int = 0
    stopped: bool = False
    # = not stopped and stop_allowed(position, frames), kept up to date by feed_one (read
    # for every row of every step: a field, not a property)
    stop_allowed: bool = field(init=False)
    _pending: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stop_allowed = not self.stopped and stop_allowed(self.position, self.frames)

    def feed(self, token_ids: Iterable[int]) -> list[tuple[int, ...]]:
        done: list[tuple[int, ...]] = []
        for tid in token_ids:
            frame = self.feed_one(tid)
            if frame is not None:
                done.append(frame)
        return done

    def feed_one(self, tid: int) -> tuple[int, ...] | None:
        """feed([tid]) without the lists (the scheduler's per-token path): the frame `tid`
        completes, or None."""
        position = self.position
        code = tid - AUDIO_BASE - position * CODES_PER_POSITION
        if self.stopped or not 0 <= code < CODES_PER_POSITION:
            self._refuse_or_stop(tid)
            return None
        pending = self._pending
        pending.append(code)
        if position < FRAME_TOKENS - 1:
            self.position = position + 1
            self.stop_allowed = False  # inside a frame (stop_allowed())
            return None
        frame = tuple(pending)
        pending.clear()
        self.position = 0
        self.frames += 1
        self.stop_allowed = stop_allowed(0, self.frames)
        return frame

    def _refuse_or_stop(self, tid: int) -> None:
        """A token that is no audio code at this position: the stop id where it is legal
        (then nothing more is accepted), else AudioGrammarError."""
        if self.stopped:
            raise AudioGrammarError(f"token {tid} after end of speech")
        if tid == END_OF_SPEECH_ID:
            if not stop_allowed(self.position, self.frames):
                raise AudioGrammarError(
                    f"end of speech inside a frame (at position {self.position})"
                    if self.position else "end of speech before the first frame")
            self.stopped = True
            self.stop_allowed = False
            return
        lo, hi = position_id_range(self.position)
        raise AudioGrammarError(f"token {tid} is not legal at frame position {self.position} "
                                f"(legal ids {lo}..{hi - 1})")


def parse_frames(token_ids: Sequence[int]) -> np.ndarray:
    """All complete frames of a whole token stream, as [F, 7] codes."""
    frames = FrameParser().feed(token_ids)
    return np.asarray(frames, dtype=np.int64).reshape(-1, FRAME_TOKENS)
