"""Calibration data for FP8: Orpheus prompts, continued with the model's own audio tokens.

FP8 activation scales come from the ranges seen during calibration. Orpheus spends almost
all of its tokens generating audio ids, so calibrating on text alone would size the
scales for the wrong distribution. Each sample here is an Orpheus prompt (voice x
sentence, with emotion tags) followed by up to `audio_tokens` tokens the unquantized
model samples with Orpheus's defaults: the activations the served model actually sees.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator, Sequence

from orpheus_svc.core.prompt import build_prompt
from orpheus_svc.core.tokens import END_OF_SPEECH_ID, PAD_ID, VOICES

SENTENCES: tuple[str, ...] = (
    "Hello there, how can I help you today?",
    "The quarterly report is due on Friday, so let's review the numbers together.",
    "I can't believe you actually did that! <laugh> That's amazing.",
    "Please hold while I transfer your call to the billing department.",
    "Well, <sigh> it has been a very long week, hasn't it?",
    "Turn left at the second light, then continue for about two miles.",
    "Your appointment is confirmed for Tuesday, March fourth, at three thirty PM.",
    "Hmm, let me think about that for a second. <chuckle> Okay, yes.",
    "The temperature tonight will drop to minus five degrees, so bundle up.",
    "Once upon a time, in a quiet village by the sea, there lived an old fisherman.",
    "Are you sure? I really thought it was the other way around.",
    "Thank you so much for calling, and have a wonderful evening!",
    "Error code four oh four: the page you requested could not be found.",
    "<gasp> Oh no, I completely forgot about the meeting!",
    "To reset your password, open settings and choose security.",
    "It's not what you said, it's how you said it.",
)


def prompts(encode: Callable[[str], Sequence[int]], count: int) -> list[list[int]]:
    """`count` prompts cycling through every voice x sentence pair (deterministic)."""
    pairs = itertools.cycle(itertools.product(SENTENCES, VOICES))
    return [build_prompt(encode, voice, text) for text, voice in itertools.islice(pairs, count)]


def left_pad(batch: list[list[int]]) -> tuple[list[list[int]], list[list[int]]]:
    """(ids, attention mask), left-padded with PAD_ID so generation continues every row."""
    width = max(len(p) for p in batch)
    ids = [[PAD_ID] * (width - len(p)) + p for p in batch]
    mask = [[0] * (width - len(p)) + [1] * len(p) for p in batch]
    return ids, mask


def samples(model: Any, encode: Callable[[str], Sequence[int]], count: int, *,
            batch_size: int = 16, audio_tokens: int = 256) -> Iterator[tuple[Any, Any]]:
    """(input_ids, attention_mask) tensors: prompt + sampled continuation, batch by batch."""
    import torch

    device = next(model.parameters()).device
    todo = prompts(encode, count)
    for start in range(0, len(todo), batch_size):
        ids, mask = left_pad(todo[start:start + batch_size])
        ids_t = torch.tensor(ids, device=device)
        mask_t = torch.tensor(mask, device=device)
        with torch.no_grad():
            out = model.generate(input_ids=ids_t, attention_mask=mask_t, do_sample=True,
                                 temperature=0.6, top_p=0.8, repetition_penalty=1.1,
                                 max_new_tokens=audio_tokens, eos_token_id=END_OF_SPEECH_ID,
                                 pad_token_id=PAD_ID)
        full_mask = torch.cat([mask_t, (out[:, ids_t.shape[1]:] != PAD_ID).long()], dim=1)
        yield out, full_mask
