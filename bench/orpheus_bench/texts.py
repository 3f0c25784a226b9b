"""Deterministic benchmark texts (nothing downloaded): conversational ~250 chars, longform ~5000.

Sentences are built from a fixed vocabulary by a seeded RNG: 5-22 words, a comma in some,
a question now and then, an occasional Orpheus emotion tag in conversational turns (as
voice agents send them). Same (set, seed, index) -> same text on every machine and Python.
"""

from __future__ import annotations

import random
import re

TEXT_SETS = {
    # name: (target chars, hard max chars, tag probability per text)
    "conversational": (250, 280, 0.2),
    "longform": (4800, 4990, 0.0),
}

_SUBJECTS = ["I", "we", "you", "the team", "our system", "the order", "your account", "the doctor",
             "my colleague", "the weather", "this plan", "the package", "the meeting", "she",
             "he", "they", "the report", "the store", "your flight", "the update"]
_VERBS = ["checked", "found", "moved", "confirmed", "updated", "scheduled", "reviewed",
          "noticed", "fixed", "prepared", "cancelled", "shipped", "approved", "received",
          "explained", "changed", "booked", "compared", "tested", "sent"]
_OBJECTS = ["the details", "your request", "a new time", "the second option", "the last invoice",
            "a quick summary", "the original plan", "a few changes", "the delivery date",
            "everything you asked about", "the latest numbers", "a better route",
            "the remaining items", "a short list", "the final version", "your preferences"]
_TAILS = ["this morning", "for next week", "right away", "as we discussed", "without any issues",
          "a little earlier than expected", "before the deadline", "in the afternoon",
          "just to be safe", "over the weekend", "by Friday", "in about an hour",
          "on the second floor", "for the whole group", "if that works for you"]
_OPENERS = ["Sure,", "Okay,", "Great news,", "Honestly,", "By the way,", "Good question,",
            "Alright,", "Well,", "To be clear,", "Also,"]
_QUESTIONS = ["Would you like me to go ahead", "Does that work for you",
              "Should I send you a confirmation", "Is there anything else I can help with",
              "Do you want the cheaper option", "Can I put you down for Tuesday"]
_TAGS = ["<laugh>", "<chuckle>", "<sigh>"]


def _sentence(rng: random.Random) -> str:
    if rng.random() < 0.15:
        return rng.choice(_QUESTIONS) + "?"
    parts = []
    if rng.random() < 0.35:
        parts.append(rng.choice(_OPENERS))
    parts += [rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS)]
    if rng.random() < 0.6:
        parts.append(rng.choice(_TAILS))
    if rng.random() < 0.3:
        parts[-1] += ","
        parts += ["and", rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS)]
    s = " ".join(parts)
    return s[0].upper() + s[1:] + "."


def make_text(set_name: str, index: int, seed: int = 0) -> str:
    """Text `index` of a set: whole sentences up to about the set's target length."""
    target, hard_max, tag_p = TEXT_SETS[set_name]
    rng = random.Random(f"{set_name}:{seed}:{index}")
    out = ""
    while True:
        s = _sentence(rng)
        if tag_p and rng.random() < tag_p / 3:
            s = f"{rng.choice(_TAGS)} {s}"
        sep = "" if not out else (" " if set_name != "longform" or rng.random() > 0.12 else "\n\n")
        if out and len(out) + len(sep) + len(s) > hard_max:
            break
        out += sep + s
        if len(out) >= target:
            break
    return out


def make_texts(set_name: str, count: int, seed: int = 0) -> list[str]:
    if set_name not in TEXT_SETS:
        raise ValueError(f"unknown text set {set_name!r} (known: {', '.join(TEXT_SETS)})")
    return [make_text(set_name, i, seed) for i in range(count)]


_WORD = re.compile(r"\S+\s*|\s+")


def word_fragments(text: str) -> list[str]:
    """Word-sized fragments that concatenate back to `text` (each word with its trailing
    whitespace), the way an LLM's token stream arrives, roughly one word per message."""
    return _WORD.findall(text)
