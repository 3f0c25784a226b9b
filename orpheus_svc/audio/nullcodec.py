"""A codec that decodes nothing: silence of the right length at no cost (`flusher.null_codec`,
a benchmark setting).

It stands in for SnacCodec in the flusher with the same calls and shapes, and batches as
SNAC would on the same device (max_batch_frames), so that a run with it and a run with SNAC
differ only by SNAC's own work: on a GPU, SNAC's share of the device time beside the engine
step; on a CPU, its share of the host. The audio is silence: never serve it to a listener.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from orpheus_svc.audio.settings import CPU_BATCH_FRAMES, GPU_CALL_FRAMES
from orpheus_svc.core.tokens import SAMPLES_PER_FRAME

STEP_SAMPLES = SAMPLES_PER_FRAME // 4  # one latent step: a frame's first codebook is 4 steps


class NullCodec:
    has_noise = False
    noise = False
    sample_rate = 24000
    samples_per_frame = SAMPLES_PER_FRAME

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.max_batch_frames = CPU_BATCH_FRAMES if self.device.type == "cpu" else GPU_CALL_FRAMES
        self.num_calls = 0

    def latents(self, batch: Sequence[np.ndarray]) -> torch.Tensor:
        """[B, 1, 4F] zeros on the CPU: the flusher crops and concatenates them as it does
        SNAC's latents; `batch`'s windows must have one frame count, as SNAC requires."""
        lengths = {int(np.shape(w)[0]) for w in batch}
        if len(lengths) != 1:
            raise ValueError(f"all windows of one decode must have the same frame count, "
                             f"got {sorted(lengths)}")
        return torch.zeros((len(batch), 1, 4 * lengths.pop()), dtype=torch.float32)

    def decode_latents(self, z: torch.Tensor, keep: tuple[int, int] | None = None,
                       noise: bool | None = None, noise_seeds=None) -> np.ndarray:
        """[B, hi - lo] silence (no keep: [B, steps x 512])."""
        b, full = int(z.shape[0]), int(z.shape[-1]) * STEP_SAMPLES
        lo, hi = (0, full) if keep is None else keep
        if not 0 <= lo <= hi <= full:
            raise ValueError(f"keep {keep} is outside the window's {full} samples")
        self.num_calls += 1
        return np.zeros((b, hi - lo), dtype=np.float32)

    def decode_frames(self, batch: Sequence[np.ndarray], noise: bool | None = None) -> np.ndarray:
        if len(batch) == 0:
            return np.zeros((0, 0), dtype=np.float32)
        return self.decode_latents(self.latents(batch))
