"""Reference clips: an audio file (WAV, FLAC, Ogg/Opus, MP3, anything FFmpeg reads) -> the
24 kHz mono float32 PCM a reference voice is encoded from (core/reference.py).

    bytes or a path
      -> PyAV: the first audio stream, decoded to float (planar), every channel
      -> mono: the mean of the channels (a stereo clip's two sides weigh the same)
      -> soxr: resampled to 24 kHz (quality HQ), unless already at 24 kHz
      -> clamped to [-1, 1]: lossy decoders (MP3, Opus) overshoot full scale a little
      -> core/reference.py check_clip: long enough, short enough, not silent

Every refusal is a ReferenceVoiceError with field "clip" and a message a person can act on.
Decoding stops as soon as the clip is past core/reference.py MAX_CLIP_SECONDS, and a file or
a request's bytes over MAX_CLIP_BYTES are refused before decoding, so a long recording costs
no more than the limit to refuse.

`resolve_clip_path` is the realpath check of a clip named while serving: only files inside
model.reference_dirs (models/adapters.py resolve_inside is the adapters' twin); its
refusals are ClipPathError, which says whether the path lies outside them.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Union

import numpy as np

from orpheus_svc.core.reference import (
    MAX_CLIP_BYTES,
    MAX_CLIP_SECONDS,
    ReferenceVoiceError,
    check_clip,
)
from orpheus_svc.core.tokens import SAMPLE_RATE

ClipSource = Union[bytes, bytearray, memoryview, str, os.PathLike]


def _clip_error(message: str) -> ReferenceVoiceError:
    return ReferenceVoiceError("clip", message)


class ClipPathError(ReferenceVoiceError):
    """A clip path refused by resolve_clip_path; `outside`: it names a file outside
    model.reference_dirs (the admin service answers PERMISSION_DENIED), else it is no
    usable path (empty, relative: INVALID_ARGUMENT)."""

    def __init__(self, message: str, outside: bool = False) -> None:
        super().__init__("clip", message)
        self.outside = outside


def _open_source(source: ClipSource) -> tuple[object, str]:
    """(what av.open reads, how to name it in a message); refuses empty and oversized input."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if not data:
            raise _clip_error("the clip is empty (0 bytes)")
        if len(data) > MAX_CLIP_BYTES:
            raise _clip_error(f"the clip is {len(data)} bytes; at most {MAX_CLIP_BYTES} "
                              f"({MAX_CLIP_SECONDS:g} s of audio needs far fewer)")
        return io.BytesIO(data), "the clip"
    path = os.fspath(source)
    name = f"clip {path!r}"
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise _clip_error(f"cannot read {name}: {exc.strerror or exc}") from None
    if not os.path.isfile(path):
        raise _clip_error(f"{name} is not a file")
    if size == 0:
        raise _clip_error(f"{name} is empty (0 bytes)")
    if size > MAX_CLIP_BYTES:
        raise _clip_error(f"{name} is {size} bytes; at most {MAX_CLIP_BYTES}")
    return path, name


def decode_clip(source: ClipSource) -> np.ndarray:
    """The clip's audio as 24 kHz mono float32 in [-1, 1] (module docstring). Refuses input
    that is empty, oversized, unreadable, without an audio stream or longer than
    MAX_CLIP_SECONDS; does not judge length minimum or silence (load_clip does)."""
    import av  # PyAV: imported where a clip is read, not at every start

    target, name = _open_source(source)
    chunks: list[np.ndarray] = []
    try:
        with av.open(target, mode="r") as container:
            stream = next((s for s in container.streams if s.type == "audio"), None)
            if stream is None:
                raise _clip_error(f"{name} has no audio stream")
            rate = int(stream.codec_context.sample_rate or 0)
            if rate <= 0:
                raise _clip_error(f"{name} has no sample rate")
            limit = int(MAX_CLIP_SECONDS * rate)
            resampler = av.AudioResampler(format="fltp")  # layout and rate kept
            total = 0
            for frame in container.decode(stream):
                for planar in resampler.resample(frame):
                    x = planar.to_ndarray()  # [channels, n] float32
                    chunks.append(x.mean(axis=0, dtype=np.float32))
                    total += x.shape[1]
                if total > limit:
                    raise _clip_error(f"{name} is longer than {MAX_CLIP_SECONDS:g} s (10-20 s "
                                      f"is best): cut it")
            for planar in resampler.resample(None):
                x = planar.to_ndarray()
                chunks.append(x.mean(axis=0, dtype=np.float32))
    except av.error.FFmpegError as exc:
        raise _clip_error(f"cannot decode {name} as audio (WAV, FLAC, Ogg/Opus or MP3): "
                          f"{exc.__class__.__name__}") from None
    pcm = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
    if pcm.size and rate != SAMPLE_RATE:
        import soxr

        pcm = soxr.resample(pcm, rate, SAMPLE_RATE, quality="HQ")
    return np.clip(pcm, -1.0, 1.0).astype(np.float32, copy=False)


def load_clip(source: ClipSource) -> np.ndarray:
    """decode_clip, then the reference clip checks (core/reference.py check_clip): a usable
    clip's 24 kHz mono PCM, or ReferenceVoiceError("clip")."""
    pcm = decode_clip(source)
    check_clip(pcm, SAMPLE_RATE)
    return pcm


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def resolve_clip_path(path: str, dirs: tuple[str, ...]) -> Path:
    """The real path of clip file `path` (absolute; every symlink followed, `..` resolved:
    os.path.realpath) when it lies inside one of `dirs` (model.reference_dirs, each resolved
    the same way); ReferenceVoiceError("clip") otherwise. Read the clip from the path
    returned, never from `path`: a symlink swapped after the check then reads nothing new."""
    if not isinstance(path, str) or not path.strip() or "\x00" in path:
        raise ClipPathError("the clip's path is empty: give the file's absolute path (inside "
                          "model.reference_dirs)")
    given = Path(path)
    if not given.is_absolute():
        raise ClipPathError(f"clip path {path[:200]!r} is not absolute: give the file's "
                          f"absolute path (inside model.reference_dirs)")
    real = Path(os.path.realpath(given))
    roots = [Path(os.path.realpath(d)) for d in dirs]
    allowed = ", ".join(str(r) for r in roots) or "none"
    if not any(_inside(real, r) for r in roots):
        shown = f"{path[:200]!r}" + (f" resolves to {str(real)!r}, which is"
                                     if str(real) != path else " is")
        raise ClipPathError(f"clip path {shown} outside model.reference_dirs ({allowed}): the "
                            f"server reads clips only from those directories", outside=True)
    return real
