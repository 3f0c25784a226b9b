"""flusher.null_codec (audio/nullcodec.py, issue 32 item 6): the flusher with the null codec
cuts and batches exactly as with SNAC on the same device, so a run with it differs from one
with SNAC by SNAC's own work only; its audio is silence; the runtime swaps it in."""

from __future__ import annotations

import pytest

from orpheus_svc.audio.flusher import Flusher
from orpheus_svc.audio.nullcodec import NullCodec
from orpheus_svc.audio.settings import CPU_BATCH_FRAMES, GPU_CALL_FRAMES, FlusherSettings

from .conftest import random_frames
from .test_flusher import Collect, check_accounting, frozen


def _run(codec):
    """Four generations of different lengths pushed a frame at a time, as in the batching
    test: the events' sizes and offsets per generation, and the windows of each call."""
    utterances = {g: random_frames(n, seed=g) for g, n in ((1, 17), (2, 17), (3, 9), (4, 30))}
    sink, windows = Collect(), []
    flusher = Flusher(codec, FlusherSettings(), sink, clock=frozen, on_decode=windows.append)
    for f in range(30):
        for g, frames in utterances.items():
            if f < len(frames):
                flusher.push(g, frames[f:f + 1], final=f == len(frames) - 1)
        flusher.run_once()
    for g, frames in utterances.items():
        check_accounting(sink.events(g), len(frames))
    cuts = {g: [(e.sample_offset, e.num_samples) for e in sink.events(g)] for g in utterances}
    return cuts, windows, sink


def test_the_null_codec_cuts_and_batches_as_snac_does(tiny_codec):
    snac_cuts, snac_windows, _ = _run(tiny_codec)
    null_cuts, null_windows, sink = _run(NullCodec("cpu"))
    assert null_cuts == snac_cuts
    assert null_windows == snac_windows and len(null_windows) > 1
    assert all(not e.pcm.any() for e in sink.events())  # silence


@pytest.mark.parametrize("device, frames", [("cpu", CPU_BATCH_FRAMES), ("cuda", GPU_CALL_FRAMES)])
def test_it_batches_as_snac_would_on_its_device(device, frames):
    assert NullCodec(device).max_batch_frames == frames


def test_its_shapes_are_snacs():
    codec = NullCodec()
    z = codec.latents([random_frames(3), random_frames(3)])
    assert tuple(z.shape) == (2, 1, 12)
    assert codec.decode_latents(z).shape == (2, 3 * 2048)
    assert codec.decode_latents(z, keep=(512, 2048)).shape == (2, 1536)
    with pytest.raises(ValueError, match="outside"):
        codec.decode_latents(z, keep=(0, 3 * 2048 + 1))
    with pytest.raises(ValueError, match="same frame count"):
        codec.latents([random_frames(3), random_frames(2)])
    assert codec.decode_frames([]).shape == (0, 0)


def test_the_runtime_uses_it_when_the_setting_is_on():
    from orpheus_svc.config import load_config
    from orpheus_svc.runtime import build_runtime

    config = load_config(overrides={"engine.backend": "sim", "flusher.null_codec": True,
                                    "engine.max_sessions": 2, "engine.max_batch_size": 2})
    runtime = build_runtime(config)
    try:
        assert isinstance(runtime.flusher.codec, NullCodec)
    finally:
        runtime.stop()
    with pytest.raises(Exception, match="null_codec"):
        load_config(overrides={"flusher.null_codec": "yes please"})
