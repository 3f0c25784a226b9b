"""SNAC loading, weight-norm folding, the seeded random writer and the decode call."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.nn.utils import parametrize

from orpheus_svc.audio.codec import SNAC_24KHZ_CONFIG, SnacLoadError, load_snac, write_random_snac
from orpheus_svc.core.tokens import frames_to_codebooks
from orpheus_svc.hub import CheckpointNotFoundError

from .conftest import TINY_CONFIG, random_frames


def _unfolded_decode(directory, frames: np.ndarray) -> np.ndarray:
    """The stock snac model (weight norm recomputed each forward), NoiseBlocks bypassed."""
    from snac import SNAC
    from snac.layers import NoiseBlock

    config = json.loads((directory / "config.json").read_text())
    model = SNAC(**config).eval()
    model.load_state_dict(torch.load(directory / "pytorch_model.bin", weights_only=True))
    for module in model.modules():
        if isinstance(module, NoiseBlock):
            module.forward = lambda x: x
    codes = [torch.from_numpy(c)[None] for c in frames_to_codebooks(frames)]
    with torch.inference_mode():
        return model.decode(codes)[0, 0].numpy()


def test_load_folds_weight_norm_and_matches_unfolded_24khz(real_dir, real_codec):
    from snac.layers import NoiseBlock, ResidualUnit, Snake1d

    for part in real_codec.modules():
        for module in part.modules():
            assert not parametrize.is_parametrized(module)
            # replaced by the codec's equivalents (private-RNG noise, in-place snake/residual)
            assert not isinstance(module, (NoiseBlock, ResidualUnit, Snake1d))
    frames = random_frames(2, seed=1)
    got = real_codec.decode_frames([frames])[0]
    want = _unfolded_decode(real_dir, frames)
    assert got.shape == (2 * 2048,)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_load_drops_encoder_and_has_no_grad(tiny_dir):
    codec = load_snac(tiny_dir)
    for part in codec.modules():
        assert not part.training
        assert all(not p.requires_grad for p in part.parameters())
    assert codec.noise is True  # the checkpoint's own setting ("noise": true)


def test_load_accepts_legacy_weight_g_weight_v_keys(tmp_path, tiny_dir, tiny_codec):
    state = torch.load(tiny_dir / "pytorch_model.bin", weights_only=True)
    legacy = {}
    for key, value in state.items():
        key = key.replace(".parametrizations.weight.original0", ".weight_g")
        key = key.replace(".parametrizations.weight.original1", ".weight_v")
        legacy[key] = value
    assert any(k.endswith(".weight_g") for k in legacy)
    (tmp_path / "config.json").write_text((tiny_dir / "config.json").read_text())
    torch.save(legacy, tmp_path / "pytorch_model.bin")
    frames = random_frames(3, seed=2)
    np.testing.assert_array_equal(load_snac(tmp_path, noise=False).decode_frames([frames]),
                                  tiny_codec.decode_frames([frames]))


def test_write_random_snac_is_deterministic_and_leaves_global_rng_alone(tmp_path):
    before = torch.random.get_rng_state()
    a = write_random_snac(tmp_path / "a", seed=11, config=TINY_CONFIG)
    b = write_random_snac(tmp_path / "b", seed=11, config=TINY_CONFIG)
    c = write_random_snac(tmp_path / "c", seed=12, config=TINY_CONFIG)
    assert torch.equal(torch.random.get_rng_state(), before)
    sa, sb, sc = (torch.load(d / "pytorch_model.bin", weights_only=True) for d in (a, b, c))
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa)


def test_write_random_snac_defaults_to_the_24khz_layout(real_dir):
    assert json.loads((real_dir / "config.json").read_text()) == SNAC_24KHZ_CONFIG
    assert (real_dir / "pytorch_model.bin").is_file()


def test_decode_is_finite_and_batch_rows_match_single_decodes(tiny_codec):
    frames = [random_frames(5, seed=s) for s in range(3)]
    batch = tiny_codec.decode_frames(frames)
    assert batch.shape == (3, 5 * 2048) and batch.dtype == np.float32
    assert np.isfinite(batch).all()
    for row, f in zip(batch, frames):
        np.testing.assert_allclose(row, tiny_codec.decode_frames([f])[0], atol=1e-5)


def test_noise_is_switchable_and_uses_a_private_generator(tiny_dir):
    codec = load_snac(tiny_dir, noise=True, seed=5)
    frames = random_frames(2, seed=3)
    before = torch.random.get_rng_state()
    a, b = codec.decode_frames([frames]), codec.decode_frames([frames])
    assert torch.equal(torch.random.get_rng_state(), before)
    assert not np.array_equal(a, b)  # noise on: fresh noise each call
    quiet = [codec.decode_frames([frames], noise=False) for _ in range(2)]
    np.testing.assert_array_equal(quiet[0], quiet[1])
    assert codec.noise is True  # the per-call override did not stick


@pytest.mark.parametrize("bad", [4096, -1])
def test_decode_rejects_codes_out_of_range(tiny_codec, bad):
    frames = random_frames(2)
    frames[1, 3] = bad
    with pytest.raises(ValueError, match="0..4095"):
        tiny_codec.decode_frames([frames])


def test_decode_rejects_windows_of_different_lengths(tiny_codec):
    with pytest.raises(ValueError, match="same frame count"):
        tiny_codec.decode_frames([random_frames(2), random_frames(3)])


def test_missing_checkpoint_dir_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointNotFoundError, match="no such directory"):
        load_snac(tmp_path / "nope")


def test_missing_weights_file_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_CONFIG))
    with pytest.raises(CheckpointNotFoundError, match="pytorch_model.bin"):
        load_snac(tmp_path)


def test_corrupt_weights_are_a_load_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_CONFIG))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not a checkpoint")
    with pytest.raises(SnacLoadError, match="cannot read SNAC weights"):
        load_snac(tmp_path)


def test_weights_of_another_architecture_are_a_load_error(tmp_path, tiny_dir):
    (tmp_path / "config.json").write_text(json.dumps({**TINY_CONFIG, "decoder_dim": 32}))
    (tmp_path / "pytorch_model.bin").write_bytes((tiny_dir / "pytorch_model.bin").read_bytes())
    with pytest.raises(SnacLoadError, match="do not match config.json"):
        load_snac(tmp_path)


def test_bad_config_is_a_load_error(tmp_path, tiny_dir):
    (tmp_path / "config.json").write_text("{broken")
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(SnacLoadError, match=r"SNAC config \S+config\.json: not valid JSON"):
        load_snac(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**TINY_CONFIG, "wobble": 1}))
    with pytest.raises(SnacLoadError, match="unknown or missing field"):
        load_snac(tmp_path)


def test_cropped_decode_keeps_exactly_the_full_decodes_samples_24khz(real_codec):
    # The context is dropped inside the decoder; what is kept must not change.
    z = real_codec.latents([random_frames(4, seed=5)])  # 16 latent steps
    full = real_codec.decode_latents(z)[0]
    for lo, hi in ((0, 1024), (3 * 512, 13 * 512), (5000, 16 * 512), (100, 101)):
        np.testing.assert_allclose(real_codec.decode_latents(z, keep=(lo, hi))[0], full[lo:hi],
                                   rtol=0, atol=1e-5)


def test_cropped_decode_rejects_a_span_outside_the_window(tiny_codec):
    z = tiny_codec.latents([random_frames(1)])
    with pytest.raises(ValueError, match="outside the window"):
        tiny_codec.decode_latents(z, keep=(0, 2049))


def test_seeded_rows_draw_the_same_noise_every_call_whatever_else_is_decoded(tiny_dir):
    """Issue 29 item 2: a window decoded with a noise seed gets noise drawn from that seed
    alone, so it decodes to the same PCM every time; rows without one keep fresh noise."""
    codec = load_snac(tiny_dir, noise=True, seed=5)
    frames = [random_frames(2, seed=s) for s in (3, 4)]
    z = codec.latents(frames)
    a = codec.decode_latents(z[:1], noise_seeds=[11])
    b = codec.decode_latents(z[:1], noise_seeds=[11])
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, codec.decode_latents(z[:1], noise_seeds=[12]))
    assert not np.array_equal(a, codec.decode_latents(z[:1], noise=False))  # the noise is on
    mixed = [codec.decode_latents(z, noise_seeds=[11, None]) for _ in range(2)]
    np.testing.assert_allclose(mixed[0][0], a[0], atol=1e-5)  # its own noise in a batch too
    assert not np.array_equal(mixed[0][1], mixed[1][1])  # the unseeded row: fresh noise
