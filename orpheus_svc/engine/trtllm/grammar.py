"""The audio grammar as a TensorRT-LLM per-request logits processor.

TensorRT-LLM 1.2 accepts `SamplingParams(logits_processor=callable)` with the signature

    processor(req_id, logits, token_ids, stream_ptr, client_id) -> None   (edits logits in place)

on both of its backends: the PyTorch backend calls it from Python with stream_ptr None; the
TensorRT backend calls it from the C++ executor with the CUDA stream the logits live on.
`logits` has the vocabulary as its last dimension ([1, beam, vocab] in the upstream
examples); `token_ids[beam]` is the request's sequence so far.

The rule is the audio grammar's (core/grammar.py). The next token's frame position is read
from the last token alone (grammar.state_after_token), so the processor keeps no per-step
state and does not care whether `token_ids` includes the prompt:

    last token                      next position   stop id (128258) legal?
    not an audio id (prompt end)    0               no (no frame yet)
    audio id at position p          (p + 1) % 7     only when (p + 1) % 7 == 0

    allowed ids at position p: grammar.position_id_range(p)   (+ 128258 where legal)

Everything else is set to -inf, so sampling (temperature, top-p) runs over legal ids only:
the same constraint the torch backend applies by slicing its LM head. The repetition
penalty is ours too (penalty.py); processor.py runs both for every request.
Our scheduler's FrameParser still validates every token (and counts violations), so a
processor that is not applied shows up in the status RPC instead of as corrupt audio.
"""

from __future__ import annotations

from typing import Any, Sequence

from orpheus_svc.core.grammar import position_id_range, state_after_token
from orpheus_svc.core.tokens import END_OF_SPEECH_ID, FRAME_TOKENS
from orpheus_svc.engine.trtllm.cuda_stream import on_stream

# Row of the mask table for "position 0, stop allowed" (rows 0..6 are positions 0..6).
_BOUNDARY_WITH_STOP = FRAME_TOKENS


class AudioGrammarLogitsProcessor:
    """Masks every id the audio grammar forbids at the next position (see module docstring).

    A plain callable (TensorRT-LLM accepts any callable with LogitsProcessor's signature),
    so this module imports without tensorrt_llm. The [8, vocab] block table is built
    lazily per (device, vocab size) and dropped when pickled: TensorRT-LLM may ship
    SamplingParams to a worker process.
    """

    def __init__(self) -> None:
        self._tables: dict[tuple[str, int], Any] = {}

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self._tables = {}

    def __call__(self, req_id: int, logits: Any, token_ids: list[list[int]],
                 stream_ptr: int | None, client_id: int | None) -> None:
        with on_stream(stream_ptr):
            self.mask(logits, token_ids[0] if token_ids else [])

    def mask(self, logits: Any, token_ids: Sequence[int]) -> None:
        """Mask `logits` in place (on the current stream) for the token after `token_ids`."""
        position, stop = state_after_token(token_ids[-1] if token_ids else None)
        row = _BOUNDARY_WITH_STOP if stop else position
        blocked = self._table(logits.device, logits.shape[-1])[row]
        logits.masked_fill_(blocked, float("-inf"))

    def _table(self, device: Any, vocab: int) -> Any:
        key = (str(device), vocab)
        table = self._tables.get(key)
        if table is None:
            table = block_table(vocab, device)
            self._tables[key] = table
        return table


def block_table(vocab: int, device: Any = "cpu") -> Any:
    """[8, vocab] bool: True where an id is forbidden. Rows 0..6: positions 0..6 without the
    stop id; row 7: position 0 with the stop id. Ids past the Orpheus vocabulary (padding
    some engines add to the LM head) are always forbidden."""
    import torch

    table = torch.ones((FRAME_TOKENS + 1, vocab), dtype=torch.bool, device=device)
    for p in range(FRAME_TOKENS):
        start, stop = position_id_range(p)
        table[p, start:stop] = False
    table[_BOUNDARY_WITH_STOP] = table[0]
    if END_OF_SPEECH_ID < vocab:
        table[_BOUNDARY_WITH_STOP, END_OF_SPEECH_ID] = False
    return table
