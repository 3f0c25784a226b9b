"""The torch backend's repetition penalty, applied to one TensorRT-LLM request's logits.

Why here: TensorRT-LLM 1.2's default sampler on its PyTorch runtime (TorchSampler) reads
temperature, top_p, top_k and the beam width only; SamplingParams.repetition_penalty is
accepted and ignored (docs/tensorrt-llm.md has the source). Orpheus loops without the
penalty, so we apply it in our own logits processor, which runs on the logits before the
sampler, and never send repetition_penalty to TensorRT-LLM (a later version that applies it
would otherwise penalise twice, and its C++ sampler counts the prompt).

Semantics: exactly the torch backend's (engine/torch/backend.py TorchBackend.sample):

    ids that count   the audio ids this generation emitted (SeenAudio.mark: the tokens it
                     sampled, reset at its prefill), never the prompt's, never the stop id
    which of them    those of the frame position being sampled (SeenAudio.rows(slot, p)):
                     an audio id names its position, so only position p's ids can be
                     penalised at p, and each is penalised once however often it came
    arithmetic       apply_repetition_penalty (HF: a positive logit divided by the
                     penalty, a negative one multiplied), the same function

    token_ids[0] = prompt (prompt_len ids) | generated t0 t1 ... t(k-1)   -> sampling t(k)
                   not counted             | audio ids counted at their own position

The position is read from the last token (core/grammar.py state_after_token), as the
grammar mask does, so it is right only when token_ids ends with the previous step's token:
the overlap scheduler must be off (engine/trtllm/rules.py).

Cheap and stream-friendly: the emitted ids are recorded incrementally (only tokens new
since the last call are read; each marks one element of a [7, 4096] device table with a
scalar index, so no host-to-device copy and no sync), and the penalty itself is a few
element-wise kernels on one 4096-wide slice. Nothing runs at penalty 1.0 (x / 1 and x * 1
are x) or while position p has no emitted id yet.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from orpheus_svc.core.grammar import position_id_range, split_audio_token, state_after_token
from orpheus_svc.core.tokens import AUDIO_BASE, AUDIO_VOCAB, CODES_PER_POSITION, FRAME_TOKENS
from orpheus_svc.engine.model.sampling import apply_repetition_penalty


class AudioRepetitionPenalty:
    """One request's repetition penalty (module docstring); `apply` edits logits in place.

    Holds the request's emitted ids, so one instance serves one request: TensorRT-LLM's
    worker unpickles each request's own copy. The device tensors are dropped when pickled
    and rebuilt on the first call."""

    def __init__(self, prompt_len: int, penalty: float) -> None:
        if prompt_len < 0:
            raise ValueError(f"prompt_len must be >= 0, got {prompt_len}")
        self.prompt_len = prompt_len
        self.penalty = float(penalty)
        self._reset()

    def _reset(self) -> None:
        self._read = self.prompt_len                 # token_ids[0] read up to here
        self._emitted = [False] * FRAME_TOKENS       # any id recorded at each position
        self._seen: Any = None                       # [7, 4096] bool, on the logits' device
        self._pen: Any = None                        # [1] float32: the penalty, same device

    def __getstate__(self) -> dict:
        return {"prompt_len": self.prompt_len, "penalty": self.penalty}

    def __setstate__(self, state: dict) -> None:
        self.prompt_len, self.penalty = state["prompt_len"], state["penalty"]
        self._reset()

    def apply(self, logits: Any, token_ids: Sequence[int]) -> None:
        """Penalise `logits` (TensorRT-LLM's [beam, 1, vocab]; beam 1, the only width we
        ask for) for the next token after `token_ids` (the request's whole sequence)."""
        if self.penalty == 1.0:
            return
        rows = logits.view(-1, logits.shape[-1])  # a view: the edits land in `logits`
        self._record(token_ids, rows.device)
        position, _ = state_after_token(token_ids[-1] if token_ids else None)
        if not self._emitted[position]:
            return
        start, stop = position_id_range(position)
        apply_repetition_penalty(rows[:1, start:stop], self._seen[position:position + 1],
                                 self._pen)

    def _record(self, token_ids: Sequence[int], device: Any) -> None:
        if self._seen is None:
            self._seen = torch.zeros((FRAME_TOKENS, CODES_PER_POSITION), dtype=torch.bool,
                                     device=device)
            self._pen = torch.full((1,), self.penalty, dtype=torch.float32, device=device)
        for token in token_ids[self._read:]:
            if 0 <= token - AUDIO_BASE < AUDIO_VOCAB:  # the stop id and others never count
                position, code = split_audio_token(token)
                self._seen[position, code] = True
                self._emitted[position] = True
        self._read = max(self._read, len(token_ids))
