"""The sim's codec: a SNAC decode call's modelled GPU time, and noise of the right length."""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np
import torch

from orpheus_svc.audio.settings import GPU_BATCH_FRAMES
from orpheus_svc.core.tokens import SAMPLE_RATE, SAMPLES_PER_FRAME
from orpheus_svc.engine.sim.faults import POISON_CODES, SimFault
from orpheus_svc.engine.sim.profiles import GpuProfile


class SimCodec:
    """Stands in for audio.codec.SnacCodec in the Flusher (same methods it calls).

    latents() makes a [B, 1, 4F] zero tensor (the flusher crops and concatenates it);
    decode_latents(z, keep=(lo, hi)) sleeps the profile's SNAC time for the call,
        codec_call_s + frames x codec_s_per_frame,
        frames = B x (EARLY_SHARE x T/4 + (1 - EARLY_SHARE) x (hi - lo)/2048)
    (the real codec drops the window's context after the first upsampling block, which
    carries ~15% of the cost, so context frames cost 15% and kept frames 100%), and returns
    [B, hi - lo] (no keep: [B, T*512]) float32 noise at `level_db`: not silence, so the
    encoders see ordinary samples; not speech either.
    """

    EARLY_SHARE = 0.15

    device = torch.device("cpu")
    max_batch_frames = GPU_BATCH_FRAMES  # it models a GPU codec, whatever `device` says
    sample_rate = SAMPLE_RATE
    samples_per_frame = SAMPLES_PER_FRAME
    has_noise = False
    noise = False

    def __init__(self, profile: GpuProfile, *, level_db: float = -60.0, seed: int = 0,
                 sleep: Callable[[float], None] = time.sleep, faults: bool = False) -> None:
        self.faults = faults  # fail decode calls holding POISON_CODES frames (SimFaults)
        self.failed_calls: list[int] = []  # windows in each decode call that failed
        self.profile = profile
        self._sleep = sleep
        amp = 10 ** (level_db / 20)
        self._noise = (np.random.default_rng(seed).uniform(-amp, amp, 4 * SAMPLE_RATE)
                       .astype(np.float32))
        self.num_calls = 0
        self.num_frames = 0.0
        self.modelled_s = 0.0

    def latents(self, batch: Sequence[np.ndarray]) -> torch.Tensor:
        lengths = {int(np.shape(w)[0]) for w in batch}
        if len(lengths) != 1:
            raise ValueError(f"all windows of one decode must have the same frame count, "
                             f"got {sorted(lengths)}")
        z = torch.zeros((len(batch), 1, 4 * lengths.pop()), dtype=torch.float32)
        if self.faults:  # mark poisoned windows; decode_latents refuses them
            for i, w in enumerate(batch):
                if len(w) and bool((np.asarray(w) == POISON_CODES).all(axis=-1).any()):
                    z[i] = float("nan")
        return z

    def decode_latents(self, z: torch.Tensor, keep: tuple[int, int] | None = None,
                       noise: bool | None = None, noise_seeds=None) -> np.ndarray:
        b, steps = int(z.shape[0]), int(z.shape[-1])
        full = steps * (SAMPLES_PER_FRAME // 4)
        lo, hi = (0, full) if keep is None else keep
        if not 0 <= lo <= hi <= full:
            raise ValueError(f"keep {keep} is outside the window's {full} samples")
        n = hi - lo
        if self.faults and bool(torch.isnan(z).any()):
            self.failed_calls.append(b)
            raise SimFault(f"injected codec fault in a decode call of {b} window(s)")
        if n == 0:
            return np.zeros((b, 0), dtype=np.float32)
        frames = b * (self.EARLY_SHARE * steps / 4
                      + (1 - self.EARLY_SHARE) * n / SAMPLES_PER_FRAME)
        cost = self.profile.codec_seconds(frames)
        self.num_calls += 1
        self.num_frames += frames
        self.modelled_s += cost
        self._sleep(cost)
        out = np.empty((b, n), dtype=np.float32)
        out[:] = self._noise[:n] if n <= len(self._noise) else np.resize(self._noise, n)
        return out

    def decode_frames(self, batch: Sequence[np.ndarray], noise: bool | None = None) -> np.ndarray:
        if len(batch) == 0:
            return np.zeros((0, 0), dtype=np.float32)
        return self.decode_latents(self.latents(batch))
