"""Constrained, vectorised sampling over the audio grammar.

The audio grammar (core/grammar.py) allows at frame position p only the 4096 ids of
position p, plus the stop id where the row's stop_allowed says so. So each row needs just
4097 LM-head rows, and those rows are a contiguous slice of the head for every p:

    lm_head rows:  ... | p0: 128266..132361 | p1: 132362..136457 | ... | p6 | ...
    row r (at p):  logits[r] = [ h_r @ W[slice p].T  (4096) , h_r @ W[stop]  (1) ]

Rows are grouped by p (at most 7 matmuls) instead of one 156,940-row head: correct by
construction (an illegal id has no logit to be sampled from) and cheaper.

Sampling per row: repetition penalty over the generation's own audio ids (HF semantics:
positive logits divided, negative multiplied), temperature, top-p, then inverse-CDF with a
uniform drawn from a counter-based RNG keyed by (seed, token index), so a generation's
tokens do not depend on which other generations share its batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from orpheus_svc.core.grammar import position_id_range
from orpheus_svc.core.tokens import (
    AUDIO_BASE,
    AUDIO_VOCAB,
    CODES_PER_POSITION,
    END_OF_SPEECH_ID,
    FRAME_TOKENS,
)

STOP_COLUMN = CODES_PER_POSITION  # column index of the stop logit in a [B, 4097] row

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix_uniform(seeds: np.ndarray, counters: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) per (seed, counter): SplitMix64 finaliser, vectorised, no state."""
    with np.errstate(over="ignore"):
        z = seeds.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = z + counters.astype(np.uint64) * np.uint64(0xD1B54A32D192ED69) + np.uint64(1)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


@dataclass
class RowParams:
    """Per-row sampling inputs for one step (length B each)."""

    positions: list[int]       # frame position p of the token being sampled
    stop_allowed: list[bool]
    temperature: list[float]
    top_p: list[float]
    repetition_penalty: list[float]
    seeds: list[int]
    counters: list[int]        # index of the token being sampled within its generation


def constrained_logits(hidden: torch.Tensor, lm_head: torch.Tensor,
                       positions: list[int], stop_allowed: list[bool]) -> torch.Tensor:
    """[B, 4097] float32 logits: the legal audio ids of each row's position, then stop."""
    bsz = hidden.shape[0]
    out = torch.empty((bsz, CODES_PER_POSITION + 1), dtype=torch.float32, device=hidden.device)
    pos_t = torch.as_tensor(positions)
    for p in sorted(set(positions)):
        rows = torch.nonzero(pos_t == p).flatten().to(hidden.device)
        start, stop = position_id_range(p)
        out[rows, :CODES_PER_POSITION] = (hidden[rows] @ lm_head[start:stop].T).float()
    out[:, STOP_COLUMN] = (hidden @ lm_head[END_OF_SPEECH_ID]).float()
    allowed = torch.as_tensor(stop_allowed, device=hidden.device)
    out[:, STOP_COLUMN].masked_fill_(~allowed, float("-inf"))
    return out


def full_head_logits(hidden: torch.Tensor, lm_head: torch.Tensor) -> torch.Tensor:
    """The unrestricted head (all vocabulary rows); used only to measure what we save."""
    return hidden @ lm_head.T


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor,
                             penalty: torch.Tensor) -> torch.Tensor:
    """seen [B, 4096] bool: this row's generation already emitted that id at this position."""
    pen = penalty[:, None]
    audio = logits[:, :CODES_PER_POSITION]
    penalised = torch.where(audio > 0, audio / pen, audio * pen)
    logits[:, :CODES_PER_POSITION] = torch.where(seen, penalised, audio)
    return logits


NUCLEUS_CANDIDATES = 128


def _sorted_nucleus(probs: torch.Tensor, top_p: torch.Tensor):
    """Probabilities sorted high to low (values, columns, cumulative sums), far enough to
    hold every row's top-p nucleus. Usually the top 128 of 4097 suffice, which is much
    cheaper than a full sort; exact, because once the cumulative mass reaches top_p no
    later column can be kept. Falls back to the full sort when some row needs more."""
    if probs.shape[1] > NUCLEUS_CANDIDATES:
        vals, cols = probs.topk(NUCLEUS_CANDIDATES, dim=-1)
        cum = vals.cumsum(dim=-1)
        if bool((cum[:, -1] >= top_p).all()):
            return vals, cols, cum
    vals, cols = probs.sort(dim=-1, descending=True)
    return vals, cols, vals.cumsum(dim=-1)


def sample_rows(logits: torch.Tensor, params: RowParams) -> list[int]:
    """Sample one column per row of [B, 4097] logits; returns token ids."""
    device = logits.device
    temp = torch.as_tensor(params.temperature, dtype=torch.float32, device=device)
    top_p = torch.as_tensor(params.top_p, dtype=torch.float32, device=device)
    greedy = temp <= 0
    scaled = logits / torch.where(greedy, torch.ones_like(temp), temp)[:, None]
    probs = torch.softmax(scaled, dim=-1)
    sorted_p, order, cum = _sorted_nucleus(probs, top_p)
    # keep the smallest prefix whose mass reaches top_p (the first token always stays)
    keep = (cum - sorted_p) < top_p[:, None]
    kept = torch.where(keep, sorted_p, torch.zeros_like(sorted_p))
    kept_cum = kept.cumsum(dim=-1)
    u = splitmix_uniform(np.asarray(params.seeds, dtype=np.uint64),
                         np.asarray(params.counters, dtype=np.uint64))
    target = torch.as_tensor(u, dtype=torch.float32, device=device) * kept_cum[:, -1]
    idx = torch.searchsorted(kept_cum, target[:, None]).clamp_(max=kept.shape[1] - 1)
    # a zero-mass column can only be reached by float rounding at the edge: step back
    idx = torch.where(kept.gather(1, idx) > 0, idx, torch.zeros_like(idx))
    col = order.gather(1, idx)[:, 0]
    col = torch.where(greedy, probs.argmax(dim=-1), col)
    cols = col.tolist()
    return [END_OF_SPEECH_ID if c == STOP_COLUMN else position_id_range(p)[0] + c
            for c, p in zip(cols, params.positions)]


class SeenAudio:
    """Per-slot record of emitted audio ids, on the model's device: [slots, 7, 4096] bool."""

    def __init__(self, num_slots: int, device: torch.device) -> None:
        self.seen = torch.zeros((num_slots, FRAME_TOKENS, CODES_PER_POSITION), dtype=torch.bool,
                                device=device)

    def reset(self, slots: list[int]) -> None:
        self.seen[torch.as_tensor(slots, device=self.seen.device)] = False

    def rows(self, slots: list[int], positions: list[int]) -> torch.Tensor:
        s = torch.as_tensor(slots, device=self.seen.device)
        p = torch.as_tensor(positions, device=self.seen.device)
        return self.seen[s, p]

    def mark(self, slots: list[int], token_ids: list[int]) -> None:
        marks = [(s, t - AUDIO_BASE) for s, t in zip(slots, token_ids)
                 if 0 <= t - AUDIO_BASE < AUDIO_VOCAB]
        if not marks:
            return
        s = torch.as_tensor([m[0] for m in marks], device=self.seen.device)
        off = torch.as_tensor([m[1] for m in marks], device=self.seen.device)
        self.seen[s, off // CODES_PER_POSITION, off % CODES_PER_POSITION] = True
