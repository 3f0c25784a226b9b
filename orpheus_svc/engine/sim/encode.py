"""The sim backend's stand-in tokenizer: no tokenizer file, prompt lengths like Llama-3's."""

from __future__ import annotations

import re
import zlib

from orpheus_svc.core.tokens import BOS_ID

# sim_encode's granularity; Llama-3's tokenizer averages ~4 characters of English per token.
SIM_CHARS_PER_TOKEN = 4.0
_PIECE = re.compile(r"\s?[A-Za-z0-9]{1,4}|\s?[^\sA-Za-z0-9]|\s+")


def sim_encode(text: str) -> list[int]:
    """A cheap stand-in tokenizer: BOS + one id per ~4-character piece (Llama-3-like lengths,
    so prefill costs are realistic). Ids are a hash of the piece, below 128000."""
    return [BOS_ID] + [zlib.crc32(p.encode()) % 128000 for p in _PIECE.findall(text)]
