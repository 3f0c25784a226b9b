"""Compressed encodings (Ogg Opus, MP3, FLAC, AAC in ADTS) streamed through PyAV.

PyAV wraps FFmpeg's libavcodec/libavformat (libopus, LAME, FFmpeg's FLAC and AAC encoders)
and ships them in its wheels, so serving needs no system FFmpeg. One `ContainerEncoder`
is one continuous stream for a whole session: the muxer writes its header with the first
packet, every `encode()` returns the bytes the encoder and muxer have completed so far, and
`finish()` drains the encoder and writes the trailer. Nothing is written twice or seeked
back to (the output is a pipe), so what a client has received is always a valid prefix.
A `whole` encoder (a response sent once the audio is complete) writes to a seekable buffer
instead and returns everything from `finish()`: the muxer then goes back to write what it
learns only at the end (FLAC's STREAMINFO total samples and MD5).

Latency each format adds on top of the audio itself (what an `encode()` may hold back):

    ogg_opus   20 ms Opus frames + 6.5 ms encoder look-ahead; one Ogg page per packet
    mp3        1152-sample frames + LAME's ~1100-sample delay (~100 ms at 24 kHz); a
               streamed MP3 has no LAME gapless header, so decoders keep that delay as
               leading audio (up to ~1.6k extra samples)
    flac       1152-sample blocks (48 ms at 24 kHz), lossless
    aac        1024-sample frames + 1024 priming samples (~85 ms at 24 kHz), ADTS framing
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class _Format:
    muxer: str
    codec: str
    bit_rate: int
    muxer_options: dict
    codec_options: dict


FORMATS = {
    # page_duration: a page per 20 ms packet, not FFmpeg's default 1 s of buffered pages
    "ogg_opus": _Format("ogg", "libopus", 64000, {"page_duration": "20000"},
                        {"application": "audio"}),
    # no ID3 tag; the Xing/LAME header needs a seekable output and is skipped on a pipe
    "mp3": _Format("mp3", "libmp3lame", 64000, {"id3v2_version": "0", "write_xing": "0"}, {}),
    "flac": _Format("flac", "flac", 0, {}, {"frame_size": "1152"}),
    "aac": _Format("adts", "aac", 64000, {}, {}),
}


class _Sink(io.RawIOBase):
    """A write-only, unseekable file: collects what the muxer writes until taken."""

    def __init__(self) -> None:
        super().__init__()
        self._parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self._parts.append(bytes(b))
        return len(b)

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


class ContainerEncoder:
    """Mono float32 PCM at `rate` in, one `encoding` byte stream out, chunk by chunk."""

    def __init__(self, encoding: str, rate: int, whole: bool = False) -> None:
        import av  # lazily: only sessions that ask for a compressed format load FFmpeg

        fmt = FORMATS[encoding]
        self._av = av
        self.rate = rate
        self._sink = _Sink()
        self._whole = io.BytesIO() if whole else None
        self._container = av.open(self._sink if self._whole is None else self._whole, mode="w",
                                  format=fmt.muxer, options=dict(fmt.muxer_options))
        self._stream = self._container.add_stream(fmt.codec, rate=rate, layout="mono")
        if fmt.bit_rate:
            self._stream.codec_context.bit_rate = fmt.bit_rate
        self._stream.codec_context.options = dict(fmt.codec_options)
        self._pts = 0
        self._closed = False

    def encode(self, pcm: np.ndarray) -> bytes:
        """Feed float32 samples; returns the stream bytes completed so far (may be empty)."""
        x = np.ascontiguousarray(pcm, dtype=np.float32)
        if x.size:
            frame = self._av.AudioFrame.from_ndarray(x[None, :], format="flt", layout="mono")
            frame.sample_rate = self.rate
            frame.pts = self._pts
            self._pts += x.size
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        return self._sink.take()

    def finish(self) -> bytes:
        """Drain the encoder, write the trailer; returns the last bytes of the stream."""
        if not self._closed:
            self._closed = True
            for packet in self._stream.encode(None):
                self._container.mux(packet)
            self._container.close()
            if self._whole is not None:
                return self._whole.getvalue()
        return self._sink.take()

    def close(self) -> None:
        """Release FFmpeg state without caring for the output (a cancelled session)."""
        if not self._closed:
            self._closed = True
            try:
                self._container.close()
            except Exception:  # noqa: BLE001 - nothing useful to do with a dead stream
                pass
