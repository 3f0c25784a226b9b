"""The logits processor each TensorRT-LLM request carries (SamplingParams.logits_processor).

    RequestLogitsProcessor(penalty, grammar)(req_id, logits, token_ids, stream_ptr, client_id)

One callable with LogitsProcessor's signature, because TensorRT-LLM's TensorRT runtime takes
one processor per request (a list is the PyTorch runtime's only). In order, on TensorRT-LLM's
stream, editing the logits in place before its sampler:

  1. the audio-grammar mask (grammar.py), unless engine.trtllm_grammar_mask is false;
  2. the repetition penalty (penalty.py), always: TensorRT-LLM 1.2's default sampler
     ignores SamplingParams.repetition_penalty, so this is the only place it is applied.

The order does not change the result: the penalty edits only the ids of the position being
sampled, which the mask keeps, and a masked -inf stays -inf either way.
"""

from __future__ import annotations

from typing import Any

from orpheus_svc.engine.trtllm.cuda_stream import on_stream
from orpheus_svc.engine.trtllm.grammar import AudioGrammarLogitsProcessor
from orpheus_svc.engine.trtllm.penalty import AudioRepetitionPenalty


class RequestLogitsProcessor:
    """One request's processor (module docstring). Pickles with its parts (TensorRT-LLM's
    worker unpickles each request); neither part keeps tensors across a pickle."""

    def __init__(self, penalty: AudioRepetitionPenalty,
                 grammar: AudioGrammarLogitsProcessor | None = None) -> None:
        self.penalty = penalty
        self.grammar = grammar

    def __call__(self, req_id: int, logits: Any, token_ids: list[list[int]],
                 stream_ptr: int | None, client_id: int | None) -> None:
        seq = token_ids[0] if token_ids else []
        with on_stream(stream_ptr):
            if self.grammar is not None:
                self.grammar.mask(logits, seq)
            self.penalty.apply(logits, seq)


def request_processor(prompt_len: int, repetition_penalty: float,
                      grammar: AudioGrammarLogitsProcessor | None) -> RequestLogitsProcessor:
    """The processor for one request: its own penalty state, the shared grammar mask."""
    return RequestLogitsProcessor(AudioRepetitionPenalty(prompt_len, repetition_penalty),
                                  grammar)
