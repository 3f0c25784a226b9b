"""SimCodec inside the real Flusher: exact sample counts, modelled cost per call."""


import numpy as np
import pytest

from orpheus_svc.audio.flusher import Flusher
from orpheus_svc.audio.settings import FlusherSettings
from orpheus_svc.core.tokens import SAMPLES_PER_FRAME
from orpheus_svc.engine.sim.codec import SimCodec
from orpheus_svc.engine.sim.profiles import get_profile

P = get_profile("h100-fp8")


def test_flusher_emits_exactly_frames_x_2048_samples_with_the_sim_codec():
    sleeps = []
    codec = SimCodec(P, sleep=sleeps.append)
    events = []
    fl = Flusher(codec, FlusherSettings(), events.extend)
    rng = np.random.default_rng(0)
    total = 0
    for k in range(30):
        n = int(rng.integers(0, 3))
        total += n
        fl.push(1, rng.integers(0, 4096, (n, 7)), final=(k == 29))
        fl.run_once()
    got = [e for e in events if e.gen_id == 1]
    assert got[-1].final
    assert sum(e.num_samples for e in got) == total * SAMPLES_PER_FRAME
    offsets = np.cumsum([0] + [e.num_samples for e in got[:-1]])
    assert [e.sample_offset for e in got] == offsets.tolist()
    assert len(sleeps) == codec.num_calls > 0
    assert sum(sleeps) == pytest.approx(codec.modelled_s)


def test_decode_cost_is_call_cost_plus_frames():
    sleeps = []
    codec = SimCodec(P, sleep=sleeps.append)
    z = codec.latents([np.zeros((3, 7), np.int64)] * 5)  # 5 windows x 3 frames
    pcm = codec.decode_latents(z)
    assert pcm.shape == (5, 3 * SAMPLES_PER_FRAME) and pcm.dtype == np.float32
    assert sleeps == [pytest.approx(P.codec_call_s + 15 * P.codec_s_per_frame)]
    assert 0 < np.abs(pcm).max() < 0.01  # low-level noise, not silence, not loud


def test_kept_span_costs_full_price_and_context_the_early_share():
    sleeps = []
    codec = SimCodec(P, sleep=sleeps.append)
    z = codec.latents([np.zeros((4, 7), np.int64)] * 2)  # 2 windows x 4 frames
    pcm = codec.decode_latents(z, keep=(1024, 1024 + 2 * SAMPLES_PER_FRAME))
    assert pcm.shape == (2, 2 * SAMPLES_PER_FRAME)
    frames = 2 * (SimCodec.EARLY_SHARE * 4 + (1 - SimCodec.EARLY_SHARE) * 2)
    assert sleeps == [pytest.approx(P.codec_call_s + frames * P.codec_s_per_frame)]
    with pytest.raises(ValueError):
        codec.decode_latents(z, keep=(0, 5 * SAMPLES_PER_FRAME))


def test_windows_of_different_lengths_are_refused():
    codec = SimCodec(P, sleep=lambda s: None)
    with pytest.raises(ValueError):
        codec.latents([np.zeros((2, 7)), np.zeros((3, 7))])


def test_the_sim_codec_batches_like_a_gpu_one_call_per_iteration():
    """It models a GPU codec: by default a whole iteration's equal windows share one call,
    unless max_decode_frames says otherwise."""
    calls = {}
    for max_frames in (0, 24):
        codec = SimCodec(P, sleep=lambda s: None)
        fl = Flusher(codec, FlusherSettings(max_decode_frames=max_frames), lambda events: None,
                     clock=lambda: 0.0)
        assert fl.max_decode_frames == (codec.max_batch_frames if max_frames == 0 else 24)
        rng = np.random.default_rng(1)
        for g in range(64):  # a backlog: 64 generations with 4 steady 16-frame windows each
            fl.push(g, rng.integers(0, 4096, (80, 7)))
        fl.run_once()
        calls[max_frames] = codec.num_calls
    assert codec.max_batch_frames >= 1024
    assert calls[24] >= 64 * 4  # one call per window
    assert calls[0] <= 8  # a few window shapes, one call each
