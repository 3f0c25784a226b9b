"""Shared SNAC checkpoints for the audio tests, written once per session by the real writer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orpheus_svc.audio.codec import SNAC_24KHZ_CONFIG, load_snac, write_random_snac

# Same time structure as the 24 kHz codec (hop 512, strides 4/2/1, same kernels, so the same
# receptive field in samples) but 16x narrower: fast enough to stream many utterances.
TINY_CONFIG = {**SNAC_24KHZ_CONFIG, "encoder_dim": 4, "decoder_dim": 64}


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    # These tests decode many small windows: on a shared 2-core box the intra-op thread
    # pool spends more time spin-waiting on busy cores than computing. Restored after.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return write_random_snac(tmp_path_factory.mktemp("snac_tiny"), seed=3, config=TINY_CONFIG)


@pytest.fixture(scope="session")
def real_dir(tmp_path_factory):
    return write_random_snac(tmp_path_factory.mktemp("snac_24khz"), seed=7)


@pytest.fixture(scope="session")
def tiny_codec(tiny_dir):
    return load_snac(tiny_dir, noise=False)


@pytest.fixture(scope="session")
def real_codec(real_dir):
    return load_snac(real_dir, noise=False)


def random_frames(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 4096, (n, 7))


def snr_db(got: np.ndarray, want: np.ndarray) -> float:
    err = float(np.sum((got.astype(np.float64) - want) ** 2))
    return float("inf") if err == 0 else 10 * np.log10(float(np.sum(want.astype(np.float64) ** 2)) / err)
