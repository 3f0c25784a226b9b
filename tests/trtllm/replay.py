"""STAND-IN for TensorRT-LLM's PyTorch executor as a logits processor sees it. Not TensorRT-LLM.

What it replays (TensorRT-LLM 1.x source, see docs/tensorrt-llm.md):

  * the processor crosses a process boundary: the proxy pickles the request and the worker
    unpickles it, so each request runs its own unpickled copy of the processor;
  * it is called inside the forward step as processor(req_id, logits[1, 1, vocab],
    [request.get_tokens(0)], None, None) and edits the logits in place; sampling follows;
  * timing of get_tokens(0):

        step            0 (context)   1          2              k
        overlap off     prompt        p + t0     p + t0 t1      p + t0..t(k-1)
        overlap on      prompt        prompt     p + t0         p + t0..t(k-2)   <- one late

    With the overlap scheduler the forward step of step k runs before the token of step
    k-1 is added to the request (_executor_loop_overlap: forward, then
    _process_previous_batch -> _update_requests).

Use it as StandInLLM(script=ExecutorReplay(overlap=...)): every request streams what the
replayed sampler picked, in deltas of `chunk` tokens, ending "stop" at the end id or
"length" at max_tokens, like TensorRT-LLM's streaming results.

The sampler is cheap rejection sampling, not TensorRT-LLM's: it draws candidate ids (any
audio id, now and then the end id or any id of the vocabulary) and takes the first whose
logit the processors left finite. So whatever the processors allow can come out, and
nothing they masked can.
"""

from __future__ import annotations

import pickle
import random

import torch

from orpheus_svc.core.tokens import AUDIO_BASE, AUDIO_VOCAB, ORPHEUS_VOCAB_SIZE


class ExecutorReplay:
    def __init__(self, *, overlap: bool, seed: int = 0, chunk: int = 5,
                 vocab: int = ORPHEUS_VOCAB_SIZE) -> None:
        self.overlap = overlap
        self.seed = seed
        self.chunk = chunk
        self.vocab = vocab
        self.visible: list[list[int]] = []  # what the processor saw, per call (last request)

    def __call__(self, req) -> list[tuple[list[int], str | None]]:
        kw = req.params.kwargs
        processors = kw.get("logits_processor") or []
        if not isinstance(processors, list):
            processors = [processors]
        processors = [pickle.loads(pickle.dumps(p)) for p in processors]  # the worker's copy
        rng = random.Random(self.seed * 7919 + int(kw.get("seed") or 0))
        prompt, out = list(req.prompt_ids), []
        self.visible = []
        reason = "length"
        logits = torch.zeros(1, 1, self.vocab)
        for step in range(kw["max_tokens"]):
            late = 1 if self.overlap and step > 0 else 0
            seen = prompt + out[:len(out) - late]
            self.visible.append(seen[len(prompt):])
            logits.zero_()
            for lp in processors:
                lp(id(req), logits, [seen], None, None)
            token = self._sample(logits[0, 0], kw["end_id"], rng)
            out.append(token)
            if token == kw["end_id"]:
                reason = "stop"
                break
        deltas = [(out[i:i + self.chunk], None) for i in range(0, len(out), self.chunk)]
        return deltas + [([], reason)]

    def _sample(self, row: torch.Tensor, end_id: int, rng: random.Random) -> int:
        while True:
            roll = rng.random()
            if roll < 0.01:
                candidate = end_id
            elif roll < 0.1:
                candidate = rng.randrange(self.vocab)
            else:
                candidate = AUDIO_BASE + rng.randrange(AUDIO_VOCAB)
            if row[candidate].item() != float("-inf"):
                return candidate
