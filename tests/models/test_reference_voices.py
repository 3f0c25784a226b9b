import numpy as np
import pytest

from orpheus_svc.audio.codec import SNAC_24KHZ_CONFIG, write_random_snac
from orpheus_svc.models.reference_voices import ReferenceStartupError, load_reference_voices
from tests.audio.clip_helpers import encode_clip, sweep

TINY = {**SNAC_24KHZ_CONFIG, "encoder_dim": 4, "decoder_dim": 64}


@pytest.fixture(scope="module")
def snac_dir(tmp_path_factory):
    return write_random_snac(tmp_path_factory.mktemp("snac"), seed=3, config=TINY)


def test_the_configured_voices_are_made_in_order(snac_dir, tmp_path):
    (tmp_path / "a.wav").write_bytes(encode_clip(sweep(1.2, 24000), 24000, "wav"))
    (tmp_path / "b.flac").write_bytes(encode_clip(sweep(2.0, 16000), 16000, "flac"))
    voices = load_reference_voices([
        {"name": "ann", "clip": str(tmp_path / "a.wav"), "transcript": "One."},
        {"name": "bob", "clip": str(tmp_path / "b.flac"), "transcript": "Two.", "language": "fr"},
    ], snac_dir)
    assert [(v.name, v.language, v.frames) for v in voices] == [("ann", "en", 15), ("bob", "fr", 24)]
    assert load_reference_voices(None, snac_dir) == ()


def test_a_bad_clip_stops_start_up_naming_the_entry(snac_dir, tmp_path):
    (tmp_path / "a.wav").write_bytes(encode_clip(sweep(1.2, 24000), 24000, "wav"))
    (tmp_path / "quiet.wav").write_bytes(encode_clip(np.zeros(48000, np.float32), 24000, "wav"))
    with pytest.raises(ReferenceStartupError, match=r"model\.reference_voices\[1\]\.clip: .*silent"):
        load_reference_voices([
            {"name": "ann", "clip": str(tmp_path / "a.wav"), "transcript": "One."},
            {"name": "bob", "clip": str(tmp_path / "quiet.wav"), "transcript": "Two."},
        ], snac_dir)
