"""Orpheus token layout: special ids, audio token ids, frames and SNAC codebooks.

Pure Python + numpy. The facts here are fixed by DESIGN.md ("Orpheus facts"):

    audio token id = AUDIO_BASE + p * CODES_PER_POSITION + code
        p    = position 0..6 inside a 7-token frame
        code = 0..4095 (code 0 is legal, 4095 is the last legal code)

    one frame (7 tokens) -> SNAC codebooks:

        position:  p0   p1   p2   p3   p4   p5   p6
        codebook:  c0   c1   c2   c2   c1   c2   c2
                   |    |    |    |    |    |    |
        c0[f]  = p0
        c1[2f] = p1,  c1[2f+1] = p4
        c2[4f] = p2,  c2[4f+1] = p3,  c2[4f+2] = p5,  c2[4f+3] = p6

    one frame = 2048 samples at 24 kHz = 85.33 ms; 82.03 tokens/s is real time.

The parser is phase-based: it knows which position the next token must have and
computes its code relative to that position. That is what keeps phase through
code 0 (the reference decoder drops it and shifts every later frame) and what
rejects "code 4096" (which, as a raw id, is the next position's code 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

BOS_ID = 128000
START_OF_HUMAN_ID = 128259
END_OF_TEXT_ID = 128009
END_OF_HUMAN_ID = 128260
START_OF_AI_ID = 128261
START_OF_SPEECH_ID = 128257
END_OF_SPEECH_ID = 128258  # the stop id
PAD_ID = 128263

AUDIO_BASE = 128266
CODES_PER_POSITION = 4096
FRAME_TOKENS = 7
AUDIO_VOCAB = FRAME_TOKENS * CODES_PER_POSITION  # 28672 audio ids
ORPHEUS_VOCAB_SIZE = 156940  # rows of the Orpheus-3B embedding / LM head

SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 2048
FRAME_SECONDS = SAMPLES_PER_FRAME / SAMPLE_RATE  # 0.08533 s
TOKENS_PER_SECOND = FRAME_TOKENS / FRAME_SECONDS  # 82.03 tokens/s = real time

# The voices and tags of Canopy's English checkpoints. They are only the fallback of the voice
# registry (core/voices.py): the served list is the model's own (docs/voices.md).
VOICES: tuple[str, ...] = ("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe")
EMOTION_TAGS: tuple[str, ...] = (
    "<laugh>", "<chuckle>", "<sigh>", "<cough>", "<sniffle>", "<groan>", "<yawn>", "<gasp>",
)

# Order of positions inside a frame, per codebook (see the sketch above).
CB1_POSITIONS = (1, 4)
CB2_POSITIONS = (2, 3, 5, 6)


class AudioGrammarError(ValueError):
    """A token that the audio grammar does not allow at this point of the stream."""


def audio_token_id(position: int, code: int) -> int:
    """Token id of `code` at frame `position` (raises on out-of-range input)."""
    if not 0 <= position < FRAME_TOKENS:
        raise ValueError(f"frame position must be 0..6, got {position}")
    if not 0 <= code < CODES_PER_POSITION:
        raise ValueError(f"audio code must be 0..4095, got {code}")
    return AUDIO_BASE + position * CODES_PER_POSITION + code


def split_audio_token(token_id: int) -> tuple[int, int]:
    """(position, code) of an audio token id; raises AudioGrammarError otherwise."""
    offset = token_id - AUDIO_BASE
    if not 0 <= offset < AUDIO_VOCAB:
        raise AudioGrammarError(f"token {token_id} is not an audio token")
    return divmod(offset, CODES_PER_POSITION)


def position_id_range(position: int) -> tuple[int, int]:
    """[start, stop) of the ids legal at frame `position`: a contiguous LM-head slice."""
    start = AUDIO_BASE + position * CODES_PER_POSITION
    return start, start + CODES_PER_POSITION


def frames_to_codebooks(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[F, 7] codes (position order) -> SNAC codebooks of shapes [F], [2F], [4F]."""
    frames = np.asarray(frames, dtype=np.int64)
    if frames.ndim != 2 or frames.shape[1] != FRAME_TOKENS:
        raise ValueError(f"frames must have shape [F, 7], got {frames.shape}")
    c0 = frames[:, 0].copy()
    c1 = frames[:, list(CB1_POSITIONS)].reshape(-1)
    c2 = frames[:, list(CB2_POSITIONS)].reshape(-1)
    return c0, c1, c2


def codebooks_to_frames(c0: np.ndarray, c1: np.ndarray, c2: np.ndarray) -> np.ndarray:
    """Inverse of frames_to_codebooks."""
    n = len(c0)
    if len(c1) != 2 * n or len(c2) != 4 * n:
        raise ValueError("codebook lengths must be F, 2F, 4F")
    frames = np.empty((n, FRAME_TOKENS), dtype=np.int64)
    frames[:, 0] = c0
    frames[:, list(CB1_POSITIONS)] = np.asarray(c1).reshape(n, 2)
    frames[:, list(CB2_POSITIONS)] = np.asarray(c2).reshape(n, 4)
    return frames


def frames_to_token_ids(frames: np.ndarray) -> list[int]:
    """[F, 7] codes -> the flat token id stream the LM emits for them."""
    frames = np.asarray(frames, dtype=np.int64)
    offsets = AUDIO_BASE + np.arange(FRAME_TOKENS) * CODES_PER_POSITION
    return (frames + offsets).reshape(-1).tolist()


@dataclass
class FrameParser:
    """Turns a generation's token stream into complete frames, never losing phase.

    feed() returns the frames completed by the new tokens. The stop id is accepted
    only at a frame boundary; after it, nothing more is accepted.
    """

    position: int = 0
    stopped: bool = False
    _pending: list[int] = field(default_factory=list)

    def feed(self, token_ids: Iterable[int]) -> list[tuple[int, ...]]:
        done: list[tuple[int, ...]] = []
        for tid in token_ids:
            if self.stopped:
                raise AudioGrammarError(f"token {tid} after end of speech")
            if tid == END_OF_SPEECH_ID:
                if self.position != 0:
                    raise AudioGrammarError(
                        f"end of speech inside a frame (at position {self.position})")
                self.stopped = True
                continue
            code = tid - AUDIO_BASE - self.position * CODES_PER_POSITION
            if not 0 <= code < CODES_PER_POSITION:
                raise AudioGrammarError(
                    f"token {tid} is not legal at frame position {self.position} "
                    f"(legal ids {position_id_range(self.position)[0]}.."
                    f"{position_id_range(self.position)[1] - 1})")
            self._pending.append(code)
            self.position += 1
            if self.position == FRAME_TOKENS:
                done.append(tuple(self._pending))
                self._pending.clear()
                self.position = 0
        return done


def frames_for_samples(num_samples: int) -> int:
    return num_samples // SAMPLES_PER_FRAME


def samples_for_frames(num_frames: int) -> int:
    return num_frames * SAMPLES_PER_FRAME


def parse_frames(token_ids: Sequence[int]) -> np.ndarray:
    """All complete frames of a whole token stream, as [F, 7] codes."""
    frames = FrameParser().feed(token_ids)
    return np.asarray(frames, dtype=np.int64).reshape(-1, FRAME_TOKENS)
