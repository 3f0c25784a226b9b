"""Resuming a session on another replica after the server accepted it and then failed
(orpheus_tts_client._resume; issue 36). The rules on their own first, then the blocking and
asyncio clients against in-process replicas whose session breaks mid-way (UNAVAILABLE after
audio went out, as when a replica's engine dies). tests/e2e/test_resume.py kills a real
replica process instead.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from orpheus_tts_client import (
    AsyncClient, AudioChunk, Client, Resume, SegmentEnd, SegmentStart, Summary, TTSError,
)
from orpheus_tts_client._resume import (
    Continuity, SentLog, ended_before, replay_from, resume_policy, resumed_config,
)
from orpheus_tts_client._retry import Attempts, ReplayInput

from .replicas import BreakingServicer

FIVE = ["One two. ", "Three four five. ", "Six seven", ("flush", "f-2"), " Nine ten. ",
        "Eleven."]  # five segments, the third closed by a flush with an id
TEXT = "".join(x for x in FIVE if isinstance(x, str))


def text(t: str) -> pb.StreamingSynthesizeRequest:
    return pb.StreamingSynthesizeRequest(text=t)


def flush(i: str = "") -> pb.StreamingSynthesizeRequest:
    return pb.StreamingSynthesizeRequest(flush=pb.Flush(id=i))


# -- the rules (pure) -------------------------------------------------------------------------


def test_resume_is_on_by_default_where_another_replica_can_take_over():
    assert resume_policy(None, replicas=True) == Resume()
    assert resume_policy(None, replicas=False) is None
    assert resume_policy(False, replicas=True) is None
    assert resume_policy(True, replicas=False) == Resume()
    assert resume_policy(Resume(1, 2.0), replicas=False) == Resume(1, 2.0)
    with Client("127.0.0.1:1,127.0.0.1:2") as tts:
        assert tts.resume == Resume()
    with Client("127.0.0.1:1") as tts:
        assert tts.resume is None
    with pytest.raises(ValueError, match="max_attempts"):
        Resume(max_attempts=0)
    with pytest.raises(TypeError, match="resume"):
        resume_policy("yes", replicas=True)


def test_a_resumed_call_is_sent_the_text_from_the_first_unended_segment():
    entries = [(0, text("One. Two")), (8, flush("a")), (8, text(" three. ")), (16, flush("b"))]
    # segment "One." ended at 4: the first text is cut there, the rest follows as it was
    first, out = replay_from(entries, 4)
    assert first == 0 and out == [text(" Two"), flush("a"), text(" three. "), flush("b")]
    # "One. Two" ended at its flush: the flush closed it and is not sent again
    assert replay_from(entries, 8) == (2, [text(" three. "), flush("b")])
    assert ended_before(8, flush("a"), 8) and not ended_before(8, text(" three. "), 8)
    # everything ended: nothing to send
    assert replay_from(entries, 16) == (4, [])


def test_the_sent_log_keeps_only_what_a_new_attempt_needs():
    log = SentLog(resume=True)
    for req in (text("One. "), text("Two. Thr"), flush("x"), text("ee.")):
        log.add(req)
    log.segment_ended(4)
    assert log.replay() == [text(" "), text("Two. Thr"), flush("x"), text("ee.")]
    log.segment_ended(9)
    assert log.replay() == [text(" Thr"), flush("x"), text("ee.")]
    assert len(log) == 3  # "One. " is gone: it lies wholly before the cut
    plain = SentLog(resume=False)
    plain.add(text("One."))
    plain.accept()  # without resume an accepted call is never sent again: nothing kept
    assert len(plain) == 0


def test_the_blocking_input_resumes_from_the_cut_and_drops_what_ended():
    items = ["One. ", "Two. Thr", ("flush", "x"), "ee."]
    convert = (lambda it: flush(it[1]) if isinstance(it, tuple) else text(it))
    log = ReplayInput(iter(items), convert, resume=True)
    assert [log.get(1, i) for i in range(4)] == [convert(it) for it in items]
    log.segment_ended(4)  # "One." ended
    log.segment_ended(9)  # "Two." ended
    assert log.buffered() == 3
    log.begin(2)
    assert [log.get(2, i) for i in range(4)][:3] == [text(" Thr"), flush("x"), text("ee.")]


def test_the_callers_numbering_goes_on_across_a_resume():
    view = Continuity(sample_rate=24000)
    seen = [view.event(ev) for ev in (
        SegmentStart(0, "One.", 0, "sentence", 0, 4),
        AudioChunk(b"", 0, 0, 0, 100), SegmentEnd(0, "One.", 100, 7, "stop", "sentence", 0, 4),
        SegmentStart(1, "Two.", 100, "sentence", 5, 9), AudioChunk(b"", 1, 1, 100, 50))]
    assert view.ended == 1 and view.cut == 4
    view.resumed()  # the replica died in segment 1: the new call starts with "Two." as its 0
    seen += [view.event(ev) for ev in (
        SegmentStart(0, "Two.", 0, "sentence", 1, 5), AudioChunk(b"", 0, 0, 0, 80),
        SegmentEnd(0, "Two.", 80, 9, "stop", "sentence", 1, 5),
        Summary("s2", 12.0, 80 / 24, 9, 1, 80, 30.0))]
    assert seen[5] == SegmentStart(1, "Two.", 150, "sentence", 5, 9)  # again, from its start
    assert seen[6] == AudioChunk(b"", 1, 2, 150, 80)  # sequence and offset go on
    assert seen[7].segment_index == 1 and (seen[7].text_start, seen[7].text_end) == (5, 9)
    summary = seen[8]
    assert (summary.num_segments, summary.num_samples, summary.num_tokens, summary.resumes) \
        == (2, 230, 16, 1)
    assert summary.audio_ms == pytest.approx(230 / 24)


def test_a_seeded_session_keeps_segment_i_on_seed_plus_i():
    config = pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(
        voice="tara", sampling=pb.SamplingOptions(seed=7)))
    assert resumed_config(config, 2).config.sampling.seed == 9
    assert resumed_config(config, 2).config.voice == "tara"
    assert config.config.sampling.seed == 7  # the original is not touched
    unseeded = pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(voice="tara"))
    assert not resumed_config(unseeded, 2).config.sampling.HasField("seed")


def test_resume_attempts_and_time_are_bounded():
    now = [0.0]
    a = Attempts(retries=2, timeout=None, clock=lambda: now[0], rand=lambda: 1.0,
                 resume=Resume(max_attempts=2, max_seconds=5.0))
    assert a.next_wait(unavailable=False, was_accepted=True) is None  # only UNAVAILABLE
    assert a.next_wait(unavailable=True, was_accepted=True) == 0.05
    a.advance()
    assert a.resumes == 1
    now[0] = 4.0  # the resumed call is refused (a draining replica): still the same outage
    assert a.next_wait(unavailable=True, was_accepted=False) == 0.1
    now[0] = 4.95  # a wait would pass the 5 s window
    assert a.next_wait(unavailable=True, was_accepted=False) is None
    a.advance()
    a.accepted()  # a later outage has its own window, but the attempts are the session's
    assert not a.may_retry(True, True)


# -- the clients against replicas that break a session -------------------------------------


def _pair(replicas, **kwargs):
    """Two replicas that break the first session either of them serves."""
    shared = [1]
    return [replicas(name, servicer_cls=BreakingServicer, breaks=shared, **kwargs)
            for name in ("a", "b")]


def _send_all_sync(s) -> None:
    for item in FIVE:
        s.flush(item[1]) if isinstance(item, tuple) else s.send(item)
    s.end()


async def _send_all_async(s) -> None:
    for item in FIVE:
        await (s.flush(item[1]) if isinstance(item, tuple) else s.send(item))
    await s.end()


def _session(client: str, target: str, **kwargs) -> list:
    if client == "sync":
        with Client(target, timeout=20, **kwargs) as tts:
            with tts.session() as s:
                _send_all_sync(s)
                return list(s)

    async def main():
        async with AsyncClient(target, timeout=20, **kwargs) as tts:
            async with tts.session() as s:
                await _send_all_async(s)
                return [ev async for ev in s]

    return asyncio.run(main())


def check_resumed_stream(events: list, cut_segment: int, segments: int) -> Summary:
    """The caller saw one session: every SegmentEnd once, in order; the cut segment started
    twice, every other once; sequence numbers and sample offsets without a gap; the summary
    last, covering all of it."""
    starts = [e.segment_index for e in events if isinstance(e, SegmentStart)]
    ends = [e.segment_index for e in events if isinstance(e, SegmentEnd)]
    assert ends == list(range(segments))
    assert starts == sorted(list(range(segments)) + [cut_segment])
    sequence = offset = 0
    for e in events:
        if isinstance(e, SegmentStart):
            assert e.sample_offset == offset
        elif isinstance(e, AudioChunk):
            assert (e.sequence_number, e.sample_offset) == (sequence, offset)
            sequence, offset = sequence + 1, offset + e.num_samples
    summary = events[-1]
    assert isinstance(summary, Summary) and summary.num_samples == offset
    assert summary.num_segments == segments
    return summary


@pytest.mark.parametrize("client", ["sync", "async"])
def test_a_session_broken_mid_segment_is_resumed_without_losing_text(replicas, client):
    # cut in its third segment: two have ended, and the text of the first lies wholly
    # before the cut (tests/e2e/test_resume.py cuts the second, at a real kill)
    a, b = _pair(replicas, at_segment=2)
    events = _session(client, f"{a.target},{b.target}")
    summary = check_resumed_stream(events, cut_segment=2, segments=5)
    assert summary.resumes == 1
    ends = [e for e in events if isinstance(e, SegmentEnd)]
    assert [e.text for e in ends] == ["One two.", "Three four five.", "Six seven",
                                      "Nine ten.", "Eleven."]
    # ranges are the session's, as if one replica had spoken it all
    assert [TEXT[e.text_start:e.text_end] for e in ends] == [e.text for e in ends]
    assert ends[2].flush_id == "f-2"
    calls = a.servicer.streaming_calls() + b.servicer.streaming_calls()
    assert len(calls) == 2
    first, resumed = sorted(calls, key=lambda c: c.items[0][2])
    assert first.texts[0] == "One two. "
    # from the first segment that had not ended, with the same flush id, nothing before
    assert "".join(resumed.texts) == TEXT[len("One two. Three four five."):]
    assert ("flush", "f-2") in [(k, v) for k, v, _ in resumed.items]


@pytest.mark.parametrize("client", ["sync", "async"])
def test_without_resume_the_caller_gets_the_failure(replicas, client):
    a, b = _pair(replicas)
    with pytest.raises(TTSError) as err:
        _session(client, f"{a.target},{b.target}", resume=False)
    assert err.value.code == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("client", ["sync", "async"])
def test_resume_attempts_exhausted_give_the_caller_the_error(replicas, client):
    # every session breaks after its first audio: two resumes, then the caller sees it
    replica = replicas("broken", servicer_cls=BreakingServicer, breaks=[100], at_segment=0)
    with pytest.raises(TTSError) as err:
        _session(client, replica.target, resume=Resume(max_attempts=2))
    assert err.value.code == grpc.StatusCode.UNAVAILABLE
    assert err.value.details == "the engine is gone", err.value.details
    assert len(replica.servicer.streaming_calls()) == 3


@pytest.mark.parametrize("client", ["sync", "async"])
def test_resume_time_exhausted_gives_the_caller_the_error(replicas, client):
    # the session breaks, and then its replica refuses every new call (it began draining)
    replica = replicas("breaking", servicer_cls=BreakingServicer, then_refuse=True)
    started = time.monotonic()
    with pytest.raises(TTSError) as err:
        _session(client, replica.target, resume=Resume(max_attempts=100, max_seconds=0.5))
    assert err.value.code == grpc.StatusCode.UNAVAILABLE
    assert time.monotonic() - started < 10
    assert 2 <= len(replica.servicer.calls) < 100  # stopped by the time, not the attempts


@pytest.mark.parametrize("client", ["sync", "async"])
def test_a_replica_lost_after_the_last_segment_ends_the_session_with_its_summary(replicas,
                                                                                  client):
    # all text spoken, the input ended, then the replica fails before its summary: there
    # is nothing to resume (a new call would be refused for want of text)
    a, b = _pair(replicas, at_segment=None)
    events = _session(client, f"{a.target},{b.target}")
    ends = [e.segment_index for e in events if isinstance(e, SegmentEnd)]
    assert ends == [0, 1, 2, 3, 4]
    summary = events[-1]
    assert isinstance(summary, Summary) and summary.resumes == 0
    assert summary.num_segments == 5
    assert summary.num_samples == sum(e.num_samples for e in events if isinstance(e, AudioChunk))
    assert len(a.servicer.streaming_calls() + b.servicer.streaming_calls()) == 1
