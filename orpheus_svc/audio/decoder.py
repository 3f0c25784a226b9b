"""The flusher's decoder: planned windows and their generations' codes in, each window's exact
samples out. No thread and no lock: the flusher thread calls it, between its drains.

Windows of equal shape share a SNAC call, as many as max_decode_frames allows; calls run in
the order of their most urgent window, and one that holds a seeded window has a row count
fixed for its shape (audio/calls.py plans them). A call's decoder input is built with one
codec.latents call per (frames, first step) shape among its windows, then cropped to each
window's latent steps; only the window's own samples (Window.keep, audio/windows.py) are
kept:

    jobs      j0, j1: 8 steps   j2: 12 steps   j3: 8 steps, seeded   (j0, j1, j3: same keep)
    calls     [j3 j0 j1 pad]  [j2]        <- a seeded call has its shape's fixed rows (4 here)
    latents   one codec.latents per (frames, first step) among a call's windows, cropped to
              the call's steps; padding rows are zeros
    PCM       codec.decode_latents(z, keep=(lo, hi)): a row per window, its kept samples

A seeded generation's window draws SNAC's noise from a seed of the generation's and the
window's position, so the same tokens decode to the same PCM whatever shares the call.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import numpy as np
import torch

from orpheus_svc.audio.calls import plan_calls
from orpheus_svc.audio.settings import CPU_BATCH_FRAMES, HOP, FlusherSettings
from orpheus_svc.audio.windows import Window
from orpheus_svc.core.tokens import FRAME_TOKENS

FailHandler = Callable[[int, BaseException], None]  # (gen_id, exc): its decode failed


class DecodeJob(NamedTuple):
    """One window to decode: its generation, the window, the generation's codes so far
    ([n, 7]; the window reads frames frame_lo..frame_hi of them), the generation's seed
    (None: unseeded) and whether this is the generation's last window."""

    gen_id: int
    window: Window
    codes: np.ndarray
    seed: int | None
    last: bool


def window_seed(seed: int, w: Window) -> int:
    """The noise seed of one window of a seeded generation: its seed and where it lies."""
    return (seed * 0x9E3779B97F4A7C15 + w.start * 0x100000001B3 + w.end) % (1 << 63)


class Decoder:
    """Decodes windows with `codec` in batched calls. `clock` (seconds) times the deadline
    of `decode`; `on_decode` is called with the window count of each SNAC call (metrics).
    The counters are read for metrics, never reset."""

    def __init__(self, codec, settings: FlusherSettings, clock: Callable[[], float],
                 on_decode: Callable[[int], None] | None = None):
        self.codec = codec
        self.clock = clock
        # Frames per SNAC call: the setting, else what suits the codec (a GPU wants few calls).
        self.max_decode_frames = (settings.max_decode_frames
                                  or getattr(codec, "max_batch_frames", CPU_BATCH_FRAMES))
        self.seeded_call_windows = settings.seeded_call_windows
        self.on_decode = on_decode
        self.num_decode_calls = 0
        self.num_decoded_samples = 0  # window lengths decoded, context included
        self.num_padded_windows = 0  # zero rows added to fixed-size calls (audio/calls.py)

    def decode(self, jobs: Sequence[DecodeJob], deadline: float,
               on_fail: FailHandler) -> tuple[list[np.ndarray | None], bool]:
        """PCM of each job's kept samples, decoding equal-length windows together, and
        whether time ran out.

        Jobs come most urgent first, and calls are made in the order of their most urgent
        window. No call starts after `deadline` (on `clock`): those jobs get None. A job
        whose decode fails gets None and is reported to `on_fail` at once; a failed call of
        several windows is retried one window at a time, so one bad window does not fail
        its batch-mates.
        """
        out: list[np.ndarray | None] = [None] * len(jobs)
        calls = plan_calls([(j.window.num_steps, j.window.keep.start, j.window.keep.stop)
                            for j in jobs],
                           [j.seed is not None for j in jobs],
                           self.max_decode_frames, self.seeded_call_windows,
                           [j.last for j in jobs])
        for n, call in enumerate(calls):
            if n and self.clock() >= deadline:
                return out, True
            part = call.jobs
            try:
                pcm = self._call([jobs[i] for i in part], call.lo, call.hi, call.rows)
            except Exception as exc:
                if len(part) == 1:
                    on_fail(jobs[part[0]].gen_id, exc)
                    continue
                for i in part:
                    out[i] = self._decode_one(jobs[i], call.lo, call.hi, call.rows, on_fail)
                continue
            self.num_decoded_samples += len(part) * call.num_steps * HOP
            for row, i in enumerate(part):
                out[i] = pcm[row].copy()
        return out, False

    def _call(self, part: list[DecodeJob], lo: int, hi: int, rows: int | None) -> np.ndarray:
        """One SNAC call: the windows' PCM [len(part), hi - lo], padded with zero rows up to
        `rows` (audio/calls.py); a seeded window's noise comes from its own seed."""
        z = self._latents(part, rows)
        seeds = [None if j.seed is None else window_seed(j.seed, j.window) for j in part]
        if any(s is not None for s in seeds):
            seeds += [None] * (z.shape[0] - len(part))
            pcm = self.codec.decode_latents(z, keep=(lo, hi), noise_seeds=seeds)
        else:
            pcm = self.codec.decode_latents(z, keep=(lo, hi))
        self.num_decode_calls += 1
        if self.on_decode is not None:
            self.on_decode(len(part))
        return pcm

    def _decode_one(self, job: DecodeJob, lo: int, hi: int, rows: int | None,
                    on_fail: FailHandler) -> np.ndarray | None:
        """A job's PCM decoded alone (after its batched call failed); None when it fails too."""
        try:
            return self._call([job], lo, hi, rows)[0].copy()
        except Exception as exc:
            on_fail(job.gen_id, exc)
            return None

    def _latents(self, jobs: list[DecodeJob], rows: int | None = None) -> torch.Tensor:
        """The decoder input of windows of equal num_steps, in order: one codec.latents
        call per (frames, first step) shape among them, not one per window (on a GPU each
        call is a dozen kernel launches). With `rows` (a fixed-size call, calls.py) each
        codec.latents call gets exactly that many windows, padded with code-0 windows, and
        the result has `rows` rows: SNAC's 1x1 projections are not batch-invariant either."""
        shapes: dict[tuple[int, int], list[int]] = {}
        for i, j in enumerate(jobs):
            w = j.window
            shapes.setdefault((w.frame_hi - w.frame_lo, w.step_lo - w.frame_lo * 4),
                              []).append(i)
        pieces, order = [], []
        for (frames, first), members in shapes.items():
            codes = [jobs[i].codes[jobs[i].window.frame_lo:jobs[i].window.frame_hi]
                     for i in members]
            if rows is not None:
                codes += [np.zeros((frames, FRAME_TOKENS), np.int64)] * (rows - len(codes))
            z = self.codec.latents(codes)[:len(members)]
            pieces.append(z[..., first:first + jobs[members[0]].window.num_steps])
            order.extend(members)
        z = pieces[0] if len(pieces) == 1 else torch.cat(pieces)
        if len(pieces) > 1:
            index = torch.from_numpy(np.argsort(np.asarray(order)))
            if z.device.type == "cuda":  # queued from pinned memory, not a blocking copy
                index = index.pin_memory().to(z.device, non_blocking=True)
            z = z[index]
        if rows is not None and rows > len(jobs):
            z = torch.cat([z, z.new_zeros((rows - len(jobs), *z.shape[1:]))])
            self.num_padded_windows += rows - len(jobs)
        return z
