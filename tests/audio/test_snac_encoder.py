import numpy as np
import pytest
import torch

from orpheus_svc.audio.codec import SnacLoadError, _build_snac, write_random_snac
from orpheus_svc.audio.snac_encoder import SnacEncoder, load_snac_encoder, make_reference_voice
from orpheus_svc.core.reference import ReferenceVoiceError, build_reference_prompt
from orpheus_svc.core.tokens import frames_to_token_ids, token_ids_to_frames

from .clip_helpers import encode_clip, sweep
from .conftest import TINY_CONFIG


@pytest.fixture(scope="module")
def encoder(tiny_dir):
    return load_snac_encoder(tiny_dir)


def canopy_tokens(codes):
    """The audio ids of SNAC codes as Canopy's zero-shot notebook lays them out, written out
    here independently of core/tokens.py."""
    c0, c1, c2 = (c[0].tolist() for c in codes)
    ids = []
    for i in range(len(c0)):
        ids += [c0[i] + 128266, c1[2 * i] + 128266 + 4096, c2[4 * i] + 128266 + 2 * 4096,
                c2[4 * i + 1] + 128266 + 3 * 4096, c1[2 * i + 1] + 128266 + 4 * 4096,
                c2[4 * i + 2] + 128266 + 5 * 4096, c2[4 * i + 3] + 128266 + 6 * 4096]
    return ids


def test_the_tokens_are_stock_snac_encode_in_the_canopy_layout(tiny_dir, encoder):
    # the unfolded model, straight from the checkpoint, as snac.SNAC.encode runs it
    model = _build_snac(dict(TINY_CONFIG))
    model.load_state_dict(torch.load(tiny_dir / "pytorch_model.bin", weights_only=True))
    model.eval()
    pcm = sweep(1.3, 24000)
    with torch.inference_mode():
        codes = model.encode(torch.from_numpy(pcm).view(1, 1, -1))
    assert encoder.encode_tokens(pcm) == canopy_tokens(codes)


def test_tokens_go_back_to_the_same_codes(encoder):
    pcm = sweep(1.1, 24000, f0=100, f1=5000)
    frames = encoder.encode(pcm)
    assert np.array_equal(token_ids_to_frames(encoder.encode_tokens(pcm)), frames)
    assert frames_to_token_ids(token_ids_to_frames(frames_to_token_ids(frames))) \
        == encoder.encode_tokens(pcm)


@pytest.mark.parametrize("samples, frames", [(2048 * 12, 12), (2048 * 12 + 1, 13),
                                             (2048 * 13 - 1, 13), (1, 1)])
def test_the_tail_is_padded_to_a_whole_frame(encoder, samples, frames):
    pcm = sweep(samples / 24000, 24000)[:samples]
    pcm = np.pad(pcm, (0, samples - pcm.size))
    out = encoder.encode(pcm)
    assert out.shape == (frames, 7)
    assert out.min() >= 0 and out.max() <= 4095


def test_encoded_frames_decode_as_the_flusher_decodes_frames(encoder, tiny_codec):
    frames = encoder.encode(sweep(1.0, 24000))
    pcm = tiny_codec.decode_frames([frames, frames])
    assert pcm.shape == (2, len(frames) * 2048)
    assert np.isfinite(pcm).all()


def test_empty_pcm_is_refused(encoder):
    with pytest.raises(ValueError):
        encoder.encode(np.zeros(0, np.float32))


def test_an_encoder_for_other_frames_is_refused(tmp_path):
    directory = write_random_snac(tmp_path, seed=1, config={**TINY_CONFIG, "vq_strides": [8, 4, 2, 1]})
    with pytest.raises(SnacLoadError):
        load_snac_encoder(directory)


def test_a_reference_voice_from_a_clip_file(encoder, tmp_path):
    pcm = sweep(1.5, 48000)
    path = tmp_path / "ann.ogg"
    path.write_bytes(encode_clip(np.stack([pcm, pcm]), 48000, "ogg"))
    ref = make_reference_voice(encoder, "ann", path, "  It was a bright cold day. ", "en")
    assert ref.frames == 18  # 1.5 s at 24 kHz = 36,000 samples -> 17.6 frames, padded
    assert ref.transcript == "It was a bright cold day."
    prompt = build_reference_prompt(lambda t: [128000, *map(ord, t)], ref, "Hi")
    assert prompt[-8:] == [128259, 128000, ord("H"), ord("i"), 128009, 128260, 128261, 128257]


@pytest.mark.parametrize("kw, field", [
    (dict(name="a/b"), "name"),
    (dict(transcript=""), "transcript"),
    (dict(language="?"), "language"),
    (dict(clip=b""), "clip"),
    (dict(clip=encode_clip(np.zeros(36000, np.float32), 24000, "wav")), "clip"),
])
def test_a_bad_reference_is_refused_naming_the_field(encoder, kw, field):
    args = dict(name="ann", clip=encode_clip(sweep(1.5, 24000), 24000, "wav"),
                transcript="Hello.", language="en")
    args.update(kw)
    with pytest.raises(ReferenceVoiceError) as err:
        make_reference_voice(encoder, **args)
    assert err.value.field == field


def test_close_drops_the_weights(tiny_dir):
    enc = load_snac_encoder(tiny_dir)
    assert isinstance(enc, SnacEncoder)
    enc.close()
    with pytest.raises(AttributeError):
        enc.encode(np.ones(10, np.float32))


def test_the_cheap_checks_come_before_the_clip_is_read(encoder):
    # a bad name with an unreadable clip: the name is what is reported, no decode ran
    for kw, field in ((dict(name="a/b"), "name"), (dict(transcript=" "), "transcript"),
                      (dict(language="?"), "language")):
        args = dict(name="ann", clip=b"", transcript="Hello.", language="en") | kw
        with pytest.raises(ReferenceVoiceError) as err:
            make_reference_voice(encoder, **args)
        assert err.value.field == field
