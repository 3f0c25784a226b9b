"""SNAC calls at bucketed shapes on static buffers (audio/snac_graphs.py), run eagerly on the
CPU (capture=False): what a CUDA graph replays on the card. A padded bucket call keeps the
same samples as an exact-size call (float64), seeded rows keep their noise, the draws into
static noise buffers are the eager call's, and results never alias the static buffers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orpheus_svc.audio.codec import load_snac
from orpheus_svc.audio.snac_graphs import BucketRunner, row_bucket

from .conftest import random_frames


@pytest.fixture
def codec64(tiny_dir):
    return load_snac(tiny_dir, noise=False, dtype=torch.float64, seed=5)


def _windows(n: int, frames: int = 3, seed: int = 0) -> list[np.ndarray]:
    return [random_frames(frames, seed=seed + i) for i in range(n)]


def _decode(codec, windows, keep, runner=None, **kw) -> np.ndarray:
    codec.graphs = runner
    try:
        return codec.decode_latents(codec.latents(windows), keep=keep, **kw)
    finally:
        codec.graphs = None


def test_buckets_pad_less_than_half_and_stop_at_the_calls_limit():
    assert [row_bucket(n, 100) for n in (1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49)] == \
        [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    for n in range(1, 300):
        b = row_bucket(n, 1000)
        assert n <= b < 1.5 * n or b == n
    assert row_bucket(13, 13) == 13  # a full call pads nothing
    assert row_bucket(11, 13) == 12 and row_bucket(12, 13) == 12
    assert row_bucket(13, 14) == 14  # the next bucket (16) is past the call's limit
    assert row_bucket(40, 13) == 40  # more than one call may hold: exact


def test_a_padded_bucket_call_keeps_the_exact_size_calls_samples_float64(codec64):
    runner = BucketRunner(codec64, capture=False)
    windows, keep = _windows(5), (700, 5000)
    z = codec64.latents(windows)
    assert runner.shape(z, *keep, True).rows == 6  # 5 windows run as 6
    with torch.inference_mode():
        want = codec64.forward(z, *keep, True)
        got = runner.run(z, *keep, True)
    assert got.dtype == torch.float64 and got.shape == want.shape == (5, keep[1] - keep[0])
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    # and through the codec's call (float32 PCM)
    np.testing.assert_allclose(_decode(codec64, windows, keep, runner),
                               _decode(codec64, windows, keep), rtol=0, atol=1e-6)
    # uncropped (keep=None) too
    np.testing.assert_allclose(_decode(codec64, windows[:3], None, runner),
                               _decode(codec64, windows[:3], None), rtol=0, atol=1e-6)


def test_rows_past_the_real_ones_are_zeros_whatever_a_larger_call_left(codec64):
    runner = BucketRunner(codec64, capture=False)
    keep = (0, 4096)
    _decode(codec64, _windows(6, seed=10), keep, runner)
    got = _decode(codec64, _windows(5, seed=20), keep, runner)
    (entry,) = runner._entries.values()
    assert entry.shape.rows == 6 and entry.filled == 5
    assert not entry.z[5].any() and entry.z[4].any()
    np.testing.assert_allclose(got, _decode(codec64, _windows(5, seed=20), keep), rtol=0,
                               atol=1e-6)


def test_a_result_is_the_callers_not_a_view_of_the_static_buffers(tiny_codec):
    runner = BucketRunner(tiny_codec, capture=False)  # float32: PCM needs no conversion
    keep = (512, 3000)
    first = _decode(tiny_codec, _windows(2, seed=1), keep, runner)
    kept = first.copy()
    _decode(tiny_codec, _windows(2, seed=7), keep, runner)  # same shape: same buffers
    np.testing.assert_array_equal(first, kept)


def test_seeded_rows_decode_to_the_same_samples_in_a_padded_bucket(tiny_dir):
    codec = load_snac(tiny_dir, noise=True, dtype=torch.float64, seed=1)
    runner = BucketRunner(codec, capture=False)
    windows, keep = _windows(5, seed=3), (1024, 5120)
    seeds = [11, None, 12, None, 13]
    want = _decode(codec, windows, keep, noise_seeds=seeds)
    for _ in range(2):  # the first call draws the noise buffers, the next refills them
        got = _decode(codec, windows, keep, runner, noise_seeds=seeds)
        for row in (0, 2, 4):
            np.testing.assert_allclose(got[row], want[row], rtol=0, atol=1e-6)
    assert not np.allclose(got[1], want[1])  # unseeded rows: the generator's next draws


def test_the_static_noise_buffers_hold_the_eager_calls_draws(tiny_dir):
    eager = load_snac(tiny_dir, noise=True, seed=9)
    graphed = load_snac(tiny_dir, noise=True, seed=9)
    runner = BucketRunner(graphed, capture=False)
    windows, keep = _windows(4, seed=5), (512, 4096)  # 4 rows: a bucket of 4, no padding
    for _ in range(2):  # the first call draws the buffers, the second fills them
        np.testing.assert_array_equal(_decode(graphed, windows, keep, runner),
                                      _decode(eager, windows, keep))
    assert all(b.supplied is None and b.last is None for b in graphed._noise_blocks)


def test_noise_on_and_off_are_shapes_of_their_own_and_the_oldest_goes_first(tiny_dir):
    codec = load_snac(tiny_dir, noise=True, seed=2)
    runner = BucketRunner(codec, capture=False, max_graphs=2)
    windows = _windows(2)
    _decode(codec, windows, (0, 2048), runner)
    _decode(codec, windows, (0, 2048), runner, noise=False)
    assert sorted(s.noise for s in runner._entries) == [False, True]
    _decode(codec, windows, (0, 1024), runner)
    assert len(runner._entries) == 2
    assert [s.hi for s in runner._entries] == [2048, 1024]  # the noisy (0, 2048) dropped
    assert not next(iter(runner._entries)).noise
