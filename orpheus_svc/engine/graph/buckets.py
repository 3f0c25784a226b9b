"""Batch buckets of the graph engine: the batch sizes a CUDA graph is captured for, and how a
step's rows are padded up to one. Pure Python and numpy.

A step of n decode rows runs the graph of the smallest bucket >= n; rows n..bucket-1 are
padding that points at the dummy slot (the KV slot pool's spare one), at position 0, with a
zero counter and the stop id forbidden, so whatever they compute lands in that slot alone:

    rows     0 .. n-1                      n .. bucket-1
    slot     the generations' own slots    dummy
    pos      KV index of the token fed     0
    fpos     frame position sampled        0
    stop_ok  the grammar's                 0
    counter  tokens sampled so far         0
"""

from __future__ import annotations

import bisect

import numpy as np

# Powers of two up to 16, then steps of 16 up to 64, of 32 up to 256, of 64 beyond: a padded
# step wastes at most a third of its rows at 48 and under a quarter past 64.
_STEPS = ((16, 16), (64, 16), (256, 32))

# The rows of the decode step's integer input ([5, bucket] int64), in this order.
INPUT_ROWS = ("slots", "pos", "fpos", "stop_ok", "counter")


def batch_buckets(max_batch: int) -> list[int]:
    """The buckets for a largest batch of `max_batch` rows (the last one is max_batch)."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        if b < 16:
            b *= 2
            continue
        step = next((s for limit, s in _STEPS if b < limit), 64)
        b += step
    out.append(max_batch)
    return out


def bucket_for(buckets: list[int], n: int) -> int:
    """The smallest bucket that holds n rows (buckets sorted ascending)."""
    i = bisect.bisect_left(buckets, n)
    if n < 1 or i == len(buckets):
        raise ValueError(f"{n} rows: the graph engine runs 1..{buckets[-1]} decode rows a step "
                         "(engine.max_batch_size)")
    return buckets[i]


def pack_inputs(out: np.ndarray, dummy: int, slots: np.ndarray, pos: np.ndarray,
                fpos: np.ndarray, stop_ok: np.ndarray, counter: np.ndarray, bucket: int) -> None:
    """Write n rows and bucket - n padding rows (module docstring) into out[:, :bucket]."""
    n = len(slots)
    out[0, :n], out[1, :n], out[2, :n] = slots, pos, fpos
    out[3, :n], out[4, :n] = stop_ok, counter
    out[:, n:bucket] = 0
    out[0, n:bucket] = dummy
