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
from orpheus_svc.engine.model.invariant import in_invariant_step, rows_matmul

STOP_COLUMN = CODES_PER_POSITION  # column index of the stop logit in a [B, 4097] row


def splitmix_uniform(seeds: np.ndarray, counters: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) per (seed, counter): SplitMix64 finaliser, vectorised, no state."""
    with np.errstate(over="ignore"):
        z = seeds.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = z + counters.astype(np.uint64) * np.uint64(0xD1B54A32D192ED69) + np.uint64(1)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _signed(x: int) -> int:
    """A uint64 constant as the int64 with the same bits."""
    return x - (1 << 64) if x >= 1 << 63 else x


def _shr(z: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's >> is arithmetic on int64)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def splitmix_uniform_t(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """splitmix_uniform on the device: int64 tensors holding the uint64 bits of seeds and
    counters (int64_bits), wrapping multiplication, logical shifts; float64 out, the same
    values bit for bit, with no host sync (a CUDA graph can hold it)."""
    z = seeds * _signed(0x9E3779B97F4A7C15)
    z = z + counters * _signed(0xD1B54A32D192ED69) + 1
    z = (z ^ _shr(z, 30)) * _signed(0xBF58476D1CE4E5B9)
    z = (z ^ _shr(z, 27)) * _signed(0x94D049BB133111EB)
    z = z ^ _shr(z, 31)
    return _shr(z, 11).to(torch.float64) * (1.0 / (1 << 53))


def int64_bits(values) -> np.ndarray:
    """Python ints in [0, 2^64) as int64 with the same bits (for splitmix_uniform_t)."""
    return np.asarray(values, dtype=np.uint64).view(np.int64)


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
        out[rows, :CODES_PER_POSITION] = rows_matmul(hidden[rows], lm_head[start:stop].T).float()
    out[:, STOP_COLUMN] = stop_logits(hidden, lm_head)
    allowed = torch.as_tensor(stop_allowed, device=hidden.device)
    out[:, STOP_COLUMN].masked_fill_(~allowed, float("-inf"))
    return out


def stop_logits(hidden: torch.Tensor, lm_head: torch.Tensor) -> torch.Tensor:
    """[B] float32: each row's logit of the stop id. In an invariant step a one-column
    rows_matmul, not a GEMV, so that a row's bits do not depend on its batch
    (invariant.py)."""
    if not in_invariant_step():
        return (hidden @ lm_head[END_OF_SPEECH_ID]).float()
    stop = lm_head[END_OF_SPEECH_ID:END_OF_SPEECH_ID + 1]
    return rows_matmul(hidden, stop.T)[:, 0].float()


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


def _pick(sorted_p: torch.Tensor, order: torch.Tensor, cum: torch.Tensor, top_p: torch.Tensor,
          u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw inside each row's top-p nucleus of probabilities sorted high to low
    (`cum` their running sums): the column of `order` that uniform `u` lands on."""
    # keep the smallest prefix whose mass reaches top_p (the first token always stays)
    keep = (cum - sorted_p) < top_p[:, None]
    kept = torch.where(keep, sorted_p, torch.zeros_like(sorted_p))
    kept_cum = kept.cumsum(dim=-1)
    target = u * kept_cum[:, -1]
    idx = torch.searchsorted(kept_cum, target[:, None]).clamp_(max=kept.shape[1] - 1)
    # a zero-mass column can only be reached by float rounding at the edge: step back
    idx = torch.where(kept.gather(1, idx) > 0, idx, torch.zeros_like(idx))
    return order.gather(1, idx)[:, 0]


def choose_columns(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor,
                   u: torch.Tensor, branch_free: bool = False) -> torch.Tensor:
    """One column per row of [B, 4097] float32 logits (already penalised), on the device:
    temperature, top-p, and the inverse-CDF draw at uniform `u` (float32, [B]); greedy
    (argmax) where temperature <= 0. The eager backend and the graph engine both sample
    here, so the same logits, parameters and uniforms give the same columns.

    The nucleus usually lies within the 128 most likely columns, so each row is drawn from
    the top 128 (a partial sort) when their mass reaches its top_p, and from the full sort
    otherwise: exact either way, since once the mass reaches top_p no later column is kept.
    Per row, so a row's column never depends on its batch. `branch_free` computes the full
    sort for every row instead of asking the host whether any row needs it (no device sync:
    what a CUDA graph can hold); the columns are the same."""
    greedy = temperature <= 0
    scaled = logits / torch.where(greedy, torch.ones_like(temperature), temperature)[:, None]
    probs = torch.softmax(scaled, dim=-1)
    if probs.shape[1] > NUCLEUS_CANDIDATES:
        vals, cols = probs.topk(NUCLEUS_CANDIDATES, dim=-1)
        cum = vals.cumsum(dim=-1)
        fits = cum[:, -1] >= top_p
        col = _pick(vals, cols, cum, top_p, u)
        if branch_free or not bool(fits.all()):
            svals, scols = probs.sort(dim=-1, descending=True)
            col = torch.where(fits, col, _pick(svals, scols, svals.cumsum(dim=-1), top_p, u))
    else:
        svals, scols = probs.sort(dim=-1, descending=True)
        col = _pick(svals, scols, svals.cumsum(dim=-1), top_p, u)
    return torch.where(greedy, probs.argmax(dim=-1), col)


def columns_to_ids(cols: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Token ids of chosen columns at frame positions (tensors): the stop column is the stop
    id, column c at position p is audio id AUDIO_BASE + p * 4096 + c."""
    audio = AUDIO_BASE + positions * CODES_PER_POSITION + cols
    return torch.where(cols == STOP_COLUMN, torch.full_like(cols, END_OF_SPEECH_ID), audio)


def sample_rows(logits: torch.Tensor, params: RowParams) -> list[int]:
    """Sample one column per row of [B, 4097] logits; returns token ids."""
    device = logits.device
    temperature = torch.as_tensor(params.temperature, dtype=torch.float32, device=device)
    top_p = torch.as_tensor(params.top_p, dtype=torch.float32, device=device)
    u = splitmix_uniform(np.asarray(params.seeds, dtype=np.uint64),
                         np.asarray(params.counters, dtype=np.uint64))
    u = torch.as_tensor(u, dtype=torch.float32, device=device)
    cols = choose_columns(logits, temperature, top_p, u).tolist()
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
