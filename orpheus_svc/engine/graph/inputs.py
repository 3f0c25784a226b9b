"""A graph-engine step's inputs as one contiguous block of bytes per chunk, so that a chunk's
whole input goes host-to-device in one copy between two contiguous buffers.

    block (bucket b)   [ ints: len(INPUT_ROWS) x b int64 | floats: len(PARAM_ROWS) x b float32 | pad ]
                       0                          8 * 10 * b                            block_bytes(b)

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

INT_BYTES = 8 * len(INPUT_ROWS)    # one row's ints
FLOAT_BYTES = 4 * len(PARAM_ROWS)  # one row's floats
# every block starts on a 64-byte boundary of its staging buffer (the int64 view's
# alignment, and a whole number of cache lines for the copy engine)
ALIGN = 64


def block_bytes(bucket: int) -> int:
    """The bytes of one chunk's block at `bucket` rows, rounded up to ALIGN."""
    return -(-(INT_BYTES + FLOAT_BYTES) * bucket // ALIGN) * ALIGN


def views(block: torch.Tensor, bucket: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ints [len(INPUT_ROWS), bucket] int64, floats [len(PARAM_ROWS), bucket] float32):
    views of a uint8 block (device or host) of at least block_bytes(bucket), each
    contiguous."""
    split = INT_BYTES * bucket
    ints = block[:split].view(torch.int64).view(len(INPUT_ROWS), bucket)
    floats = block[split:split + FLOAT_BYTES * bucket].view(torch.float32).view(
        len(PARAM_ROWS), bucket)
    return ints, floats


def np_views(block: np.ndarray, bucket: int) -> tuple[np.ndarray, np.ndarray]:
    """views() of a uint8 numpy block (the pinned staging, seen from numpy)."""
    split = INT_BYTES * bucket
    ints = block[:split].view(np.int64).reshape(len(INPUT_ROWS), bucket)
    floats = block[split:split + FLOAT_BYTES * bucket].view(np.float32).reshape(
        len(PARAM_ROWS), bucket)
    return ints, floats
