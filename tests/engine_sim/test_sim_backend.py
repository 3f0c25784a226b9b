"""SimBackend: grammar-legal streams, determinism per seed, pacing from the profile (fake clock)."""

import dataclasses

import numpy as np
import pytest

from orpheus_svc.core.generation import Generation
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.scheduler import Scheduler
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.grammar import FrameParser
from orpheus_svc.core.step import StepPlan
from orpheus_svc.core.tokens import END_OF_SPEECH_ID, FRAME_TOKENS
from orpheus_svc.engine.sim.backend import SimBackend
from orpheus_svc.engine.sim.encode import sim_encode
from orpheus_svc.engine.sim.profiles import PROFILES, get_profile

from tests.core.gen_helpers import set_counters

H100 = get_profile("h100-fp8")


class FakeClock:
    """Time advances only by sleep() and by explicit host work (advance)."""

    def __init__(self):
        self.t = 100.0
        self.sleeps = []

    def __call__(self):
        return self.t

    def sleep(self, s):
        assert s >= 0
        self.sleeps.append(s)
        self.t += s

    def advance(self, s):
        self.t += s


def make_gen(gen_id, seed=7, prompt_len=40, max_tokens=700, expected_frames=30):
    req = GenerationRequest(session_id=f"s{gen_id}", segment_index=0,
                            prompt_ids=tuple(range(prompt_len)), max_tokens=max_tokens,
                            expected_frames=expected_frames)
    return Generation(gen_id=gen_id, request=req, arrival=0.0, seed=seed, slot=gen_id)


def _plan(step, prefill=(), decode=()):
    """A plan of the generations' rows, as the scheduler would hand it over."""
    return StepPlan(step, tuple(g.row() for g in prefill), tuple(g.row() for g in decode))


def backend(clock=None, **kw):
    clock = clock or FakeClock()
    return SimBackend(H100, num_slots=64, max_seq_len=4096, clock=clock, sleep=clock.sleep, **kw)


def run_to_end(be, gens, max_steps=10_000):
    """Drive gens through the real scheduler's update(); returns tokens per gen."""
    sched = Scheduler(SlotPool(64, 4096), SchedulerSettings(max_batch_size=64))
    for g in gens:
        g.slot = None
        sched.add(g)
    out = {g.gen_id: [] for g in gens}
    for _ in range(max_steps):
        if not sched.has_work:
            break
        plan = sched.schedule(0.0)
        result = be.step(plan)
        for gid, toks in result.tokens.items():
            out[gid].extend(toks)
        if result.decode_tokens is not None:  # the decode rows' tokens, in plan order
            for gid, tok in zip(plan.decode.gen_ids.tolist(), result.decode_tokens.tolist()):
                out[gid].append(tok)
        sched.update(plan, result, 0.0)
    assert not sched.has_work
    assert sched.stats().grammar_violations == 0
    return out


def test_streams_follow_the_audio_grammar_and_end_with_stop_at_a_frame_boundary():
    be = backend()
    for seed in range(20):
        toks = be.token_stream(make_gen(1, seed=seed).row())
        assert toks[-1] == END_OF_SPEECH_ID
        audio = toks[:-1]
        assert len(audio) % FRAME_TOKENS == 0 and len(audio) >= FRAME_TOKENS
        frames = FrameParser().feed(toks)  # raises on any illegal id or a mid-frame stop
        assert len(frames) == len(audio) // FRAME_TOKENS


def test_through_the_scheduler_every_generation_finishes_by_stop_without_violations():
    gens = [make_gen(i, seed=i) for i in range(1, 9)]
    out = run_to_end(backend(), gens)
    for g in gens:
        assert g.finish_reason == "stop"
        assert out[g.gen_id][-1] == END_OF_SPEECH_ID


def test_max_tokens_cuts_the_stream_and_the_scheduler_ends_it_by_length():
    g = make_gen(1, max_tokens=14, expected_frames=100)
    be = backend()
    out = run_to_end(be, [g])
    assert len(out[1]) == 14 and END_OF_SPEECH_ID not in out[1]
    assert g.finish_reason == "length"
    assert be.stats()["live_generations"] == 0


def test_same_seed_same_tokens_whatever_the_batch():
    alone = run_to_end(backend(), [make_gen(1, seed=42)])[1]
    crowd = [make_gen(i, seed=100 + i) for i in range(2, 20)] + [make_gen(1, seed=42)]
    together = run_to_end(backend(), crowd)[1]
    assert alone == together
    other = run_to_end(backend(), [make_gen(1, seed=43)])[1]
    assert other != alone


def test_lengths_are_proportional_to_expected_frames():
    be = backend(length_sigma=0.2)
    def mean_frames(expected):
        n = [len(be.token_stream(make_gen(1, seed=s, expected_frames=expected, max_tokens=10**6).row()))
             for s in range(200)]
        return (np.mean(n) - 1) / FRAME_TOKENS
    short, long_ = mean_frames(20), mean_frames(200)
    assert 0.9 * 20 < short < 1.15 * 20
    assert 8 < long_ / short < 12


def test_without_expected_frames_the_length_is_inferred_from_the_prompt():
    be = backend(length_sigma=0.0)
    text = "x" * 300  # 300 chars ~ 20 s of speech at 15 chars/s ~ 234 frames
    g = make_gen(1, expected_frames=0, prompt_len=len(sim_encode(text)) + 7, max_tokens=10**6)
    frames = (len(be.token_stream(g.row())) - 1) / FRAME_TOKENS
    assert 180 < frames < 290


def test_step_period_equals_the_model_when_the_host_is_faster():
    clock = FakeClock()
    be = backend(clock)
    gens = [make_gen(i, seed=i, expected_frames=50) for i in range(1, 33)]
    plan = _plan(1, prefill=gens)
    be.step(plan)
    for g in gens:
        set_counters(g, num_generated=1)
    d_prefill = H100.step_seconds(0, 0, 32, 32 * 40, 32 * 40 * 40)
    assert clock.sleeps[-1] == pytest.approx(d_prefill)  # idle start: the whole step
    t_end = clock.t
    host = 0.3 * H100.decode_seconds(32, 41)
    clock.advance(host)  # scheduler/update work: overlaps the next GPU step
    be.step(_plan(2, decode=gens))
    d = H100.step_seconds(32, 32 * 41)
    assert clock.t - t_end == pytest.approx(d)  # period = d, not d + host
    assert be.stats()["host_bound_steps"] == 0


def _four_live(clock):
    """A backend with four generations just prefilled (one token each), and the modelled
    length of their next decode step."""
    be = backend(clock)
    gens = [make_gen(i, seed=i, expected_frames=50) for i in range(1, 5)]
    be.step(_plan(1, prefill=gens))
    for g in gens:
        set_counters(g, num_generated=1)
    return be, gens, H100.step_seconds(4, 4 * 41)


def test_a_slow_host_sets_the_period_and_is_counted():
    clock = FakeClock()
    be, gens, d = _four_live(clock)
    t_end = clock.t
    clock.advance(3 * d)
    be.step(_plan(2, decode=gens))
    assert clock.t - t_end == pytest.approx(3 * d)  # nothing added on top of the host time
    s = be.stats()
    assert s["host_bound_steps"] == 1
    assert s["host_excess_s"] == pytest.approx(2 * d)


def test_a_late_wake_up_is_told_apart_from_slow_host_work():
    clock = FakeClock()
    be, gens, d = _four_live(clock)
    oversleep = [1.5 * d]  # the next return from sleep comes this late (the GIL, the OS)
    real_sleep = clock.sleep

    def late_sleep(s):
        real_sleep(s)
        clock.advance(oversleep.pop() if oversleep else 0.0)
    be._sleep = late_sleep
    be.step(_plan(2, decode=gens))  # sleeps, and is back 1.5 d late
    s = be.stats()
    assert s["late_wakes"] == 1 and s["late_wake_s"] == pytest.approx(1.5 * d)
    assert s["max_late_wake_s"] == pytest.approx(1.5 * d)
    for g in gens:
        set_counters(g, num_generated=2)
    clock.advance(0.25 * d)  # then a quarter step of its own work: fine on its own
    be.step(_plan(3, decode=gens))
    s = be.stats()
    d3 = H100.step_seconds(4, 4 * 42)
    assert s["host_bound_steps"] == 1 and s["host_bound_by_wake_steps"] == 1
    assert s["host_excess_s"] == pytest.approx(1.75 * d - d3)
    assert s["host_excess_wake_s"] == pytest.approx(s["host_excess_s"])  # all of it the wake's
    for g in gens:
        set_counters(g, num_generated=3)
    clock.advance(3 * d)  # on time back, then slow work: none of that excess is the wake's
    be.step(_plan(4, decode=gens))
    s = be.stats()
    assert s["host_bound_steps"] == 2 and s["host_bound_by_wake_steps"] == 1
    assert s["host_excess_wake_s"] == pytest.approx(1.75 * d - d3)
    assert s["late_wakes"] == 1


def test_after_idle_the_step_starts_when_called():
    clock = FakeClock()
    be = backend(clock)
    g = make_gen(1, max_tokens=1)
    be.step(_plan(1, prefill=[g]))  # finishes at once (max_tokens 1)
    clock.advance(5.0)  # idle
    g2 = make_gen(2)
    t0 = clock.t
    be.step(_plan(2, prefill=[g2]))
    assert clock.t - t0 == pytest.approx(H100.step_seconds(0, 0, 1, 40, 1600))
    assert be.stats()["idle_starts"] == 2


def test_release_forgets_cancelled_generations():
    be = backend()
    gens = [make_gen(i) for i in (1, 2)]
    be.step(_plan(1, prefill=gens))
    assert be.stats()["live_generations"] == 2
    be.release([gens[0].gen_id])
    assert be.stats()["live_generations"] == 1


def test_sim_encode_gives_llama_like_lengths_with_bos():
    text = "Hello there, how are you doing today? I hope everything is fine."
    ids = sim_encode(text)
    assert ids[0] == 128000
    assert len(text) / 6 < len(ids) - 1 < len(text) / 2.5
    assert sim_encode(text) == ids
    assert all(0 <= i < 128000 for i in ids[1:])


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_is_usable(name):
    be = SimBackend(get_profile(name), num_slots=4, max_seq_len=256, clock=FakeClock(),
                    sleep=lambda s: None)
    gens = [dataclasses.replace(make_gen(i), slot=i) for i in range(1, 4)]
    out = be.step(_plan(1, prefill=gens))
    assert set(out.tokens) == {1, 2, 3}


def test_a_pooled_prefix_costs_its_copy_instead_of_its_prefill():
    # a 2,000-token reference prefix and a 40-token turn: with the prefix held, the step
    # pays the turn's prefill (attending to the prefix) and the copy; without, all of it
    prefix = tuple(range(1000, 3000))
    req = GenerationRequest(session_id="s1", segment_index=0,
                            prompt_ids=prefix + tuple(range(40)), max_tokens=700,
                            expected_frames=30, prefix_len=len(prefix))
    costs = {}
    for held in (False, True):
        clock = FakeClock()
        be = backend(clock, prefix_pool_tokens=4096)
        if held:
            be.add_prefix(prefix)
            assert clock.sleeps[-1] == pytest.approx(H100.step_seconds(0, 0, 1, 2000, 2000**2))
            assert be.holds_prefix(prefix) and be.capabilities.prefix_pool_tokens == 4096
        g = Generation(gen_id=1, request=req, arrival=0.0, seed=1, slot=1)
        be.step(_plan(1, prefill=[g]))
        costs[held] = clock.sleeps[-1]
    n = 2040
    assert costs[False] == pytest.approx(H100.step_seconds(0, 0, 1, n, n * n))
    assert costs[True] == pytest.approx(H100.step_seconds(0, 0, 1, 40, n * n - 2000**2)
                                        + H100.prefix_copy_seconds(2000))
    assert costs[True] < costs[False]
    be.drop_prefix(prefix)
    assert not be.holds_prefix(prefix)
