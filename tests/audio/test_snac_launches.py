"""The kernels one SNAC call launches (audio/snac_launches.py): the fused Snake saves 4 of
each Snake's 5 kernels, 116 a call on the 24 kHz decoder."""

from __future__ import annotations

import pytest

from orpheus_svc.audio.snac_launches import count_call_launches

from .conftest import random_frames

TORCH_SNAKE_KERNELS = 5  # mul, sin_, square_, mul_, add_ (codec._Snake)


@pytest.mark.parametrize("noise", [False, True])
def test_the_fused_snake_saves_four_kernels_per_snake_layer(real_dir, noise):
    from orpheus_svc.audio.codec import load_snac

    codec = load_snac(real_dir, noise=noise)
    frames = [random_frames(3, seed=1), random_frames(3, seed=2)]
    fused = count_call_launches(codec, frames, (512, 5000), fused=True)
    eager = count_call_launches(codec, frames, (512, 5000), fused=False)
    assert fused["snake_layers"] == eager["snake_layers"] == 29  # 4 x (1 + 3 x 2) + 1
    assert fused["snake"] == 29
    assert eager["decode"] - fused["decode"] == 29 * (TORCH_SNAKE_KERNELS - 1)
    assert fused["latents"] == eager["latents"]
    # today's counts: a change that adds kernels to a SNAC call shows here
    assert fused["latents"] == 13
    assert fused["decode"] == (97 if noise else 77)
    assert eager["ops"]["sin_"] == 29 and "sin_" not in fused["ops"]


def test_counting_leaves_the_codec_as_it_was(tiny_codec):
    frames = [random_frames(2, seed=3)]
    before = tiny_codec.decode_frames(frames)
    count_call_launches(tiny_codec, frames, None, fused=True)
    from orpheus_svc.audio.codec import _Snake

    snakes = [m for m in tiny_codec.decoder.modules() if isinstance(m, _Snake)]
    assert all("forward" not in m.__dict__ and not m.fused for m in snakes)
    assert tiny_codec.graphs is None
    assert (tiny_codec.decode_frames(frames) == before).all()
