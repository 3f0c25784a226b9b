"""The scheduler's playout clock as the flusher gets it: PlayoutSnapshot per generation."""

import pytest

from orpheus_svc.core.playout import PlayoutSnapshot
from orpheus_svc.core.tokens import FRAME_SECONDS, SAMPLE_RATE, SAMPLES_PER_FRAME

from .sched_helpers import make_gen, make_scheduler, run_step


def frame_steps(s, now):
    """One frame for every running generation: 7 one-token steps at time `now`."""
    for _ in range(7):
        run_step(s, now)


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
    frame_steps(s, 1.0)
    snap = s.playout_update(gen, 1.0)
    assert snap.starts_at == pytest.approx(1.0)  # heard from when its first frame exists
    for k in range(1, 5):  # faster than real time: playing on, no gap, nothing moves
        frame_steps(s, 1.0 + 0.01 * k)
        assert s.playout_update(gen, 1.0 + 0.01 * k) is None
    # generation stalls past the audio made so far (5 frames, 0.43 s): the listener ran dry;
    # playback resumes with the next frame, so this generation's start moves by the gap
    late = 1.0 + 5 * FRAME_SECONDS + 0.2
    frame_steps(s, late)
    moved = s.playout_update(gen, late)
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
    frame_steps(s, 0.0)  # both make their first frame at t=0
    first0, first1 = s.playout_update(seg0, 0.0), s.playout_update(seg1, 0.0)
    assert first0.starts_at == pytest.approx(0.0)
    # estimate: after seg0's 20 expected frames
    assert first1.starts_at == pytest.approx(20 * FRAME_SECONDS)
    assert s.playout_moved(0.0) == []
    frame_steps(s, 0.01)
    assert s.playout_update(seg1, 0.01) is None  # seg0 within its estimate: nothing moved
    frame_steps(s, 0.02)
    assert seg0.finish_reason == "length" and seg0.num_frames == 3  # 17 frames short
    # seg1's listener gets to it after 3 frames, not 20: the flusher must hear it now, even
    # if seg1 makes no frames for a while (parked beyond a playout horizon)
    (gen, snap), = s.playout_moved(0.02)
    assert gen is seg1 and snap.starts_at == pytest.approx(3 * FRAME_SECONDS)
    assert s.playout_moved(0.03) == []
    assert s.playout_update(seg1, 0.03) is None  # handed out already
    assert s.playout_update(seg0, 0.03) is None  # ended: no clock any more


def test_a_segment_running_past_its_estimate_moves_the_ones_behind_it():
    s = make_scheduler(slots=4, batch=4, aging=10_000)
    seg0 = make_gen(session="a", segment=0, expected_frames=2)
    seg1 = make_gen(session="a", segment=1, expected_frames=2)
    s.add(seg0)
    s.add(seg1)
    frame_steps(s, 0.0)
    assert s.playout_update(seg1, 0.0).starts_at == pytest.approx(2 * FRAME_SECONDS)
    frame_steps(s, 0.0)  # seg0 at 2 of 2 frames: at least one more is counted
    assert s.playout_update(seg1, 0.0).starts_at == pytest.approx(3 * FRAME_SECONDS)
    frame_steps(s, 0.0)
    assert s.playout_update(seg1, 0.0).starts_at == pytest.approx(4 * FRAME_SECONDS)
