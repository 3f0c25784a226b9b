"""G.711 mu-law and A-law against the reference encoder, over every PCM16 value.

The oracle is `audioop` (CPython's C implementation of the G.711 reference tables; the
`audioop-lts` package provides the same module on Python 3.13+, where it left the standard
library). The encoder that shipped before quantised a continuous mu-law curve and inverted
the sign bit; these tests fail on it.
"""

import warnings

import numpy as np
import pytest

from orpheus_svc.audio import g711
from orpheus_svc.audio.pcm import float_to_alaw, float_to_mulaw, float_to_pcm16

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # 3.11/3.12 warn on import
    import audioop

ALL_PCM16 = np.arange(-32768, 32768, dtype=np.int16)


def test_mulaw_is_bit_exact_with_the_reference_on_all_65536_pcm16_values():
    assert g711.pcm16_to_mulaw(ALL_PCM16) == audioop.lin2ulaw(ALL_PCM16.tobytes(), 2)


def test_alaw_is_bit_exact_with_the_reference_on_all_65536_pcm16_values():
    assert g711.pcm16_to_alaw(ALL_PCM16) == audioop.lin2alaw(ALL_PCM16.tobytes(), 2)


def test_expansion_of_all_256_codes_matches_the_reference():
    codes = bytes(range(256))
    assert g711.mulaw_to_pcm16(codes).tobytes() == audioop.ulaw2lin(codes, 2)
    assert g711.alaw_to_pcm16(codes).tobytes() == audioop.alaw2lin(codes, 2)


@pytest.mark.parametrize("pcm,mulaw,alaw", [
    (0, 0xFF, 0xD5), (-1, 0x7E, 0x55), (32767, 0x80, 0xAA), (-32768, 0x00, 0x2A),
    (1000, 0xCE, 0xFA), (-1000, 0x4E, 0x7A)])
def test_known_codes_from_the_g711_tables(pcm, mulaw, alaw):
    # independent of audioop: sign bit set for positive input, bits inverted (mu) / ^0x55 (A)
    x = np.array([pcm], dtype=np.int16)
    assert g711.pcm16_to_mulaw(x)[0] == mulaw
    assert g711.pcm16_to_alaw(x)[0] == alaw


def test_float_encoders_are_pcm16_then_the_g711_tables():
    # The regression: the shipped float encoder differs from G.711 on almost every sample.
    x = np.random.default_rng(0).uniform(-1, 1, 48000).astype(np.float32)
    pcm = float_to_pcm16(x)
    assert float_to_mulaw(x) == audioop.lin2ulaw(pcm, 2)
    assert float_to_alaw(x) == audioop.lin2alaw(pcm, 2)


def test_reference_decoder_recovers_our_mulaw_at_g711_snr():
    # A 1 kHz tone at -6 dBFS: G.711 gives about 34 dB here; an inverted sign gives below 0 dB.
    t = np.arange(8000) / 8000
    x = (0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)
    for encode, decode in ((float_to_mulaw, audioop.ulaw2lin), (float_to_alaw, audioop.alaw2lin)):
        got = np.frombuffer(decode(encode(x), 2), dtype="<i2") / 32767.0
        snr = 10 * np.log10(np.sum(x.astype(np.float64) ** 2) / np.sum((got - x) ** 2))
        assert snr > 30, snr


def test_python_client_expands_g711_like_the_reference():
    from orpheus_tts_client.types import alaw_to_pcm16, mulaw_to_pcm16
    codes = bytes(range(256))
    assert mulaw_to_pcm16(codes) == audioop.ulaw2lin(codes, 2)
    assert alaw_to_pcm16(codes) == audioop.alaw2lin(codes, 2)
