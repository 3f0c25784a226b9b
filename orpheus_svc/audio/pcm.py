"""PCM encodings at the edge: float32 24 kHz in, the client's format out.

Resampling uses soxr (a maintained, high-quality resampler) in streaming mode, one
resampler per segment so chunk boundaries leave no clicks and no samples are lost:
`Encoder.encode(chunk, last)` returns what is ready, the segment's last chunk the tail.

`SessionEncoder` is one session's output stream: G.711 and PCM bytes are stateless per
sample, a WAV header goes out once before the first audio, and the compressed formats
(containers.py) run one encoder and muxer across all the session's segments so the
client receives one continuous stream; `finish()` returns its tail.
"""

from __future__ import annotations

import struct

import numpy as np

from .g711 import pcm16_to_alaw, pcm16_to_mulaw

MODEL_RATE = 24000
PCM16_RATES = (24000, 48000, 16000, 8000)
MULAW_RATES = (8000,)
G711_RATES = MULAW_RATES  # telephony: G.711 is defined at 8 kHz
CONTAINER_ENCODINGS = ("ogg_opus", "mp3", "flac", "aac")
ENCODINGS = ("pcm16", "mulaw", "alaw", "wav") + CONTAINER_ENCODINGS


def allowed_rates(encoding: str) -> tuple[int, ...]:
    """Output sample rates offered for `encoding` (all of them resampled from 24 kHz)."""
    return G711_RATES if encoding in ("mulaw", "alaw") else PCM16_RATES


def default_rate(encoding: str) -> int:
    """The rate used when a request leaves it unset: 8 kHz for G.711, else the model's."""
    return allowed_rates(encoding)[0]


def float_to_pcm16(x: np.ndarray) -> bytes:
    return (np.clip(x, -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes()


def float_to_mulaw(x: np.ndarray) -> bytes:
    """G.711 mu-law of float samples in [-1, 1]: PCM16 first, then the G.711 tables."""
    return pcm16_to_mulaw(np.frombuffer(float_to_pcm16(x), dtype="<i2"))


def float_to_alaw(x: np.ndarray) -> bytes:
    """G.711 A-law of float samples in [-1, 1]: PCM16 first, then the G.711 tables."""
    return pcm16_to_alaw(np.frombuffer(float_to_pcm16(x), dtype="<i2"))


def mulaw_to_float(data: bytes) -> np.ndarray:
    """Inverse of float_to_mulaw (the G.711 expansion), for tests and clients."""
    from .g711 import mulaw_to_pcm16
    return (mulaw_to_pcm16(data).astype(np.float32) / 32767.0).astype(np.float32)


def wav_header(sample_rate: int, num_samples: int | None = None) -> bytes:
    """44-byte RIFF header for mono PCM16. Unknown length: sizes 0xFFFFFFFF (streaming WAV)."""
    data = 0xFFFFFFFF if num_samples is None else num_samples * 2
    riff = 0xFFFFFFFF if num_samples is None else 36 + data
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
            + b"data" + struct.pack("<I", data))


class Encoder:
    """Streaming float32 24 kHz -> encoded bytes at `rate`, for one segment.

    Standalone (no `session`) it encodes pcm16 / mulaw / alaw / wav on its own; made by
    `SessionEncoder.segment()` it shares the session's WAV header and container stream."""

    def __init__(self, encoding: str = "pcm16", rate: int = MODEL_RATE,
                 session: "SessionEncoder | None" = None) -> None:
        check_format(encoding, rate)
        if session is None and encoding in CONTAINER_ENCODINGS:
            raise ValueError(f"{encoding} is a stream over the whole session: "
                             "use SessionEncoder(...).segment()")
        self.encoding = encoding
        self.rate = rate
        self._session = session
        self._resampler = None
        if rate != MODEL_RATE:
            import soxr
            self._resampler = soxr.ResampleStream(MODEL_RATE, rate, 1, dtype="float32",
                                                  quality="HQ")
        self._header_pending = encoding == "wav" and session is None

    def _bytes(self, x: np.ndarray) -> bytes:
        if self._session is not None:
            return self._session.encode(x)
        out = _ENCODE[self.encoding](x)
        if self._header_pending:
            self._header_pending = False
            out = wav_header(self.rate) + out
        return out

    def encode(self, pcm: np.ndarray, last: bool = False) -> tuple[bytes, int]:
        """Encode a chunk; returns (bytes, samples at the output rate).

        With a compressed encoding the bytes may be empty although samples went in: the
        encoder holds up to one codec frame back (containers.py gives each format's delay)."""
        x = np.asarray(pcm, dtype=np.float32)
        if self._resampler is not None:
            x = self._resampler.resample_chunk(x, last=last)
        return self._bytes(x), int(x.shape[0])


_ENCODE = {"pcm16": float_to_pcm16, "wav": float_to_pcm16, "mulaw": float_to_mulaw,
           "alaw": float_to_alaw}


def check_format(encoding: str, rate: int) -> None:
    """ValueError naming what to change when `encoding` at `rate` is not offered."""
    if encoding not in ENCODINGS:
        raise ValueError(f"unsupported encoding {encoding!r} (supported: {', '.join(ENCODINGS)})")
    allowed = allowed_rates(encoding)
    if rate not in allowed:
        raise ValueError(f"unsupported sample rate {rate} Hz for {encoding} "
                         f"(supported: {', '.join(map(str, allowed))})")


class SessionEncoder:
    """One session's output stream; `segment()` gives each segment its encoder.

    Segments are encoded strictly in order (the session delivers them so), which is what
    lets one container stream and one WAV header span them all.

    `whole`: the output goes out in one piece from finish() (a response sent once the
    audio is complete), so its length is known before its header: a WAV's RIFF sizes and
    a FLAC's STREAMINFO total are the real ones, not the open-ended ones of a stream."""

    def __init__(self, encoding: str, rate: int, whole: bool = False) -> None:
        check_format(encoding, rate)
        self.encoding = encoding
        self.rate = rate
        self._header_pending = encoding == "wav" and not whole
        self._held: list[bytes] | None = [] if whole else None
        self._container = None
        if encoding in CONTAINER_ENCODINGS:
            from .containers import ContainerEncoder
            self._container = ContainerEncoder(encoding, rate, whole=whole)

    def segment(self) -> Encoder:
        return Encoder(self.encoding, self.rate, session=self)

    def encode(self, x: np.ndarray) -> bytes:
        if self._container is not None:
            return self._container.encode(x)
        out = _ENCODE[self.encoding](x)
        if self._held is not None:
            self._held.append(out)
            return b""
        if self._header_pending and out:
            self._header_pending = False
            out = wav_header(self.rate) + out
        return out

    def finish(self) -> bytes:
        """The stream's tail after the last segment (a container's last frames and
        trailer; nothing for the uncompressed encodings), or all of a `whole` output."""
        if self._container is not None:
            return self._container.finish()
        if self._held is None:
            return b""
        data, self._held = b"".join(self._held), []
        if self.encoding == "wav":
            return wav_header(self.rate, len(data) // 2) + data
        return data

    def close(self) -> None:
        """Free codec state of a session that ends without finish() (cancelled)."""
        if self._container is not None:
            self._container.close()
