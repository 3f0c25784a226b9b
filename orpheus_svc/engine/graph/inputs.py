"""A graph-engine step's inputs as one contiguous block of int64 words per chunk, so that a
chunk's whole input goes host-to-device in one copy between two contiguous buffers.

    block (bucket b)   [ ints: len(INPUT_ROWS) x b int64 | floats: len(PARAM_ROWS) x b float32, | pad ]
                                                           two to a word (their bits)
                       0                          10 * b                           block_words(b)

The block is int64, not bytes: the same copy on the device, and on the CPU a copy of
words, where a byte tensor's copy is an elementwise loop (about 10x slower) that torch
also splits across threads.

The host packs a chunk's rows (rows.py StepRows.pack) into numpy views of a region of a
pinned staging block; the device holds one such block per bucket, and the bucket's
captured step reads its rows through views of it (`views`). A copy from a column slice of
a wider tensor would be neither contiguous nor, after PyTorch's contiguous temporary,
pinned: a pageable cudaMemcpyAsync, which may synchronise the host with the device.
"""

from __future__ import annotations

import numpy as np
import torch

from orpheus_svc.engine.graph.rows import INPUT_ROWS, PARAM_ROWS

# every block starts on a 64-byte boundary of its staging buffer (8 words: a whole number
# of cache lines for the copy engine)
ALIGN_WORDS = 8


def _float_words(bucket: int) -> int:
    return -(-len(PARAM_ROWS) * bucket // 2)


def block_words(bucket: int) -> int:
    """The int64 words of one chunk's block at `bucket` rows, rounded up to ALIGN_WORDS."""
    words = len(INPUT_ROWS) * bucket + _float_words(bucket)
    return -(-words // ALIGN_WORDS) * ALIGN_WORDS


def views(block: torch.Tensor, bucket: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ints [len(INPUT_ROWS), bucket] int64, floats [len(PARAM_ROWS), bucket] float32):
    views of an int64 block (device or host) of at least block_words(bucket), each
    contiguous."""
    split = len(INPUT_ROWS) * bucket
    ints = block[:split].view(len(INPUT_ROWS), bucket)
    floats = block[split:split + _float_words(bucket)].view(torch.float32)[
        :len(PARAM_ROWS) * bucket].view(len(PARAM_ROWS), bucket)
    return ints, floats


def np_views(block: np.ndarray, bucket: int) -> tuple[np.ndarray, np.ndarray]:
    """views() of an int64 numpy block (the pinned staging, seen from numpy)."""
    split = len(INPUT_ROWS) * bucket
    ints = block[:split].reshape(len(INPUT_ROWS), bucket)
    floats = block[split:split + _float_words(bucket)].view(np.float32)[
        :len(PARAM_ROWS) * bucket].reshape(len(PARAM_ROWS), bucket)
    return ints, floats
