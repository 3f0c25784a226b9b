"""The audio grammar as a TensorRT-LLM per-request logits processor.

TensorRT-LLM 1.2 accepts `SamplingParams(logits_processor=callable)` with the signature

    processor(req_id, logits, token_ids, stream_ptr, client_id) -> None   (edits logits in place)

on both of its backends: the PyTorch backend calls it from Python with stream_ptr None; the
TensorRT backend calls it from the C++ executor with the CUDA stream the logits live on.
`logits` has the vocabulary as its last dimension ([1, beam, vocab] in the upstream
examples); `token_ids[beam]` is the request's sequence so far.

The next token's frame position is read from the last token alone, so the processor keeps
no per-step state and does not care whether `token_ids` includes the prompt:

    last token                      next position   stop id (128258) legal?
    not an audio id (prompt end)    0               no (no frame yet)
    audio id at position p          (p + 1) % 7     only when (p + 1) % 7 == 0

    allowed ids at position p: [128266 + p*4096, 128266 + (p+1)*4096)   (+ 128258 at a boundary)

Everything else is set to -inf, so sampling (temperature, top-p, repetition penalty) runs
over legal ids only: the same constraint the torch backend applies by slicing its LM head.
Our scheduler's FrameParser still validates every token (and counts violations), so a
processor that is not applied shows up in the status RPC instead of as corrupt audio.
"""

from __future__ import annotations

from typing import Any, Sequence

from orpheus_svc.core.tokens import (
    AUDIO_BASE,
    AUDIO_VOCAB,
    CODES_PER_POSITION,
    END_OF_SPEECH_ID,
    FRAME_TOKENS,
)

# Row of the mask table for "position 0, stop allowed" (rows 0..6 are positions 0..6).
_BOUNDARY_WITH_STOP = FRAME_TOKENS


def next_position(token_ids: Sequence[int]) -> tuple[int, bool]:
    """(frame position of the next token, whether the stop id is legal) after `token_ids`."""
    if not token_ids:
        return 0, False
    offset = token_ids[-1] - AUDIO_BASE
    if not 0 <= offset < AUDIO_VOCAB:
        return 0, False
    position = (offset // CODES_PER_POSITION + 1) % FRAME_TOKENS
    return position, position == 0


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
        import torch

        position, stop = next_position(token_ids[0] if token_ids else [])
        row = _BOUNDARY_WITH_STOP if stop else position
        if stream_ptr is None:
            self._apply(logits, row)
            return
        # The TensorRT backend hands us its stream; work queued elsewhere would race it.
        with torch.cuda.stream(torch.cuda.ExternalStream(stream_ptr)):
            self._apply(logits, row)

    def _apply(self, logits: Any, row: int) -> None:
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
        start = AUDIO_BASE + p * CODES_PER_POSITION
        table[p, start:start + CODES_PER_POSITION] = False
    table[_BOUNDARY_WITH_STOP] = table[0]
    if END_OF_SPEECH_ID < vocab:
        table[_BOUNDARY_WITH_STOP, END_OF_SPEECH_ID] = False
    return table
