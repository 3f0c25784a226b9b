"""PCM encodings at the edge: float32 24 kHz in, the client's format out.

Resampling uses soxr (a maintained, high-quality resampler) in streaming mode, one
resampler per session so chunk boundaries leave no clicks and no samples are lost:
`Encoder.encode(chunk)` returns what is ready, `Encoder.finish()` the tail.
"""

from __future__ import annotations

import struct

import numpy as np

MODEL_RATE = 24000
PCM16_RATES = (24000, 48000, 16000, 8000)
MULAW_RATES = (8000,)


def float_to_pcm16(x: np.ndarray) -> bytes:
    return (np.clip(x, -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes()


def float_to_mulaw(x: np.ndarray) -> bytes:
    """G.711 mu-law (mu = 255) of float samples in [-1, 1]."""
    mu = 255.0
    x = np.clip(x, -1.0, 1.0)
    y = np.sign(x) * np.log1p(mu * np.abs(x)) / np.log1p(mu)
    # map [-1, 1] to the 8-bit code: sign bit, 7 magnitude bits, inverted as G.711 specifies
    mag = np.minimum((np.abs(y) * 127.0).round(), 127).astype(np.uint8)
    code = np.where(y < 0, mag, mag | 0x80).astype(np.uint8)
    return (~code).astype(np.uint8).tobytes()


def mulaw_to_float(data: bytes) -> np.ndarray:
    """Inverse of float_to_mulaw (for tests and clients)."""
    code = ~np.frombuffer(data, dtype=np.uint8)
    sign = np.where(code & 0x80, 1.0, -1.0)
    y = (code & 0x7F).astype(np.float64) / 127.0
    return (sign * (np.expm1(y * np.log1p(255.0)) / 255.0)).astype(np.float32)


def wav_header(sample_rate: int, num_samples: int | None = None) -> bytes:
    """44-byte RIFF header for mono PCM16. Unknown length: sizes 0xFFFFFFFF (streaming WAV)."""
    data = 0xFFFFFFFF if num_samples is None else num_samples * 2
    riff = 0xFFFFFFFF if num_samples is None else 36 + data
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
            + b"data" + struct.pack("<I", data))


class Encoder:
    """Streaming float32 24 kHz -> encoded bytes at `rate` for one session."""

    def __init__(self, encoding: str = "pcm16", rate: int = MODEL_RATE) -> None:
        if encoding not in ("pcm16", "mulaw", "wav"):
            raise ValueError(f"unsupported encoding {encoding!r}")
        allowed = MULAW_RATES if encoding == "mulaw" else PCM16_RATES
        if rate not in allowed:
            raise ValueError(f"unsupported sample rate {rate} Hz for {encoding} "
                             f"(supported: {', '.join(map(str, allowed))})")
        self.encoding = encoding
        self.rate = rate
        self._resampler = None
        if rate != MODEL_RATE:
            import soxr
            self._resampler = soxr.ResampleStream(MODEL_RATE, rate, 1, dtype="float32",
                                                  quality="HQ")
        self._header_pending = encoding == "wav"

    def _bytes(self, x: np.ndarray) -> bytes:
        out = float_to_mulaw(x) if self.encoding == "mulaw" else float_to_pcm16(x)
        if self._header_pending:
            self._header_pending = False
            out = wav_header(self.rate) + out
        return out

    def encode(self, pcm: np.ndarray, last: bool = False) -> tuple[bytes, int]:
        """Encode a chunk; returns (bytes, samples at the output rate)."""
        x = np.asarray(pcm, dtype=np.float32)
        if self._resampler is not None:
            x = self._resampler.resample_chunk(x, last=last)
        return self._bytes(x), int(x.shape[0])
