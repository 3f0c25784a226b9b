"""ITU-T G.711 mu-law and A-law, bit-exact with the reference segment tables.

G.711 is not a smooth log curve: it is eight linear segments per sign, each twice as
wide as the one before, with 16 steps each. A code byte is

    bit 7      sign (mu-law: 1 = positive after inversion; A-law: 1 = positive)
    bits 6..4  segment number s (0..7)
    bits 3..0  step inside the segment

and the whole byte is inverted (mu-law) or XOR-ed with 0x55 (A-law, even bits) on the
wire. Mu-law works on 14-bit magnitudes (PCM16 >> 2), A-law on 13-bit (PCM16 >> 3), as the
reference encoders (G.191 STL, the Sun g711.c that audioop and most telephony stacks use)
do, so every PCM16 input maps to exactly the byte those encoders give.

All 65,536 PCM16 inputs are tabulated once at import (two 64 KiB tables), so encoding is
one numpy take per chunk.
"""

from __future__ import annotations

import numpy as np

_MU_BIAS = 0x21          # 33 on the 14-bit scale (0x84 on the 16-bit one)
_MU_CLIP = 8159          # largest 14-bit magnitude before the bias
# Upper bound (inclusive) of each segment, for biased mu-law / A-law magnitudes.
_MU_SEG_END = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])
_A_SEG_END = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])


def _mulaw_table() -> np.ndarray:
    pcm = np.arange(-32768, 32768, dtype=np.int32) >> 2
    mask = np.where(pcm < 0, 0x7F, 0xFF)
    mag = np.minimum(np.abs(pcm), _MU_CLIP) + _MU_BIAS
    seg = np.searchsorted(_MU_SEG_END, mag)          # first segment whose end >= mag
    step = (mag >> (seg + 1)) & 0x0F
    code = np.where(seg >= 8, 0x7F, (np.minimum(seg, 7) << 4) | step)
    return (code ^ mask).astype(np.uint8)


def _alaw_table() -> np.ndarray:
    pcm = np.arange(-32768, 32768, dtype=np.int32) >> 3
    mask = np.where(pcm >= 0, 0xD5, 0x55)
    mag = np.where(pcm >= 0, pcm, -pcm - 1)           # one's complement for negatives
    seg = np.searchsorted(_A_SEG_END, mag)
    step = np.where(seg < 2, mag >> 1, mag >> np.maximum(seg, 1)) & 0x0F
    code = np.where(seg >= 8, 0x7F, (np.minimum(seg, 7) << 4) | step)
    return (code ^ mask).astype(np.uint8)


def _mulaw_decode_table() -> np.ndarray:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    t = (((u & 0x0F) << 3) + 0x84) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, 0x84 - t, t - 0x84).astype(np.int16)


def _alaw_decode_table() -> np.ndarray:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    seg = (a & 0x70) >> 4
    t = (a & 0x0F) << 4
    t = np.where(seg == 0, t + 8, (t + 0x108) << np.maximum(seg - 1, 0))
    return np.where(a & 0x80, t, -t).astype(np.int16)


_LIN2ULAW = _mulaw_table()
_LIN2ALAW = _alaw_table()
_ULAW2LIN = _mulaw_decode_table()
_ALAW2LIN = _alaw_decode_table()


def pcm16_to_mulaw(pcm: np.ndarray) -> bytes:
    """G.711 mu-law bytes of int16 samples (one byte per sample)."""
    return _LIN2ULAW[np.asarray(pcm, dtype=np.int16).astype(np.int32) + 32768].tobytes()


def pcm16_to_alaw(pcm: np.ndarray) -> bytes:
    """G.711 A-law bytes of int16 samples (one byte per sample)."""
    return _LIN2ALAW[np.asarray(pcm, dtype=np.int16).astype(np.int32) + 32768].tobytes()


def mulaw_to_pcm16(data: bytes) -> np.ndarray:
    """int16 samples of G.711 mu-law bytes (the reference expansion)."""
    return _ULAW2LIN[np.frombuffer(data, dtype=np.uint8)]


def alaw_to_pcm16(data: bytes) -> np.ndarray:
    """int16 samples of G.711 A-law bytes (the reference expansion)."""
    return _ALAW2LIN[np.frombuffer(data, dtype=np.uint8)]
