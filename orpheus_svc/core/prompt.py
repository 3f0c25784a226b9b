"""Prompt building and the per-generation token budget.

    prompt = [START_OF_HUMAN] + tokenizer("{voice}: {text}") + [END_OF_TEXT, END_OF_HUMAN,
              START_OF_AI, START_OF_SPEECH]

(the tokenizer adds BOS 128000 itself; see models/tokenizer.py).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from .sentences import speech_chars
from .tokens import (
    EMOTION_TAGS,
    END_OF_HUMAN_ID,
    END_OF_TEXT_ID,
    FRAME_TOKENS,
    START_OF_AI_ID,
    START_OF_HUMAN_ID,
    START_OF_SPEECH_ID,
    TOKENS_PER_SECOND,
)

Encode = Callable[[str], Sequence[int]]

PROMPT_SUFFIX = (END_OF_TEXT_ID, END_OF_HUMAN_ID, START_OF_AI_ID, START_OF_SPEECH_ID)

# Budget model for max_tokens. Orpheus voices speak at roughly 14-16 characters per second;
# a generation that is still talking at 7 chars/s has long since left its text behind. The
# fixed slack covers short texts, leading breaths and pauses; each emotion tag may add a
# laugh or sigh of up to ~1.5 s. These are deliberately generous: they stop a runaway
# generation, they do not shape normal ones (those end with the stop id).
SLOWEST_CHARS_PER_SECOND = 7.0
FIXED_SLACK_SECONDS = 2.0
SECONDS_PER_TAG = 1.5


def build_prompt(encode: Encode, voice: str, text: str) -> list[int]:
    """Orpheus prompt ids for `voice` speaking `text` (`encode` adds BOS)."""
    return [START_OF_HUMAN_ID, *encode(f"{voice}: {text}"), *PROMPT_SUFFIX]


def max_audio_seconds(text: str) -> float:
    """Upper bound on the speech length of `text` (see the budget model above). Characters
    are counted as Latin characters of speech (core/sentences.speech_chars): a Chinese
    character takes about as long to say as three Latin letters."""
    tags = sum(text.count(tag) for tag in EMOTION_TAGS)
    for tag in EMOTION_TAGS:
        text = text.replace(tag, "")
    return (FIXED_SLACK_SECONDS + speech_chars(text) / SLOWEST_CHARS_PER_SECOND
            + tags * SECONDS_PER_TAG)


def max_tokens_for_text(text: str, *, limit: int | None = None) -> int:
    """Token budget for `text`, a whole number of frames, at most `limit` (rounded down to frames)."""
    frames = math.ceil(max_audio_seconds(text) * TOKENS_PER_SECOND / FRAME_TOKENS)
    budget = frames * FRAME_TOKENS
    if limit is not None:
        budget = min(budget, (limit // FRAME_TOKENS) * FRAME_TOKENS)
    return budget


TYPICAL_CHARS_PER_SECOND = 15.0  # Latin characters of speech per second, typical pace


def expected_audio_seconds(text: str) -> float:
    """A typical speech length for `text`, used only to estimate playout deadlines (and by
    the sim backend as its utterance length)."""
    return max(speech_chars(text), 1.0) / TYPICAL_CHARS_PER_SECOND


class PromptTooLong(ValueError):
    """A prompt leaves no room in its slot for one frame and the stop id."""


def fit_to_slot(prompt_len: int, max_tokens: int, max_seq_len: int) -> int:
    """`max_tokens` cut to what a slot of `max_seq_len` tokens has left after the prompt.

        |<---------------------------- max_seq_len ---------------------------->|
        | prompt_len |  result (whole frames, <= max_tokens)  | spare (>= 1) ... |

    The result is a whole number of frames and leaves at least one position spare, so
    prompt_len + result < max_seq_len: TensorRT-LLM refuses a request whose prompt length
    plus max_tokens exceeds its max_seq_len, and a generation cut at its budget still ends
    on a frame boundary. Raises PromptTooLong when not even one frame fits.
    """
    room = max_seq_len - prompt_len
    if room < FRAME_TOKENS + 1:
        raise PromptTooLong(
            f"text too long: its prompt is {prompt_len} tokens and max_seq_len is "
            f"{max_seq_len}; send shorter segments")
    return min(max_tokens, (room - 1) // FRAME_TOKENS * FRAME_TOKENS)
