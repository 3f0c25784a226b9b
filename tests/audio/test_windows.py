"""Window arithmetic and settings validation: pure integers, no codec."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from orpheus_svc.audio.settings import FRAME, HOP, FlusherSettings
from orpheus_svc.audio.windows import (
    Window, chunk_target, fixed_chunk_end, plan_fixed_windows, plan_windows, ready_end,
)

S = FlusherSettings(first_chunk_samples=1024, left_context_samples=3 * HOP,
                    lookahead_samples=6 * HOP, min_chunk_samples=FRAME,
                    max_chunk_samples=8 * FRAME, chunk_growth=1.0, max_decode_frames=24)


def test_first_frame_alone_releases_the_head_of_frame_0():
    assert plan_windows(1, False, 0, S) == [Window(0, 1024, 0, 4)]


def test_no_frames_nothing_due():
    assert plan_windows(0, False, 0, S) == []
    assert ready_end(0, False, S) == 0


def test_first_chunk_off_waits_for_the_lookahead():
    s = dataclasses.replace(S, first_chunk_samples=0)
    assert plan_windows(1, False, 0, s) == []
    # 2 frames = 8 steps, lookahead 6 steps: 2 steps (1024 samples) are ready
    assert plan_windows(2, False, 0, s) == [Window(0, 1024, 0, 8)]


def test_steady_chunk_has_left_context_and_lookahead():
    # 9 frames = 36 steps; ready up to step 30; emitted up to step 12 (target 6144 <= 9216)
    (w,) = plan_windows(9, False, 12 * HOP, S)
    assert (w.start, w.end) == (12 * HOP, 30 * HOP)
    assert (w.step_lo, w.step_hi) == (9, 36)
    assert (w.frame_lo, w.frame_hi) == (2, 9)
    assert w.keep == slice(3 * HOP, 21 * HOP)


def test_small_chunks_wait_until_worth_a_decode():
    emitted = 4 * FRAME  # target = max(min_chunk, 4 frames * growth 1) = 4 frames
    assert chunk_target(emitted, S) == 4 * FRAME
    n = 4 + 1  # 5 frames: ready = 5*2048 - 3072 = 7168, only 1 frame new
    assert plan_windows(n, False, emitted, S) == []
    # 4 new frames beyond the lookahead make it due
    assert plan_windows(10, False, emitted, S)[0].end == 10 * FRAME - 6 * HOP


def test_hungry_listener_gets_whatever_is_ready():
    emitted = 4 * FRAME
    assert plan_windows(6, False, emitted, S) == []  # 2048 new < target 8192
    (w,) = plan_windows(6, False, emitted, S, hungry=True)
    assert (w.start, w.end) == (emitted, 6 * FRAME - 6 * HOP)


def test_a_listener_with_a_chunk_ahead_gets_no_early_first_chunk():
    # a later segment: its listener has 8 frames (max_chunk) to play before it
    assert plan_windows(1, False, 0, S, ahead=8 * FRAME) == []
    # with less than a chunk ahead the head of frame 0 goes at once, as for a first segment
    assert plan_windows(1, False, 0, S, ahead=8 * FRAME - 1) == [Window(0, 1024, 0, 4)]
    # withheld, it goes as an ordinary chunk of the target's size, decoded with lookahead
    assert plan_windows(9, False, 0, S, ahead=20 * FRAME) == []  # 7.5 frames ready < 8
    w = plan_windows(10, False, 0, S, ahead=20 * FRAME)[0]
    assert (w.start, w.end) == (0, 8 * FRAME) and w.step_hi > w.end // HOP


def test_chunks_grow_with_what_the_listener_has_ahead():
    emitted = 2 * FRAME  # target from emitted alone: 2 frames
    assert plan_windows(6, False, emitted, S) != []  # 2.5 frames new: due
    assert plan_windows(6, False, emitted, S, ahead=6 * FRAME) == []  # target 6 frames
    assert plan_windows(6, False, emitted, S, ahead=6 * FRAME, hungry=True) != []
    assert plan_windows(6, True, emitted, S, ahead=6 * FRAME) != []  # the last chunk goes


def test_chunk_target_is_clamped():
    assert chunk_target(0, S) == FRAME
    assert chunk_target(100 * FRAME, S) == 8 * FRAME


def test_final_flushes_the_tail_without_lookahead():
    (w,) = plan_windows(7, True, 5 * FRAME, S)
    assert (w.start, w.end) == (5 * FRAME, 7 * FRAME)
    assert w.step_hi == 28 and w.step_lo == 20 - 3


def test_final_after_everything_emitted_plans_nothing():
    assert plan_windows(3, True, 3 * FRAME, S) == []


def test_backlog_is_cut_into_equal_max_chunks():
    ws = plan_windows(40, False, 2 * FRAME, S)
    assert [w.end - w.start for w in ws[:-1]] == [8 * FRAME] * (len(ws) - 1)
    assert all(w.num_steps == 3 + 32 + 6 for w in ws[:-1])
    assert [w.start for w in ws[1:]] == [w.end for w in ws[:-1]]


@hsettings(max_examples=150, deadline=None)
@given(
    arrivals=st.lists(st.integers(0, 9), min_size=0, max_size=25),
    first=st.sampled_from([0, 512, 1024, 2048]),
    left=st.integers(0, 12), look=st.integers(0, 12),
    lo=st.integers(1, 5 * FRAME), hi_frames=st.integers(1, 20),
    growth=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
    hungry_every=st.integers(1, 4),
)
def test_any_arrival_pattern_emits_every_sample_once_in_order(arrivals, first, left, look, lo,
                                                              hi_frames, growth, hungry_every):
    s = FlusherSettings(first_chunk_samples=first, left_context_samples=left * HOP,
                        lookahead_samples=look * HOP, min_chunk_samples=min(lo, hi_frames * FRAME),
                        max_chunk_samples=hi_frames * FRAME, chunk_growth=growth)
    n = emitted = 0
    chunks = []
    for i, burst in enumerate(arrivals + [0]):
        n += burst
        final = i == len(arrivals)
        for w in plan_windows(n, final, emitted, s, hungry=i % hungry_every == 0):
            assert w.start == emitted < w.end <= n * FRAME
            assert w.end - w.start <= s.max_chunk_samples
            assert 0 <= w.step_lo and w.step_hi <= 4 * n
            assert w.step_lo * HOP <= w.start and w.end <= w.step_hi * HOP
            assert w.frame_lo * 4 <= w.step_lo and w.step_hi <= w.frame_hi * 4
            # contexts are as asked unless the utterance edge (exact there) cuts them
            assert w.step_lo == max(0, w.start // HOP - left)
            if not final:
                assert w.end <= max(n * FRAME - look * HOP, min(first, n * FRAME))
            emitted = w.end
            chunks.append(w)
        if n and emitted == 0 and not final and first:
            pytest.fail("frames exist but the first chunk was not released")
    assert emitted == n * FRAME


@pytest.mark.parametrize("field, value", [
    ("first_chunk_samples", -1), ("first_chunk_samples", 2049), ("first_chunk_samples", 1.5),
    ("left_context_samples", 100), ("left_context_samples", -512),
    ("lookahead_samples", 513), ("min_chunk_samples", 0),
    ("max_chunk_samples", 1000), ("max_chunk_samples", 512),  # 512 < min_chunk 2048
    ("chunk_growth", -1.0), ("chunk_growth", float("nan")), ("chunk_growth", True),
    ("low_water_samples", -1), ("max_decode_frames", -1),
    ("max_iteration_s", 0), ("max_iteration_s", float("inf")), ("max_iteration_s", True),
])
def test_bad_settings_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"FlusherSettings.{field} "):
        dataclasses.replace(FlusherSettings(), **{field: value})


@hsettings(max_examples=100, deadline=None)
@given(
    arrivals=st.lists(st.integers(0, 9), min_size=1, max_size=25),
    other=st.lists(st.integers(0, 9), min_size=1, max_size=25),
    first=st.sampled_from([0, 512, 2048]), look=st.integers(0, 12),
    growth=st.sampled_from([0.0, 1.0, 2.0]),
)
def test_a_fixed_plan_cuts_the_same_windows_however_the_frames_arrive(arrivals, other, first,
                                                                      look, growth):
    """A seeded session's windows (plan_fixed_windows, issue 29 item 2) depend on its frames
    only, never on when they came or how the flusher was paced: so the same tokens decode
    to the same windows, each exactly once and in order, with the real lookahead."""
    s = FlusherSettings(first_chunk_samples=first, lookahead_samples=look * HOP,
                        chunk_growth=growth)
    total = sum(arrivals)
    # the same total number of frames, arriving in another pattern
    pattern = [min(b, total - sum(other[:i])) for i, b in enumerate(other)]
    pattern = [b for b in pattern if b > 0] + [max(0, total - sum(max(b, 0) for b in pattern))]

    def windows(bursts):
        n = emitted = 0
        out = []
        for i, burst in enumerate(bursts + [0]):
            n += burst
            for w in plan_fixed_windows(n, i == len(bursts), emitted, s):
                assert w.start == emitted < w.end <= n * FRAME
                if i < len(bursts) and w.start:  # before the end: its lookahead is there
                    assert w.step_hi == -(-w.end // HOP) + look
                emitted = w.end
                out.append(w)
        assert emitted == n * FRAME
        return out

    assert windows(arrivals) == windows(pattern) == windows([total])


@hsettings(max_examples=200, deadline=None)
@given(start=st.integers(1, 400_000), look=st.integers(0, 12),
       growth=st.sampled_from([0.0, 0.5, 1.0, 2.0]))
def test_a_fixed_chunk_is_due_the_moment_a_frame_completes(start, look, growth):
    """Issue 33: a seeded chunk that ended a part of a frame past where a frame completes
    waited that part for nothing, and the listener ran dry after its first chunk (the
    chunk after the head of frame 0 needed 3 frames instead of 2). Its lookahead now ends
    on a frame boundary, within the chunk target of its start unless no such end exists."""
    s = FlusherSettings(lookahead_samples=look * HOP, chunk_growth=growth)
    end = fixed_chunk_end(start, s)
    assert end > start
    assert (end + s.lookahead_samples) % FRAME == 0
    if end - start > FRAME:  # not the first end past the start: within the target
        assert end - start <= chunk_target(start, s)
    assert end - start <= max(chunk_target(start, s), FRAME)


def test_the_chunk_after_the_first_is_due_with_two_frames():
    s = FlusherSettings()  # first chunk 512 samples, lookahead 5 steps (1.25 frames)
    assert [w.end for w in plan_fixed_windows(1, False, 0, s)] == [512]
    assert [w.end for w in plan_fixed_windows(2, False, 512, s)] == [1536]
