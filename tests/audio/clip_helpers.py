"""Test clips made in the test: a tone sweep or noise bursts, written by PyAV in any format."""

from __future__ import annotations

import io

import av
import numpy as np

# container format, codec, sample format of the encoder's frames
FORMATS = {
    "wav": ("wav", "pcm_s16le", "s16"),
    "flac": ("flac", "flac", "s16"),
    "ogg": ("ogg", "libopus", "flt"),
    "mp3": ("mp3", "libmp3lame", "fltp"),
}


def sweep(seconds: float, rate: int, level: float = 0.3, f0: float = 200.0,
          f1: float = 2000.0) -> np.ndarray:
    """A sine sweep from f0 to f1 Hz at amplitude `level`, float32."""
    t = np.arange(int(seconds * rate)) / rate
    phase = 2 * np.pi * (f0 * t + (f1 - f0) * t ** 2 / (2 * seconds))
    return (level * np.sin(phase)).astype(np.float32)


def encode_clip(pcm: np.ndarray, rate: int, fmt: str = "wav") -> bytes:
    """`pcm` ([n] mono or [channels, n]) encoded as `fmt` (FORMATS) at `rate`."""
    x = np.atleast_2d(np.asarray(pcm, dtype=np.float32))
    container_fmt, codec, sample_fmt = FORMATS[fmt]
    layout = "mono" if x.shape[0] == 1 else "stereo"
    out = io.BytesIO()
    with av.open(out, mode="w", format=container_fmt) as container:
        stream = container.add_stream(codec, rate=rate, layout=layout)
        data = x if sample_fmt.endswith("p") else x.T.reshape(1, -1)
        if sample_fmt.startswith("s16"):
            data = np.round(np.clip(data, -1, 1) * 32767).astype(np.int16)
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(data), format=sample_fmt,
                                           layout=layout)
        frame.rate = rate
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()
