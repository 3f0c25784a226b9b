import os

import numpy as np
import pytest

from orpheus_svc.audio import clip as C
from orpheus_svc.core.reference import MAX_CLIP_SECONDS, ReferenceVoiceError

from .clip_helpers import encode_clip, sweep


def tone(freq, seconds, rate, level=0.3):
    return (level * np.sin(2 * np.pi * freq * np.arange(int(seconds * rate)) / rate)).astype(np.float32)


def peak_hz(pcm, rate=24000):
    spectrum = np.abs(np.fft.rfft(pcm * np.hanning(pcm.size)))
    return float(np.argmax(spectrum) * rate / pcm.size)


def refused(source, loader=C.decode_clip):
    with pytest.raises(ReferenceVoiceError) as err:
        loader(source)
    assert err.value.field == "clip"
    return err.value.message


@pytest.mark.parametrize("fmt, rate", [("wav", 24000), ("wav", 44100), ("flac", 16000),
                                       ("ogg", 48000), ("mp3", 44100)])
def test_each_format_decodes_to_24khz_mono_float32_at_the_same_pitch(fmt, rate):
    pcm = C.decode_clip(encode_clip(tone(1000, 1.5, rate), rate, fmt))
    assert pcm.dtype == np.float32 and pcm.ndim == 1
    # lossy codecs add or trim some priming samples; the length stays 1.5 s at 24 kHz
    assert abs(pcm.size - 36000) <= 1200
    assert peak_hz(pcm) == pytest.approx(1000, abs=2)
    assert np.sqrt(np.mean(pcm ** 2)) == pytest.approx(0.3 / np.sqrt(2), rel=0.08)


def test_lossless_clips_decode_to_the_resampled_samples():
    pcm = sweep(1.0, 24000)
    for fmt in ("wav", "flac"):
        got = C.decode_clip(encode_clip(pcm, 24000, fmt))
        assert np.max(np.abs(got - pcm)) < 1e-4  # 16-bit quantisation only


def test_stereo_is_mixed_to_the_mean_of_the_channels():
    x = tone(500, 1.0, 24000)
    got = C.decode_clip(encode_clip(np.stack([x, 0.5 * x]), 24000, "wav"))
    assert np.max(np.abs(got - 0.75 * x)) < 1e-4
    # opposite channels cancel: the mean, not the first channel
    cancelled = C.decode_clip(encode_clip(np.stack([x, -x]), 24000, "wav"))
    assert np.max(np.abs(cancelled)) < 1e-4


def test_a_path_reads_like_bytes(tmp_path):
    data = encode_clip(sweep(1.2, 22050), 22050, "flac")
    path = tmp_path / "a.flac"
    path.write_bytes(data)
    assert np.array_equal(C.decode_clip(path), C.decode_clip(data))
    assert np.array_equal(C.decode_clip(str(path)), C.decode_clip(data))


def test_overshoot_of_lossy_decoders_is_clamped_to_full_scale():
    loud = np.clip(tone(300, 1.0, 44100, level=1.4), -1, 1)  # a clipped square-ish wave
    got = C.decode_clip(encode_clip(loud, 44100, "mp3"))
    assert got.max() <= 1.0 and got.min() >= -1.0


def test_empty_unreadable_and_missing_clips_are_refused(tmp_path):
    assert "empty" in refused(b"")
    assert "cannot decode" in refused(b"RIFF but not really a wave file" * 10)
    assert "cannot read" in refused(tmp_path / "missing.wav")
    (tmp_path / "empty.wav").write_bytes(b"")
    assert "empty" in refused(tmp_path / "empty.wav")
    assert "not a file" in refused(tmp_path)
    (tmp_path / "notes.txt").write_text("hello, not audio\n" * 50)
    assert "no audio stream" in refused(tmp_path / "notes.txt")  # FFmpeg reads it as text


def test_a_file_over_the_byte_limit_is_refused_before_decoding(monkeypatch, tmp_path):
    data = encode_clip(sweep(1.0, 24000), 24000, "wav")
    monkeypatch.setattr(C, "MAX_CLIP_BYTES", len(data) - 1)
    assert "bytes; at most" in refused(data)
    (tmp_path / "a.wav").write_bytes(data)
    assert "bytes; at most" in refused(tmp_path / "a.wav")


def test_a_clip_over_the_length_limit_is_refused_while_decoding():
    rate = 8000
    data = encode_clip(tone(200, MAX_CLIP_SECONDS + 0.5, rate), rate, "wav")
    assert "longer than" in refused(data)
    assert C.decode_clip(encode_clip(tone(200, MAX_CLIP_SECONDS - 0.5, rate), rate, "wav")).size


def test_load_clip_refuses_silence_and_short_clips():
    assert "silent" in refused(encode_clip(np.zeros(48000, np.float32), 24000, "wav"), C.load_clip)
    assert "at least" in refused(encode_clip(tone(300, 0.5, 24000), 24000, "wav"), C.load_clip)
    assert C.load_clip(encode_clip(tone(300, 1.5, 24000), 24000, "ogg")).size


# -- clips named while serving ---------------------------------------------------------------

def test_a_clip_inside_the_allowed_directories_resolves_to_its_real_path(tmp_path):
    allowed = tmp_path / "clips"
    allowed.mkdir()
    (allowed / "a.wav").write_bytes(b"x")
    assert C.resolve_clip_path(str(allowed / "sub" / ".." / "a.wav"), (str(allowed),)) \
        == (allowed / "a.wav").resolve()


def test_a_clip_outside_the_allowed_directories_is_refused(tmp_path):
    allowed, elsewhere = tmp_path / "clips", tmp_path / "private"
    allowed.mkdir()
    elsewhere.mkdir()
    (elsewhere / "secret.wav").write_bytes(b"x")
    os.symlink(elsewhere / "secret.wav", allowed / "link.wav")
    for path in (str(elsewhere / "secret.wav"), str(allowed / ".." / "private" / "secret.wav"),
                 str(allowed / "link.wav")):
        assert "outside model.reference_dirs" in refused(path, lambda p: C.resolve_clip_path(
            p, (str(allowed),)))
    assert "not absolute" in refused("clips/a.wav", lambda p: C.resolve_clip_path(p, (str(allowed),)))
    assert "empty" in refused("", lambda p: C.resolve_clip_path(p, (str(allowed),)))
    assert "(none)" in refused(str(allowed / "a.wav"), lambda p: C.resolve_clip_path(p, ()))
