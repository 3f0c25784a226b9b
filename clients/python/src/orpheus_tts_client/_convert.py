"""Proto <-> client types, the only place that touches generated messages."""

from __future__ import annotations

import time

from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from .types import (
    FLUSH, AudioChunk, Encoding, Event, Sampling, SegmentEnd, SegmentStart, ServerStatus,
    Summary, SynthesisResult, Voice, VoiceList, WordTiming, WordTimings,
)


def default_rate(encoding: Encoding) -> int:
    return 8000 if encoding in (Encoding.MULAW, Encoding.ALAW) else 24000


def audio_format(encoding: Encoding | int | str, sample_rate: int | None) -> pb.AudioFormat:
    enc = as_encoding(encoding)
    return pb.AudioFormat(encoding=int(enc), sample_rate_hz=int(sample_rate or 0))


def as_encoding(encoding: Encoding | int | str) -> Encoding:
    if isinstance(encoding, str):
        try:
            return Encoding[encoding.upper()]
        except KeyError:
            raise ValueError(f"unknown encoding {encoding!r}; use one of "
                             f"{', '.join(e.name.lower() for e in Encoding)}") from None
    return Encoding(encoding)


def sampling_options(sampling: Sampling | None) -> pb.SamplingOptions | None:
    if sampling is None:
        return None
    kw = {k: getattr(sampling, k) for k in ("temperature", "top_p", "repetition_penalty", "seed")
          if getattr(sampling, k) is not None}
    return pb.SamplingOptions(**kw)


def config_request(voice: str, encoding, sample_rate, sampling,
                   word_timestamps: bool = False) -> pb.StreamingSynthesizeRequest:
    return pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(
        voice=voice or "", audio_format=audio_format(encoding, sample_rate),
        sampling=sampling_options(sampling), word_timestamps=bool(word_timestamps)))


def flush_request(flush_id: str = "") -> pb.StreamingSynthesizeRequest:
    if not isinstance(flush_id, str):
        raise TypeError(f"flush id must be str, got {type(flush_id).__name__}")
    return pb.StreamingSynthesizeRequest(flush=pb.Flush(id=flush_id))


def fragment_request(item) -> pb.StreamingSynthesizeRequest | None:
    """The request for one item of a text iterable (None: nothing to send)."""
    if item is FLUSH:
        return pb.StreamingSynthesizeRequest(flush=pb.Flush())
    if isinstance(item, pb.StreamingSynthesizeRequest):  # queued by Session.flush(id)
        return item
    if not isinstance(item, str):
        raise TypeError(f"text iterables yield str or orpheus_tts_client.FLUSH, "
                        f"got {type(item).__name__}")
    if not item:
        return None
    return pb.StreamingSynthesizeRequest(text=item)


def synthesize_request(text: str, voice: str, encoding, sample_rate, sampling,
                       word_timestamps: bool = False) -> pb.SynthesizeRequest:
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    return pb.SynthesizeRequest(text=text, voice=voice or "",
                                audio_format=audio_format(encoding, sample_rate),
                                sampling=sampling_options(sampling),
                                word_timestamps=bool(word_timestamps))


def event(msg) -> Event | None:
    """Client event for a StreamingSynthesizeResponse / SynthesizeResponse."""
    kind = msg.WhichOneof("response")
    if kind == "audio":
        a = msg.audio
        return AudioChunk(a.audio, a.segment_index, a.sequence_number, a.sample_offset,
                          a.num_samples)
    if kind == "segment_start":
        s = msg.segment_start
        return SegmentStart(s.segment_index, s.text, s.sample_offset, *_segment_fields(s))
    if kind == "segment_end":
        e = msg.segment_end
        return SegmentEnd(e.segment_index, e.text, e.num_samples, e.num_tokens, e.finish_reason,
                          *_segment_fields(e))
    if kind == "word_timings":
        t = msg.word_timings
        return WordTimings(t.segment_index, tuple(
            WordTiming(w.text, w.char_start, w.char_end, w.start_sample, w.end_sample, w.final)
            for w in t.words), t.final)
    if kind == "summary":
        s = msg.summary
        return Summary(s.session_id, s.time_to_first_audio_ms, s.audio_ms, s.num_tokens,
                       s.num_segments, s.num_samples, s.wall_ms)
    return None  # a newer server's event this client does not know: skip it


_CAUSES = {1: "sentence", 2: "flush", 3: "max_length", 4: "end_of_input", 5: "clause"}


def _segment_fields(msg) -> tuple[str, int, int, str]:
    """(cause, text_start, text_end, flush_id) of a SegmentStart/SegmentEnd; a server older
    than these fields sends none of them (cause "" then)."""
    return (_CAUSES.get(msg.cause, ""), msg.text_start, msg.text_end, msg.flush_id)


def voice_list(msg: pb.ListVoicesResponse) -> VoiceList:
    return VoiceList([Voice(v.name, v.language, v.is_default, v.adapter, v.reference)
                      for v in msg.voices],
                     list(msg.emotion_tags))


def server_status(msg: pb.GetStatusResponse) -> ServerStatus:
    return ServerStatus(**{f: getattr(msg, f) for f in ServerStatus.__dataclass_fields__})


class ResultBuilder:
    """Collects events into a SynthesisResult, timing the first audio on the client side."""

    def __init__(self, encoding, sample_rate: int | None) -> None:
        self.encoding = as_encoding(encoding)
        self.sample_rate = int(sample_rate or default_rate(self.encoding))
        self.started = time.monotonic()
        self._audio: list[bytes] = []
        self._segments: list[SegmentEnd] = []
        self._summary: Summary | None = None
        self._chunks = 0
        self._ttfb: float | None = None
        self._words: dict[int, tuple[WordTiming, ...]] = {}  # segment -> its latest times

    def add(self, ev: Event) -> None:
        if isinstance(ev, AudioChunk):
            if self._ttfb is None:
                self._ttfb = time.monotonic() - self.started
            self._audio.append(ev.audio)
            self._chunks += 1
        elif isinstance(ev, SegmentEnd):
            self._segments.append(ev)
        elif isinstance(ev, WordTimings):
            self._words[ev.segment_index] = ev.words
        elif isinstance(ev, Summary):
            self._summary = ev

    def result(self) -> SynthesisResult:
        return SynthesisResult(
            audio=b"".join(self._audio), sample_rate=self.sample_rate, encoding=self.encoding,
            summary=self._summary, segments=self._segments, num_chunks=self._chunks,
            client_ttfb_s=self._ttfb, wall_s=time.monotonic() - self.started,
            words=[w for i in sorted(self._words) for w in self._words[i]])
