"""Text tokenizer: the checkpoint's `tokenizer.json`, giving Llama-3 ids with BOS.

The Orpheus prompt is

    [128259] + encode(f"{voice}: {text}") + [128009, 128260, 128261, 128257]

where encode() must return the ids the reference gets from the HF tokenizer, i.e.
starting with BOS 128000. The real Llama-3 tokenizer.json adds that BOS in its
post-processor; other tokenizer.json files may not. TextTokenizer probes the
post-processor once at load time and either uses it (it adds exactly BOS in front)
or prepends BOS itself (it adds nothing), so BOS appears exactly once either way.
A post-processor that adds anything else is refused.

User text never becomes control tokens: special tokens written in the text (say
"<|eot_id|>") are encoded as plain text, so a caller cannot end the human turn or
start speech early through the text field.

`build_byte_level_tokenizer_json()` makes the demo tokenizer: one token per UTF-8
byte (ids 0..255), with the Llama-3 / Orpheus special tokens at their real ids.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from tokenizers import Tokenizer

from orpheus_svc.core.tokens import (
    BOS_ID, END_OF_HUMAN_ID, END_OF_SPEECH_ID, END_OF_TEXT_ID, PAD_ID, START_OF_AI_ID,
    START_OF_HUMAN_ID, START_OF_SPEECH_ID,
)

BOS_TOKEN = "<|begin_of_text|>"
_PROBE_TEXT = "tara: probe"

# Llama-3 specials we place at their real ids; Orpheus names its added tokens
# <custom_token_N> with N = id - 128256 (128257 = <custom_token_1> = start of speech).
_LLAMA3_SPECIALS = {
    BOS_ID: BOS_TOKEN,
    128001: "<|end_of_text|>",
    128006: "<|start_header_id|>",
    128007: "<|end_header_id|>",
    END_OF_TEXT_ID: "<|eot_id|>",
}
_ORPHEUS_SPECIAL_IDS = (START_OF_SPEECH_ID, END_OF_SPEECH_ID, START_OF_HUMAN_ID, END_OF_HUMAN_ID,
                        START_OF_AI_ID, 128262, PAD_ID, 128264, 128265)
_CUSTOM_TOKEN_BASE = 128256


class ControlTokenInTextError(ValueError):
    """The text spells a control token of the tokenizer; the caller should reject the text."""


class TextTokenizer:
    """Encodes prompt text to Llama-3 ids (with BOS 128000 first) via `tokenizers`."""

    def __init__(self, tokenizer: Tokenizer, *, source: str = "<memory>") -> None:
        self._tok = tokenizer
        self.source = source
        if tokenizer.id_to_token(BOS_ID) is None:
            raise ValueError(f"tokenizer {source}: has no token with id {BOS_ID} (BOS); "
                             "not a Llama-3 / Orpheus tokenizer")
        # Specials typed by a user are text, not control tokens (see module docstring).
        tokenizer.encode_special_tokens = True
        # Added tokens not marked special are still matched in text; encode() refuses them.
        self._control_ids = frozenset(
            i for i, t in tokenizer.get_added_tokens_decoder().items() if not t.special)
        with_post = tokenizer.encode(_PROBE_TEXT, add_special_tokens=True).ids
        plain = tokenizer.encode(_PROBE_TEXT, add_special_tokens=False).ids
        if with_post == [BOS_ID] + plain:
            self.post_processor_adds_bos = True
        elif with_post == plain:
            self.post_processor_adds_bos = False
        else:
            raise ValueError(
                f"tokenizer {source}: its post-processor turns {plain[:4]}... into "
                f"{with_post[:4]}...; expected it to add only BOS {BOS_ID} in front, or nothing")

    @classmethod
    def from_file(cls, path: str | Path) -> "TextTokenizer":
        """Load `tokenizer.json` (a file, or a directory that holds one)."""
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: tokenizer.json not found")
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises plain Exception subclasses from Rust
            raise ValueError(f"{path}: not a valid tokenizer.json: {exc}") from exc
        return cls(tok, source=str(path))

    @classmethod
    def from_str(cls, tokenizer_json: str) -> "TextTokenizer":
        """Load from the text of a tokenizer.json."""
        return cls(Tokenizer.from_str(tokenizer_json))

    def encode(self, text: str) -> list[int]:
        """Ids of `text`, starting with BOS 128000 exactly once (as the HF tokenizer returns).

        Raises ControlTokenInTextError if the text spells an added control token that the
        tokenizer would match as such (special tokens are always encoded as plain text).
        """
        if self.post_processor_adds_bos:
            ids = self._tok.encode(text, add_special_tokens=True).ids
        else:
            ids = [BOS_ID] + self._tok.encode(text, add_special_tokens=False).ids
        if self._control_ids:
            bad = next((i for i in ids[1:] if i in self._control_ids), None)
            if bad is not None:
                raise ControlTokenInTextError(
                    f"text contains the control token {self._tok.id_to_token(bad)!r} (id {bad})")
        return ids

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        """Text of `ids` (for logs and tests; the service never decodes audio ids as text)."""
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(token_id)

    def max_id(self) -> int:
        """Largest id the tokenizer can produce (vocabularies may be sparse, so not size - 1)."""
        return max(self._tok.get_vocab(with_added_tokens=True).values())


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2 / Llama-3 byte-level alphabet: each byte maps to one printable character."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
                 + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def demo_special_tokens() -> dict[int, str]:
    """id -> content of the specials in the demo tokenizer (Llama-3 and Orpheus ids)."""
    specials = dict(_LLAMA3_SPECIALS)
    specials.update({i: f"<custom_token_{i - _CUSTOM_TOKEN_BASE}>" for i in _ORPHEUS_SPECIAL_IDS})
    return specials


@lru_cache(maxsize=1)
def build_byte_level_tokenizer_json() -> str:
    """tokenizer.json text of the demo tokenizer (deterministic; same string every call).

    Why the specials sit in the model vocabulary and not only in `added_tokens`:
    `tokenizers` gives an added token that the model does not know the next free id
    on load (renumbering 128000 to 256 here), whereas an added token the model knows
    keeps the model's id. The vocabulary is sparse (0..255, then the specials), which
    BPE allows; it keeps the file a few KB instead of 128k filler entries.
    """
    alphabet = _byte_to_unicode()
    vocab = {alphabet[b]: b for b in range(256)}
    specials = demo_special_tokens()
    vocab.update({content: i for i, content in specials.items()})
    added = [{"id": i, "content": content, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, content in sorted(specials.items())]
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        # No regex split: every byte is its own token anyway, and no merges exist.
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": False},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": BOS_TOKEN, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": BOS_TOKEN, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": BOS_TOKEN, "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {BOS_TOKEN: {"id": BOS_TOKEN, "ids": [BOS_ID], "tokens": [BOS_TOKEN]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": []},
    }
    text = json.dumps(doc, ensure_ascii=False, indent=None, sort_keys=False)
    # Parse once so a malformed document fails here, not in a later load.
    Tokenizer.from_str(text)
    return text
