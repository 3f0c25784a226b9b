"""Resuming a session on another replica when the one serving it fails mid-session.

A StreamingSynthesize call that the server accepted can still end with UNAVAILABLE: its
replica was killed (node lost, OOM, a deploy without a drain), its engine died, or the
connection broke. With resume on, the client opens the session again, on the channel's
health-checked round robin (so on another replica), with the same config, and sends the
text again from the first segment that had not ended (SegmentEnd), with the same flush ids.
What the caller reads goes on as one session:

    caller sees:  seg 0 ........ end | seg 1 ...... end | seg 2 ..X  (replica dies)
    resumed call:                                          seg 0' ....... end | seg 1' ...
    caller sees:                                           seg 2 again ... end | seg 3 ...

- segment indices continue: the resumed call's segment k is the caller's (ended + k), where
  ended is how many segments had ended; SegmentStart/SegmentEnd text ranges move by the
  cut (the code point where the first unended segment's text starts);
- sequence numbers and sample offsets continue from what the caller had received: the cut
  segment's partial audio was delivered, and its audio from the start follows it (the
  segment is spoken again from its start, under a second SegmentStart with the same index);
- a seeded session's seed moves by the same number of segments, so the caller's segment i
  still runs with seed + i (docs/api.md);
- the Summary covers the whole session as the caller saw it (segments, samples, audio,
  tokens of the segments it got whole) and counts ``resumes``; time_to_first_audio_ms,
  wall_ms and session_id are the last replica's.

Bounds (``Resume``): at most ``max_attempts`` calls are opened to resume one session, over
its whole life (a text that takes down every replica it reaches is not carried to all of
them), and a new call is opened only within ``max_seconds`` of the failure it replaces; the
session's deadline still covers every attempt. Past a bound the caller gets the failed
call's status.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from .types import AudioChunk, Event, SegmentEnd, SegmentStart, Summary, WordTimings

_U64 = (1 << 64) - 1


@dataclass(frozen=True)
class Resume:
    """How a session is resumed on another replica after the server accepted it and then
    failed (UNAVAILABLE, or a broken connection): see ``orpheus_tts_client._resume``.

    Attributes:
        max_attempts: calls opened to resume one session, over its whole life (a resumed
            call that is refused counts too). 3: a replica lost or two in one session is
            covered, and a text that kills whichever replica speaks it reaches few.
        max_seconds: a new call is opened only this long after the failure it replaces.
            10 s: time for the health checks and DNS to move on from a lost replica, and
            no longer than a listener would wait in silence.
    """

    max_attempts: int = 3
    max_seconds: float = 10.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError(f"Resume.max_attempts must be an int >= 1, got {self.max_attempts!r}")
        if not self.max_seconds > 0:
            raise ValueError(f"Resume.max_seconds must be > 0, got {self.max_seconds!r}")


def resume_policy(resume: "bool | Resume | None", replicas: bool) -> Resume | None:
    """The policy for a client's ``resume=`` argument: None = on (``Resume()``) for targets
    that name replicas, off for one host:port (there is no other replica to go to)."""
    if resume is None:
        return Resume() if replicas else None
    if isinstance(resume, Resume):
        return resume
    if isinstance(resume, bool):
        return Resume() if resume else None
    raise TypeError(f"resume must be a bool, a Resume or None, got {type(resume).__name__}")


def text_length(req: pb.StreamingSynthesizeRequest) -> int:
    """Code points a request adds to the session's text (the server counts the same)."""
    return len(req.text) if req.WhichOneof("request") == "text" else 0


def ended_before(start: int, req: pb.StreamingSynthesizeRequest, cut: int) -> bool:
    """Whether an entry (a request sent at code point ``start``) lies wholly before the cut,
    so that a resumed call needs none of it. A flush exactly at the cut counts as before
    it: it closed the last ended segment, or came when that segment had ended without it
    and so had nothing to close."""
    end = start + text_length(req)
    return end < cut or (end == cut and (start < cut or req.WhichOneof("request") != "text"))


def replay_from(entries: list[tuple[int, pb.StreamingSynthesizeRequest]],
                cut: int) -> tuple[int, list[pb.StreamingSynthesizeRequest]]:
    """(index of the first entry a resumed call needs, what to send it) for resuming at
    ``cut``: every entry not wholly before it (``ended_before``), a text that straddles it
    cut to its part from the cut on. ``entries`` are (start, request) in order."""
    first = len(entries)
    out: list[pb.StreamingSynthesizeRequest] = []
    for i, (start, req) in enumerate(entries):
        if ended_before(start, req, cut):
            continue
        if not out:
            first = i
        if start < cut:
            req = pb.StreamingSynthesizeRequest(text=req.text[cut - start:])
        out.append(req)
    return first, out


def speakable(requests: list[pb.StreamingSynthesizeRequest]) -> bool:
    """Whether requests carry text to speak (the server refuses a session without any)."""
    return any(r.WhichOneof("request") == "text" and r.text.strip() for r in requests)


def resumed_config(config: pb.StreamingSynthesizeRequest,
                   ended: int) -> pb.StreamingSynthesizeRequest:
    """The config for a call that resumes at the caller's segment ``ended``: the same, with a
    seed moved by ``ended`` (the server seeds its segment k with seed + k)."""
    if ended == 0 or not config.config.sampling.HasField("seed"):
        return config
    out = pb.StreamingSynthesizeRequest()
    out.CopyFrom(config)
    out.config.sampling.seed = (config.config.sampling.seed + ended) & _U64
    return out


class SentLog:
    """The requests an asyncio session wrote after its config, kept for a new attempt: with
    ``resume``, those from the cut on (``segment_ended`` moves it); without, all of them
    until ``accept()``, then none (a call the server accepted is never sent again).
    (The blocking session keeps its input in ``_retry.ReplayInput``, by the same rules.)"""

    def __init__(self, resume: bool) -> None:
        self._resume = resume
        self._entries: list[tuple[int, pb.StreamingSynthesizeRequest]] = []
        self._pos = 0
        self._cut = 0
        self._keep = True

    def add(self, req: pb.StreamingSynthesizeRequest) -> None:
        if self._keep:
            self._entries.append((self._pos, req))
        self._pos += text_length(req)

    def accept(self) -> None:
        if not self._resume:
            self._keep = False
            self._entries.clear()

    def segment_ended(self, text_end: int) -> None:
        self._cut = max(self._cut, text_end)
        n = 0
        while n < len(self._entries) and ended_before(*self._entries[n], self._cut):
            n += 1
        del self._entries[:n]

    def replay(self) -> list[pb.StreamingSynthesizeRequest]:
        """What a new attempt is sent after its config."""
        return replay_from(self._entries, self._cut)[1]

    def __len__(self) -> int:
        return len(self._entries)


class Continuity:
    """The caller's view of a session over its attempts: maps each attempt's events into
    one numbering (see the module docstring) and tracks what has ended.

    ``event`` is called with every event of the current attempt, in order; ``resumed``
    when a new attempt replaces a failed one after the server had accepted the session."""

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.resumes = 0
        self.ended = 0         # segments whose SegmentEnd the caller got
        self.cut = 0           # code point where the first unended segment's text starts
        self._tokens = 0       # tokens of the ended segments
        self._chunks = 0       # audio chunks the caller got
        self._samples = 0      # samples the caller got
        # what the current attempt's numbers start from, in the caller's numbering
        self._base = (0, 0, 0, 0, 0)  # segment, sequence, sample offset, text, tokens

    def resumed(self) -> None:
        self.resumes += 1
        self._base = (self.ended, self._chunks, self._samples, self.cut, self._tokens)

    def event(self, ev: Event) -> Event:
        seg, seq, offset, text, tokens = self._base
        if isinstance(ev, AudioChunk):
            self._chunks += 1
            self._samples += ev.num_samples
            if self.resumes:
                ev = dataclasses.replace(ev, segment_index=ev.segment_index + seg,
                                         sequence_number=ev.sequence_number + seq,
                                         sample_offset=ev.sample_offset + offset)
        elif isinstance(ev, SegmentStart):
            if self.resumes:
                ev = dataclasses.replace(ev, segment_index=ev.segment_index + seg,
                                         sample_offset=ev.sample_offset + offset,
                                         **_moved(ev, text))
        elif isinstance(ev, WordTimings):
            if self.resumes:  # the words move like their segment's text and audio
                ev = dataclasses.replace(ev, segment_index=ev.segment_index + seg, words=tuple(
                    dataclasses.replace(w, char_start=w.char_start + text,
                                        char_end=w.char_end + text,
                                        start_sample=w.start_sample + offset,
                                        end_sample=w.end_sample + offset) for w in ev.words))
        elif isinstance(ev, SegmentEnd):
            if self.resumes:
                ev = dataclasses.replace(ev, segment_index=ev.segment_index + seg,
                                         **_moved(ev, text))
            self.ended = ev.segment_index + 1
            self.cut = max(self.cut, ev.text_end)
            self._tokens += ev.num_tokens
        elif isinstance(ev, Summary) and self.resumes:
            ev = dataclasses.replace(
                ev, num_segments=ev.num_segments + seg, num_samples=ev.num_samples + offset,
                audio_ms=ev.audio_ms + offset * 1000 / self.sample_rate,
                num_tokens=ev.num_tokens + tokens, resumes=self.resumes)
        return ev

    def local_summary(self, session_id: str = "") -> Summary:
        """The summary of a session whose text had all been spoken when its replica failed
        (there is nothing to resume, and no server summary to wait for): the caller's own
        figures; the server-side times are unknown (0)."""
        return Summary(session_id, 0.0, self._samples * 1000 / self.sample_rate, self._tokens,
                       self.ended, self._samples, 0.0, resumes=self.resumes)


def _moved(ev: SegmentStart | SegmentEnd, by: int) -> dict[str, Any]:
    return {"text_start": ev.text_start + by, "text_end": ev.text_end + by}
