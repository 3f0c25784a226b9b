"""SNAC calls as CUDA graphs: one per bucketed call shape, replayed on static buffers.

An eager SNAC call is about 255 kernel launches from the flusher thread (with the GIL
held), a fixed cost of a few ms however small the call. A CUDA graph launches them all at
once. A graph is captured for a fixed shape, so a call is run at a shape drawn from few:

    shape   (rows, latent channels, latent steps, keep lo, keep hi, crop, noise)
    rows    the call's windows rounded up to 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (less than
            half more), capped at the most windows of its length one call may hold
            (max_batch_frames x 4 / steps), so a full call pads nothing; above the cap
            (never from the flusher) the exact count
    steps   exact: a window's first and last samples see the decoder's zero padding, so
            padding in time would change them

    static z    [rows, C, steps]   rows n.. are zeros (latents of nothing; the decoder
                                   mixes no rows, so they change no real row's samples)
    noise[i]    [rows, 1, T_i]     one per NoiseBlock, drawn before each replay
    out         [rows, hi - lo]    float32 PCM; the caller copies rows :n to the host

Noise: a graph cannot hold _Noise's loop over seeded rows (a Python generator per row), so
the noise is a static input: before each replay every NoiseBlock fills its buffer with the
same draws the eager call makes (codec._Noise.fill: the codec's generator, then each
seeded row from its own seed). A seeded row thus decodes to the same samples in a graph,
eagerly, and at any bucket; noise-off calls are graphs of their own (no noise convs).

When: a shape seen `capture_after` times (2) is captured, its first run eager on the
static buffers (the warm-up, which also makes its noise buffers), so one-off shapes (a
generation's last window) never pay a capture; until then a call runs eagerly at its exact
size. At most `max_graphs` graphs are held, the least recently used dropped first; all
share one memory pool, safe because the codec replays them one at a time on its stream.
Captures use capture_error_mode "thread_local": the engine thread's own CUDA calls during
a capture do not break it.

`capture=False` (a CPU, the tests): every call runs eagerly on the static buffers of its
bucket, so the bucketing, padding and noise buffers are the code that runs.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import NamedTuple

import torch

log = logging.getLogger(__name__)

_BUCKETS = tuple(sorted({1 << k for k in range(16)} | {3 << k for k in range(15)}))


def row_bucket(rows: int, limit: int) -> int:
    """The row count a call of `rows` windows runs at (module docstring): the next bucket,
    at most `limit`; `rows` itself from `limit` on."""
    if rows >= limit:
        return rows
    for bucket in _BUCKETS:
        if bucket >= rows:
            return min(bucket, limit)
    return rows


class CallShape(NamedTuple):
    rows: int
    channels: int
    steps: int
    lo: int
    hi: int
    crop: bool
    noise: bool


class _Entry:
    """One shape's static buffers and, once captured, its graph."""

    def __init__(self, shape: CallShape, device: torch.device, dtype: torch.dtype):
        self.shape = shape
        self.z = torch.zeros((shape.rows, shape.channels, shape.steps), device=device,
                             dtype=dtype)
        self.filled = 0  # real rows the last call wrote; rows from here on are zeros
        self.noise: list[torch.Tensor] | None = None  # per NoiseBlock, once known
        # float32 PCM (float64 for a float64 codec: the tests' exact comparisons)
        self.out = torch.empty((shape.rows, shape.hi - shape.lo), device=device,
                               dtype=torch.promote_types(dtype, torch.float32))
        self.graph = None


class BucketRunner:
    """Runs a SnacCodec's decoder calls at bucketed shapes, as CUDA graphs (module docstring).

    The codec sets the call's noise switch and row seeds on its NoiseBlocks before `run`
    and clears them after, as for an eager call. Counters are for benchmarks and metrics.
    """

    def __init__(self, codec, *, capture: bool, max_graphs: int = 64, capture_after: int = 2):
        self.codec = codec
        self.capture = capture
        self.max_graphs = max(1, max_graphs)
        self.capture_after = capture_after
        self._entries: OrderedDict[CallShape, _Entry] = OrderedDict()
        self._seen: dict[CallShape, int] = {}
        self._pool = torch.cuda.graph_pool_handle() if capture else None
        self.num_captures = 0
        self.num_replays = 0
        self.num_eager = 0  # calls run eagerly (exact size, or on a bucket's buffers)

    @property
    def num_graphs(self) -> int:
        return sum(e.graph is not None for e in self._entries.values())

    def shape(self, z: torch.Tensor, lo: int, hi: int, crop: bool) -> CallShape:
        steps = int(z.shape[-1])
        limit = max(1, self.codec.max_batch_frames * 4 // steps)
        noise = bool(self.codec.noise and self.codec._noise_blocks)
        return CallShape(row_bucket(int(z.shape[0]), limit), int(z.shape[1]), steps, lo, hi,
                         crop, noise)

    def run(self, z: torch.Tensor, lo: int, hi: int, crop: bool) -> torch.Tensor:
        """codec.forward(z, lo, hi, crop) for z's rows, [n, hi - lo]; valid until the next run
        (a view of a static buffer when replayed)."""
        n = int(z.shape[0])
        shape = self.shape(z, lo, hi, crop)
        entry = self._entries.get(shape)
        if entry is None and self.capture:
            seen = self._seen[shape] = self._seen.get(shape, 0) + 1
            if len(self._seen) > 64 * self.max_graphs:  # a bound on one-off shapes' counts
                self._seen = {shape: seen}
            if seen < self.capture_after:
                self.num_eager += 1
                return self.codec.forward(z, lo, hi, crop)
        if entry is None:
            entry = self._add(shape)
        self._entries.move_to_end(shape)
        self._load(entry, z)
        if entry.graph is not None:
            entry.graph.replay()
            self.num_replays += 1
            return entry.out[:n]
        self._eager(entry)
        self.num_eager += 1
        if self.capture:
            self._capture(entry)
        return entry.out[:n]

    def _add(self, shape: CallShape) -> _Entry:
        while len(self._entries) >= self.max_graphs:
            self._entries.popitem(last=False)  # the least recently used
        entry = self._entries[shape] = _Entry(shape, self.codec.device, self.codec.dtype)
        return entry

    def _load(self, entry: _Entry, z: torch.Tensor) -> None:
        """The call's latents into the static input (rows past them zero) and, with noise,
        this call's draws into the noise buffers."""
        n = int(z.shape[0])
        entry.z[:n].copy_(z)
        if entry.filled > n:
            entry.z[n:entry.filled].zero_()
        entry.filled = n
        if entry.shape.noise and entry.noise is not None:
            for block, buf in zip(self.codec._noise_blocks, entry.noise):
                block.fill(buf)

    def _forward(self, entry: _Entry) -> torch.Tensor:
        blocks = self.codec._noise_blocks
        supplied = entry.noise if entry.noise is not None else [None] * len(blocks)
        for block, buf in zip(blocks, supplied):
            block.supplied = buf
        try:
            s = entry.shape
            return self.codec.forward(entry.z, s.lo, s.hi, s.crop)
        finally:
            for block in blocks:
                block.supplied = None

    def _eager(self, entry: _Entry) -> None:
        """The call on the entry's buffers, eagerly, into entry.out; its first run with noise
        draws the noise (block.fill, as an eager call does) and keeps it as the entry's
        noise buffers."""
        blocks = self.codec._noise_blocks
        record = entry.shape.noise and entry.noise is None
        for block in blocks:
            block.keep_last = record
        try:
            entry.out.copy_(self._forward(entry))
            if record:
                entry.noise = [block.last for block in blocks]
        finally:
            for block in blocks:
                block.keep_last, block.last = False, None

    def _capture(self, entry: _Entry) -> None:
        """Capture the entry's call on the current stream (the codec's); on failure log it
        and run every later call eagerly."""
        s = entry.shape
        graph = torch.cuda.CUDAGraph()
        try:
            graph.capture_begin(pool=self._pool, capture_error_mode="thread_local")
            try:
                entry.out.copy_(self._forward(entry))
            finally:
                graph.capture_end()
        except Exception:  # noqa: BLE001 - any capture failure: stay correct, eagerly
            log.exception("SNAC: capturing a CUDA graph for %s failed; SNAC runs eagerly", s)
            self.capture = False
            self._entries.clear()
            return
        entry.graph = graph
        self.num_captures += 1
        log.debug("SNAC: captured a CUDA graph for %s (%d held)", s, self.num_graphs)
