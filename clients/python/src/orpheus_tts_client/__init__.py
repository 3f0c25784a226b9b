"""Python client for orpheus-svc, the streaming Orpheus text-to-speech gRPC service.

    from orpheus_tts_client import Client, AsyncClient, AudioChunk, FLUSH

    with Client("localhost:50051") as tts:
        result = tts.synthesize("Hello there.", voice="tara")      # PCM16, 24 kHz
        for ev in tts.stream(["Hel", "lo. How are", " you?", FLUSH]):
            ...
        with tts.session(voice="tara") as s:      # drive a session by hand
            s.send("Hel"); s.send("lo."); s.flush(); s.end()
            for ev in s:
                ...

Generated stubs are importable as ``orpheus_tts_client.proto.v1.tts_pb2`` / ``tts_pb2_grpc``.
"""

from ._aio_session import AsyncSession
from ._resume import Resume
from ._session import Session
from ._target import tls_credentials
from .aio import AsyncClient
from .client import Client, collect
from .types import (
    FLUSH, AudioChunk, Encoding, Event, Sampling, SegmentEnd, SegmentStart, ServerStatus,
    Summary, SynthesisResult, TTSError, Voice, VoiceList, WordTiming, WordTimings,
    mulaw_to_pcm16, wav_payload,
)

# The one place the client distribution's version is written (pyproject.toml reads it;
# `orpheus-say --version` prints it). CHANGELOG.md at the repository root has the changes.
__version__ = "0.1.0"

__all__ = [
    "AsyncClient", "AsyncSession", "AudioChunk", "Client", "Encoding", "Event", "FLUSH", "Resume",
    "Sampling",
    "tls_credentials",
    "SegmentEnd", "SegmentStart", "ServerStatus", "Session", "Summary", "SynthesisResult", "TTSError",
    "Voice", "VoiceList", "WordTiming", "WordTimings", "collect", "mulaw_to_pcm16",
    "wav_payload",
]
