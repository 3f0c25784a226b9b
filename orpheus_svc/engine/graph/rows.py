"""The rows of one graph-engine step: decode rows and prompt tokens, as the captured step reads
them (pure numpy; no eager prefill on the hot path).

A new generation's prompt enters the same captured step as the decode rows, one row per
prompt token at its own position in its slot (chunked prefill as extra rows, as SGLang and
vLLM mix prefill into decode batches). Every row writes its K/V before any row attends, so a
prompt token attends to the earlier tokens of its prompt written in the same step:

    row      0 .. n-1            n .. n+L0-1              ...        padding
             decode rows         prompt 0's tokens                   (the dummy slot)
    token    -1 (last_ids)       prompt ids
    pos      its KV position     0 .. L0-1
    sample   1                   0 ... 0 1 (its last token samples the first audio id)
    first    0                   1 0 ... 0 (resets the slot's sampling state)
    adapter  its LoRA adapter    its LoRA adapter         -1 (the base model)

Int rows (INPUT_ROWS) and float rows (PARAM_ROWS: a new prompt's sampling parameters, read
where `first` is set) go to the device in one pinned copy each. A step with more rows than
the largest graph holds runs as several replays of consecutive chunks (a long prompt alone:
its earlier chunks' K/V are written before the later ones attend, in stream order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

# The step's integer input rows ([len(INPUT_ROWS), bucket] int64), in this order.
INPUT_ROWS = ("slots", "pos", "fpos", "stop_ok", "counter", "token", "sample", "first", "seed",
              "adapter")
# Its float input rows ([len(PARAM_ROWS), bucket] float32): a new prompt's sampling, by
# SamplingParams' names (the device's per-slot parameters, step.py SlotState, in this order).
PARAM_ROWS = ("temperature", "top_p", "repetition_penalty")
INPUT = {name: i for i, name in enumerate(INPUT_ROWS)}
PARAM = {name: i for i, name in enumerate(PARAM_ROWS)}


@dataclass(frozen=True, kw_only=True, slots=True)
class PrefillRow:
    """One new generation of a step: its prompt goes into its slot, and its sampling state
    (set on the device by its first row) is what its decode rows read later."""

    slot: int
    prompt_ids: Sequence[int]
    temperature: float
    top_p: float
    repetition_penalty: float
    seed: int                # as int64 bits (engine/model/sampling.py int64_bits)
    frame_position: int
    stop_allowed: bool
    counter: int             # tokens sampled so far (the counter of its uniform)
    invariant: bool = False  # a seeded session's: its bits must not depend on the batch
    adapter: int = -1        # its LoRA adapter slot (engine/model/lora.py), -1 = base
    start: int = 0           # the position of its first token: below it, a prefix's KV


@dataclass
class StepRows:
    """A step's rows (module docstring): ints [len(INPUT_ROWS), n], floats
    [len(PARAM_ROWS), n]; `decode` rows first, then each prefill's tokens; `prefill_last`:
    the row of each prefill's last prompt token (where its first audio id comes out)."""

    ints: np.ndarray
    floats: np.ndarray
    decode: int
    prefill_last: np.ndarray

    @property
    def count(self) -> int:
        return self.ints.shape[1]

    def chunks(self, capacity: int) -> list[tuple[int, int]]:
        """[lo, hi) row ranges of at most `capacity` rows, in order (one replay each)."""
        return [(lo, min(lo + capacity, self.count)) for lo in range(0, self.count, capacity)]

    def pack(self, ints: np.ndarray, floats: np.ndarray, lo: int, hi: int, bucket: int,
             dummy: int) -> None:
        """Rows [lo, hi) into ints[:, :bucket] and floats[:, :bucket], the rest padding: the
        dummy slot at position 0, reading its own last id, sampling nothing."""
        n = hi - lo
        ints[:, :n] = self.ints[:, lo:hi]
        floats[:, :n] = self.floats[:, lo:hi]
        ints[:, n:bucket] = 0
        ints[INPUT["slots"], n:bucket] = dummy
        ints[INPUT["token"], n:bucket] = -1
        ints[INPUT["adapter"], n:bucket] = -1
        floats[:, n:bucket] = 1.0


def step_rows(decode: np.ndarray | None, prefill: Sequence[PrefillRow]) -> StepRows:
    """The rows of a step: `decode` as a [5, n] array (slots, pos, fpos, stop_ok, counter),
    or [6, n] with each row's adapter last, or None; then one row per prompt token of each
    PrefillRow."""
    n = 0 if decode is None else decode.shape[1]
    lengths = [len(p.prompt_ids) for p in prefill]
    total = n + sum(lengths)
    ints = np.zeros((len(INPUT_ROWS), total), np.int64)
    floats = np.ones((len(PARAM_ROWS), total), np.float32)
    ints[INPUT["adapter"]] = -1
    if n:
        ints[:5, :n] = decode[:5]
        ints[INPUT["token"], :n] = -1
        ints[INPUT["sample"], :n] = 1
        if decode.shape[0] > 5:
            ints[INPUT["adapter"], :n] = decode[5]
    last = np.zeros(len(prefill), np.int64)
    at = n
    for k, (p, length) in enumerate(zip(prefill, lengths)):
        rows = slice(at, at + length)
        ints[INPUT["slots"], rows] = p.slot
        ints[INPUT["pos"], rows] = np.arange(p.start, p.start + length)
        ints[INPUT["fpos"], rows] = p.frame_position
        ints[INPUT["stop_ok"], rows] = int(p.stop_allowed)
        ints[INPUT["counter"], rows] = p.counter
        ints[INPUT["token"], rows] = p.prompt_ids
        ints[INPUT["seed"], rows] = p.seed
        ints[INPUT["adapter"], rows] = p.adapter
        ints[INPUT["first"], at] = 1
        ints[INPUT["sample"], at + length - 1] = 1
        floats[PARAM["temperature"], rows] = p.temperature
        floats[PARAM["top_p"], rows] = p.top_p
        floats[PARAM["repetition_penalty"], rows] = p.repetition_penalty
        last[k] = at + length - 1
        at += length
    return StepRows(ints, floats, n, last)
