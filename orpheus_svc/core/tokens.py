"""Orpheus token layout: special ids, audio token ids, frames and SNAC codebooks.

Pure Python + numpy. The facts of the Orpheus checkpoints, fixed (docs/architecture.md):

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

Which id may come next (positions, the stop id) is the audio grammar: core/grammar.py.
"""

from __future__ import annotations

import numpy as np

BOS_ID = 128000
START_OF_HUMAN_ID = 128259
END_OF_TEXT_ID = 128009
END_OF_HUMAN_ID = 128260
START_OF_AI_ID = 128261
START_OF_SPEECH_ID = 128257
END_OF_SPEECH_ID = 128258  # the stop id
END_OF_AI_ID = 128262  # closes an AI turn: a zero-shot reference's audio (core/reference.py)
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


def audio_token_id(position: int, code: int) -> int:
    """Token id of `code` at frame `position` (raises on out-of-range input)."""
    if not 0 <= position < FRAME_TOKENS:
        raise ValueError(f"frame position must be 0..6, got {position}")
    if not 0 <= code < CODES_PER_POSITION:
        raise ValueError(f"audio code must be 0..4095, got {code}")
    return AUDIO_BASE + position * CODES_PER_POSITION + code


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


def token_ids_to_frames(token_ids) -> np.ndarray:
    """Inverse of frames_to_token_ids: a flat stream of whole frames -> [F, 7] codes.

    Strict, unlike the generation-time parser (core/grammar.py FrameParser, which stops at
    the stop id and keeps a partial frame for later): every id must be the audio id of its
    position and the stream must end on a frame boundary, else ValueError naming the index.
    """
    ids = np.asarray(token_ids, dtype=np.int64).reshape(-1)
    if ids.size % FRAME_TOKENS:
        raise ValueError(f"{ids.size} audio tokens are not whole frames of {FRAME_TOKENS}")
    frames = ids.reshape(-1, FRAME_TOKENS) - (AUDIO_BASE + np.arange(FRAME_TOKENS) * CODES_PER_POSITION)
    bad = np.flatnonzero(((frames < 0) | (frames >= CODES_PER_POSITION)).reshape(-1))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"token {int(ids[i])} at index {i} is not an audio id of frame "
                         f"position {i % FRAME_TOKENS}")
    return frames


def frames_for_samples(num_samples: int) -> int:
    return num_samples // SAMPLES_PER_FRAME


def samples_for_frames(num_frames: int) -> int:
    return num_frames * SAMPLES_PER_FRAME
