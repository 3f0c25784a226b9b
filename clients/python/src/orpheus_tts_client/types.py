"""Plain data types of the client API: events, results, options, errors.

The client converts proto messages to these at its edge, so callers never touch generated
code (it is still available as ``orpheus_tts_client.proto.v1.tts_pb2`` for those who want it).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import Union

import grpc


class _Flush:
    """Type of the FLUSH sentinel."""

    _instance: "_Flush | None" = None

    def __new__(cls) -> "_Flush":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "FLUSH"

    def __reduce__(self) -> str:
        return "FLUSH"


#: Put FLUSH in a text iterable to end the current segment now (a ``Flush`` message).
FLUSH = _Flush()


class Encoding(enum.IntEnum):
    """Audio encoding (values are ``orpheus.tts.v1.AudioEncoding``)."""

    PCM16 = 1  #: signed 16-bit little-endian mono PCM
    MULAW = 2  #: G.711 mu-law, 8000 Hz only
    WAV = 3  #: PCM16 with a streaming RIFF header in the first chunk (Synthesize only)
    ALAW = 4  #: G.711 A-law, 8000 Hz only
    OGG_OPUS = 5  #: Opus in Ogg, one stream over the call (decode with an audio library)
    MP3 = 6  #: MP3, one stream over the call
    FLAC = 7  #: FLAC, one stream over the call


@dataclass(frozen=True)
class Sampling:
    """Per-session sampling overrides; None leaves the server default."""

    temperature: float | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None


@dataclass(frozen=True)
class AudioChunk:
    """Encoded audio of one segment. Offsets and counts are at the output sample rate."""

    audio: bytes
    segment_index: int
    sequence_number: int
    sample_offset: int
    num_samples: int


@dataclass(frozen=True)
class SegmentStart:
    """Sent before a segment's first audio chunk; ``text`` is the segment as the server cut it."""

    segment_index: int
    text: str
    sample_offset: int
    #: why the segment ended (known when it is cut): "sentence", "clause", "flush",
    #: "max_length", "end_of_input"; "" from a server older than this field
    cause: str = ""
    #: the segment's range [text_start, text_end) in the session's text (all fragments sent,
    #: concatenated), in code points (Python str indices)
    text_start: int = 0
    text_end: int = 0
    #: the id of the flush that closed this segment ("" if none)
    flush_id: str = ""


@dataclass(frozen=True)
class SegmentEnd:
    """Sent after a segment's last audio chunk."""

    segment_index: int
    text: str
    num_samples: int
    num_tokens: int
    finish_reason: str
    cause: str = ""  #: as in SegmentStart
    text_start: int = 0
    text_end: int = 0
    flush_id: str = ""


@dataclass(frozen=True)
class Summary:
    """The last event of a call (server-side figures; ``resumes`` is the client's)."""

    session_id: str
    time_to_first_audio_ms: float
    audio_ms: float
    num_tokens: int
    num_segments: int
    num_samples: int
    wall_ms: float
    #: times the client resumed the session on another replica (``resume=``): the figures
    #: above then cover the whole session as the caller received it, except
    #: time_to_first_audio_ms, wall_ms and session_id, which are the last replica's
    resumes: int = 0


@dataclass(frozen=True)
class WordTiming:
    """Where one word of the text sent is in the call's audio (``word_timestamps=True``).

    ``text`` == session_text[char_start:char_end] (code points, Python str indices, in all
    the fragments sent, concatenated); the word's audio is [start_sample, end_sample) in the
    call's sample offsets at the output rate. ``final``: scaled to its segment's real length
    (its audio ended) rather than its expected one; a word's place inside its segment is
    estimated from the text either way (docs/api.md says how far off)."""

    text: str
    char_start: int
    char_end: int
    start_sample: int
    end_sample: int
    final: bool


@dataclass(frozen=True)
class WordTimings:
    """The words of one segment with their times: estimates (``final`` False) before the
    segment's first audio chunk, then final times before its SegmentEnd if any moved."""

    segment_index: int
    words: tuple[WordTiming, ...]
    final: bool


#: One event of a synthesis stream.
Event = Union[AudioChunk, SegmentStart, SegmentEnd, WordTimings, Summary]


@dataclass
class SynthesisResult:
    """Everything one call returned, collected.

    ``audio`` holds the bytes as sent in the requested encoding (for WAV including the
    header); ``pcm`` gives PCM16 for every encoding. ``client_ttfb_s`` is measured on this
    side: from the start of the call to the first audio chunk.
    """

    audio: bytes
    sample_rate: int
    encoding: Encoding
    summary: Summary | None
    segments: list[SegmentEnd] = field(default_factory=list)
    num_chunks: int = 0
    client_ttfb_s: float | None = None
    wall_s: float = 0.0
    #: with ``word_timestamps=True``: every word, in order, at its last times (final where
    #: they moved, the estimate where they did not)
    words: list[WordTiming] = field(default_factory=list)

    @property
    def pcm(self) -> bytes:
        """The audio as signed 16-bit little-endian mono PCM."""
        if self.encoding == Encoding.MULAW:
            return mulaw_to_pcm16(self.audio)
        if self.encoding == Encoding.WAV:
            return wav_payload(self.audio)
        if self.encoding == Encoding.ALAW:
            return alaw_to_pcm16(self.audio)
        if self.encoding in (Encoding.OGG_OPUS, Encoding.MP3, Encoding.FLAC):
            raise ValueError(f"{self.encoding.name} audio needs a decoder (e.g. PyAV or "
                             "ffmpeg); .audio holds the stream")
        return self.audio

    @property
    def num_samples(self) -> int:
        return len(self.pcm) // 2

    @property
    def duration_s(self) -> float:
        return self.num_samples / self.sample_rate if self.sample_rate else 0.0


@dataclass(frozen=True)
class Voice:
    name: str
    language: str
    is_default: bool
    # the LoRA adapter that speaks it on the server ("" for the base model's voices, and
    # from a server older than the field)
    adapter: str = ""
    # a voice cloned from a reference clip on the server (model.reference_voices; False from
    # a server older than the field)
    reference: bool = False


@dataclass(frozen=True)
class VoiceList:
    """Result of ``list_voices()``."""

    voices: list[Voice]
    emotion_tags: list[str]

    @property
    def names(self) -> list[str]:
        return [v.name for v in self.voices]

    @property
    def default(self) -> str | None:
        return next((v.name for v in self.voices if v.is_default), None)


@dataclass(frozen=True)
class ServerStatus:
    """Result of ``status()``: scheduler and KV slot figures (see GetStatusResponse)."""

    serving: bool
    backend: str
    model: str
    active_sessions: int
    active_generations: int
    waiting_generations: int
    free_slots: int
    total_slots: int
    max_batch_size: int
    sessions_total: int
    generations_total: int
    rejected_total: int
    tokens_total: int
    steps_total: int
    grammar_violations: int
    audio_seconds_total: float
    uptime_seconds: float
    # The release and API package of the server (empty from a server older than 0.1.0).
    server_version: str = ""
    api_version: str = ""


class TTSError(Exception):
    """A call ended with a non-OK gRPC status.

    ``code`` is the ``grpc.StatusCode``, ``details`` the server's message (for example
    "unknown voice 'nobody'; known voices: tara, leah, ...").
    """

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details

    @property
    def code_name(self) -> str:
        return self.code.name

    @classmethod
    def from_rpc_error(cls, err: grpc.RpcError) -> "TTSError":
        code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
        details = err.details() if hasattr(err, "details") else str(err)
        return cls(code or grpc.StatusCode.UNKNOWN, details or "")


def _build_mulaw_table() -> tuple[int, ...]:
    # G.711 mu-law expansion (the inverse of the server's encoder), one entry per byte.
    table = []
    for b in range(256):
        u = ~b & 0xFF
        sign, exponent, mantissa = u & 0x80, (u >> 4) & 0x07, u & 0x0F
        magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
        table.append(-magnitude if sign else magnitude)
    return tuple(table)


_MULAW = _build_mulaw_table()


def mulaw_to_pcm16(data: bytes) -> bytes:
    """Decode G.711 mu-law bytes to PCM16 little-endian."""
    return struct.pack(f"<{len(data)}h", *(_MULAW[b] for b in data))


def _build_alaw_table() -> tuple[int, ...]:
    # G.711 A-law expansion, one entry per byte (even bits inverted on the wire).
    table = []
    for b in range(256):
        a = b ^ 0x55
        exponent, mantissa = (a >> 4) & 0x07, a & 0x0F
        magnitude = (mantissa << 4) + 8 if exponent == 0 else ((mantissa << 4) + 0x108) << (exponent - 1)
        table.append(magnitude if a & 0x80 else -magnitude)
    return tuple(table)


_ALAW = _build_alaw_table()


def alaw_to_pcm16(data: bytes) -> bytes:
    """Decode G.711 A-law bytes to PCM16 little-endian."""
    return struct.pack(f"<{len(data)}h", *(_ALAW[b] for b in data))


def wav_payload(data: bytes) -> bytes:
    """The sample bytes of a RIFF/WAV stream (the 'data' chunk, to the end of ``data``).

    Works on the streaming header the server sends, whose size fields are 0xFFFFFFFF.
    """
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError("not a RIFF/WAVE stream")
    pos = 12
    while pos + 8 <= len(data):
        chunk_id, size = data[pos:pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        if chunk_id == b"data":
            return data[pos + 8:]
        pos += 8 + size + (size & 1)
    raise ValueError("RIFF/WAVE stream has no 'data' chunk")
