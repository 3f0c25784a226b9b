"""Independent reference decoding: the ffmpeg CLI from the OS packages, never our code."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np

FFMPEG = shutil.which("ffmpeg")
MISSING = "ffmpeg not found: run scripts/install-tools.sh (installs the Debian package)"

# ffmpeg demuxer names for the raw formats, which have no header to probe
RAW = {"pcm16": ["-f", "s16le", "-ac", "1"], "mulaw": ["-f", "mulaw", "-ac", "1"],
       "alaw": ["-f", "alaw", "-ac", "1"]}


def ffmpeg_decode(data: bytes, encoding: str, rate: int, out_rate: int | None = None) -> np.ndarray:
    """Decode `data` with ffmpeg to float samples in [-1, 1] at `out_rate` (default `rate`)."""
    assert FFMPEG, MISSING
    args = [FFMPEG, "-hide_banner", "-v", "error"]
    args += RAW[encoding] + ["-ar", str(rate)] if encoding in RAW else []
    args += ["-i", "pipe:0", "-f", "s16le", "-ac", "1", "-ar", str(out_rate or rate), "pipe:1"]
    proc = subprocess.run(args, input=data, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    return np.frombuffer(proc.stdout, dtype="<i2").astype(np.float64) / 32768.0


def snr_db(got: np.ndarray, want: np.ndarray) -> float:
    n = min(len(got), len(want))
    err = float(np.sum((got[:n] - want[:n]) ** 2))
    return float("inf") if err == 0 else 10 * np.log10(float(np.sum(want[:n] ** 2)) / err)


def audible(x: np.ndarray, rate: int, low_hz: float = 20.0) -> np.ndarray:
    """`x` without its content below `low_hz`. Lossy codecs drop DC and infrasound on
    purpose (Opus' DC-reject filter), and the random demo codec puts a large DC offset in
    its output, so waveform SNR of a lossy codec is measured on the audible band."""
    spectrum = np.fft.rfft(x)
    spectrum[np.fft.rfftfreq(len(x), 1 / rate) < low_hz] = 0
    return np.fft.irfft(spectrum, len(x))


def aligned_snr_db(got: np.ndarray, want: np.ndarray, max_lag: int) -> tuple[float, int]:
    """Best SNR over leading delays 0..max_lag of `got` (codecs that keep their encoder
    delay, like a streamed MP3, start late by a fixed number of samples)."""
    return max((snr_db(got[lag:], want), lag) for lag in range(max_lag + 1))
