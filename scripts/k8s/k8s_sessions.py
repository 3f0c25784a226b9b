"""Streaming sessions for scripts/k8s-check.sh, and the rule that says whether one ended
with all its audio.

A session sends SENTENCES one at a time, the next when the previous one's segment starts
(as a voice agent pushes an LLM's text), then half-closes. It ended whole when every
segment ended once and in order, sequence numbers and sample offsets run without a gap
(a resumed session repeats the cut segment's start, under a second SegmentStart, and goes
on from the offset the caller had reached), and the Summary counts every sample received.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from orpheus_tts_client import AudioChunk, Client, SegmentEnd, SegmentStart, Summary

# each ends with a space: a sentence end is a segment boundary once the next character is seen
# (short: the demo model on a shared 2-core CPU speaks them in seconds, not minutes)
SENTENCES = ["Rolling now. ", "Still here. ", "Nothing lost. "]


@dataclass
class Outcome:
    """One session as the client saw it."""

    ok: bool
    resumes: int = 0
    samples: int = 0
    segments: int = 0
    error: str = ""
    started: float = 0.0
    ended: float = 0.0
    session_id: str = ""
    detail: dict = field(default_factory=dict)


def check_events(events: list, segments: int) -> Outcome:
    """Whether events make one whole session of `segments` segments (see module doc)."""
    ends = [e.segment_index for e in events if isinstance(e, SegmentEnd)]
    if ends != list(range(segments)):
        return Outcome(False, error=f"segment ends {ends}, want 0..{segments - 1}")
    starts = [e.segment_index for e in events if isinstance(e, SegmentStart)]
    if sorted(set(starts)) != list(range(segments)):
        return Outcome(False, error=f"segment starts {starts}")
    sequence = offset = 0
    for e in events:
        if isinstance(e, SegmentStart) and e.sample_offset != offset:
            return Outcome(False, error=f"segment {e.segment_index} starts at {e.sample_offset}, "
                                        f"audio so far {offset}")
        if isinstance(e, AudioChunk):
            if (e.sequence_number, e.sample_offset) != (sequence, offset):
                return Outcome(False, error=f"chunk {e.sequence_number}@{e.sample_offset}, "
                                            f"want {sequence}@{offset}")
            sequence, offset = sequence + 1, offset + e.num_samples
    if not events or not isinstance(events[-1], Summary):
        return Outcome(False, error="no summary last")
    s = events[-1]
    if s.num_samples != offset or s.num_segments != segments:
        return Outcome(False, error=f"summary {s.num_samples} samples / {s.num_segments} "
                                    f"segments, received {offset} / {segments}")
    if offset == 0:
        return Outcome(False, error="no audio")
    repeated = len(starts) - segments
    if repeated != s.resumes:
        return Outcome(False, error=f"{repeated} repeated segment starts, {s.resumes} resumes")
    return Outcome(True, resumes=s.resumes, samples=offset, segments=segments,
                   session_id=s.session_id)


def run_session(tts: Client, seed: int, timeout: float = 600.0) -> Outcome:
    """One streaming session of SENTENCES over tts; never raises."""
    t0 = time.time()
    events: list = []
    try:
        with tts.session(timeout=timeout) as s:
            s.send(SENTENCES[0])
            sent = 1
            if sent == len(SENTENCES):
                s.end()
            for ev in s:
                events.append(ev)
                if isinstance(ev, SegmentStart) and ev.segment_index == sent - 1 \
                        and sent < len(SENTENCES):
                    s.send(SENTENCES[sent])
                    sent += 1
                    if sent == len(SENTENCES):
                        s.end()
        out = check_events(events, len(SENTENCES))
    except Exception as exc:  # noqa: BLE001 - the outcome records it
        out = Outcome(False, error=f"{type(exc).__name__}: {exc}"[:300])
    out.started, out.ended = t0, time.time()
    return out
