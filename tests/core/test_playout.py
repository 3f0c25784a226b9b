"""The scheduler's playout clock as the flusher gets it: PlayoutSnapshot per generation."""

import pytest

from orpheus_svc.core.playout import PlayoutSnapshot, SessionPlayout
from orpheus_svc.core.tokens import FRAME_SECONDS, SAMPLE_RATE, SAMPLES_PER_FRAME

from .sched_helpers import make_gen, make_scheduler, run_step


def frame_steps(s, now):
    """One frame for every running generation: 7 one-token steps at time `now`. Returns
    the playout snapshots the steps handed to the flusher (StepOutput.pushes), the last of
    each generation's, by generation."""
    handed = {}
    for _ in range(7):
        _, out = run_step(s, now)
        handed.update((p.gen_id, p.playout) for p in out.pushes if p.playout is not None)
    return handed


def test_snapshot_arithmetic_counts_only_the_samples_sent():
    snap = PlayoutSnapshot(starts_at=10.0)
    # heard in 1 s: everything sent is still ahead of the listener, plus nothing more
    assert snap.buffered_samples(4096, now=9.0) == 4096 + SAMPLE_RATE
    assert snap.buffered_samples(4096, now=10.0) == 4096
    # past what it was sent: dry now, whatever the scheduler counts as generated
    assert snap.buffered_samples(4096, now=10.5) == 4096 - SAMPLE_RATE / 2
    assert snap.dry_at(4096) == pytest.approx(10.0 + 4096 / SAMPLE_RATE)
    with pytest.raises(AttributeError):
        snap.starts_at = 0.0  # frozen: the flusher holds it, the scheduler makes new ones


def test_head_segment_snapshot_comes_with_the_first_frames_and_only_again_when_it_moves():
    s = make_scheduler()
    gen = make_gen(session="a")
    s.add(gen)
    snap = frame_steps(s, 1.0)[gen.gen_id]
    assert snap.starts_at == pytest.approx(1.0)  # heard from when its first frame exists
    for k in range(1, 5):  # faster than real time: playing on, no gap, nothing moves
        assert gen.gen_id not in frame_steps(s, 1.0 + 0.01 * k)
        assert s.playout_update(gen, 1.0 + 0.01 * k) is None
    # generation stalls past the audio made so far (5 frames, 0.43 s): the listener ran dry;
    # playback resumes with the next frame, so this generation's start moves by the gap
    late = 1.0 + 5 * FRAME_SECONDS + 0.2
    moved = frame_steps(s, late)[gen.gen_id]
    assert moved.starts_at == pytest.approx(1.0 + 0.2)
    # the scheduler's buffer (6 frames from the new start) is what the flusher reaches only
    # once it has sent all 6 frames
    assert moved.buffered_samples(6 * SAMPLES_PER_FRAME, late) == pytest.approx(
        s.buffered_seconds("a", late) * SAMPLE_RATE)


def test_a_later_segment_hears_when_the_one_before_ends_short_of_its_estimate():
    s = make_scheduler(slots=4, batch=4, aging=10_000)
    seg0 = make_gen(session="a", segment=0, expected_frames=20, max_tokens=7 * 3)
    seg1 = make_gen(session="a", segment=1, expected_frames=20)
    s.add(seg0)
    s.add(seg1)
    handed = frame_steps(s, 0.0)  # both make their first frame at t=0
    first0, first1 = handed[seg0.gen_id], handed[seg1.gen_id]
    assert first0.starts_at == pytest.approx(0.0)
    # estimate: after seg0's 20 expected frames
    assert first1.starts_at == pytest.approx(20 * FRAME_SECONDS)
    assert s.playout_moved(0.0) == []
    assert seg1.gen_id not in frame_steps(s, 0.01)  # seg0 within its estimate: nothing moved
    assert s.playout_update(seg1, 0.01) is None
    handed = frame_steps(s, 0.02)
    assert seg0.finish_reason == "length" and seg0.num_frames == 3  # 17 frames short
    # seg1's listener gets to it after 3 frames, not 20: the flusher hears it in the step
    # that ended seg0 (with seg1's frames, or alone: parked beyond a playout horizon)
    assert list(handed) == [seg1.gen_id]
    assert handed[seg1.gen_id].starts_at == pytest.approx(3 * FRAME_SECONDS)
    assert s.playout_moved(0.03) == []
    assert s.playout_update(seg1, 0.03) is None  # handed out already
    assert s.playout_update(seg0, 0.03) is None  # ended: no clock any more


def test_a_segment_running_past_its_estimate_moves_the_ones_behind_it():
    s = make_scheduler(slots=4, batch=4, aging=10_000)
    seg0 = make_gen(session="a", segment=0, expected_frames=2)
    seg1 = make_gen(session="a", segment=1, expected_frames=2)
    s.add(seg0)
    s.add(seg1)
    assert frame_steps(s, 0.0)[seg1.gen_id].starts_at == pytest.approx(2 * FRAME_SECONDS)
    # seg0 at 2 of 2 frames: at least one more is counted
    assert frame_steps(s, 0.0)[seg1.gen_id].starts_at == pytest.approx(3 * FRAME_SECONDS)
    assert frame_steps(s, 0.0)[seg1.gen_id].starts_at == pytest.approx(4 * FRAME_SECONDS)


def test_a_later_segment_that_ends_first_is_heard_after_the_one_before_it():
    s = make_scheduler(slots=4, batch=4, aging=10_000)
    seg0 = make_gen(session="a", segment=0, expected_frames=4, max_tokens=7 * 4)
    seg1 = make_gen(session="a", segment=1, expected_frames=2, max_tokens=7 * 2)
    seg2 = make_gen(session="a", segment=2, expected_frames=20)
    for g in (seg0, seg1, seg2):
        s.add(g)
    handed = {}  # what the flusher holds: the last snapshot handed of each
    for _ in range(3):
        handed.update(frame_steps(s, 0.0))
    assert seg1.finish_reason == "length" and seg0.finish_reason is None
    assert s.buffered_seconds("a", 0.0) == pytest.approx(3 * FRAME_SECONDS)  # seg0's only
    # seg2 is heard after seg0's 4 frames (one still to come) and seg1's 2, which ended first
    assert handed[seg2.gen_id].starts_at == pytest.approx(6 * FRAME_SECONDS)
    handed.update(frame_steps(s, 0.0))
    assert seg0.finish_reason == "length"
    # seg0's 4 frames, then seg1's 2, then the 4 that seg2 made meanwhile
    assert s.buffered_seconds("a", 0.0) == pytest.approx(10 * FRAME_SECONDS)
    assert handed[seg2.gen_id].starts_at == pytest.approx(6 * FRAME_SECONDS)


def two_segments_with_frames(n0, n1):
    """A session's segments 0 (the head) and 1, with n0 and n1 frames made at t=0."""
    session = SessionPlayout("a")
    seg0, seg1 = make_gen(session="a", segment=0), make_gen(session="a", segment=1)
    session.add(seg0)
    session.add(seg1)
    session.on_frames(seg0, n0, 0.0)
    session.on_frames(seg1, n1, 0.0)
    return session, seg0, seg1


@pytest.mark.parametrize("first", [0, 1])
def test_segments_ending_in_one_step_play_the_same_whichever_is_removed_first(first):
    """The scheduler settles a step's ends in slot order, not segment order."""
    session, seg0, seg1 = two_segments_with_frames(3, 2)
    for g in ([seg0, seg1] if first == 0 else [seg1, seg0]):
        session.remove(g, 0.0)
    assert session.playout_end == pytest.approx(5 * FRAME_SECONDS)


def test_a_cancelled_later_segment_adds_nothing_to_the_clock():
    session, seg0, seg1 = two_segments_with_frames(3, 2)
    session.remove(seg1, 0.0, heard=False)
    session.remove(seg0, 0.0)
    assert session.playout_end == pytest.approx(3 * FRAME_SECONDS)
