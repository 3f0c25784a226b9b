"""Parking generations beyond the playout horizon changes the scheduler's work, not its choices.

The reference below judges every running generation at every step, as the scheduler did
before parking; both run the same random sessions and must make identical plans.
"""

import random

from orpheus_svc.core.generation import Generation
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.scheduler import Scheduler
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.step import StepResult
from orpheus_svc.core.slots import SlotPool

from .sched_helpers import ids, legal_token


class Unparked(Scheduler):
    """Records wake-ups (for idle_s) but keeps every generation a candidate."""

    def _park(self, gen, wake):
        self._parking.park(gen.gen_id, wake)


class Counting:
    def __init__(self, sched):
        self.calls = 0
        inner = sched._priority

        def counted(gen, now):
            self.calls += 1
            return inner(gen, now)

        sched._priority = counted


def make(cls, horizon, batch):
    return cls(SlotPool(48, 4096), SchedulerSettings(
        max_batch_size=batch, max_waiting=64, aging_steps=16, max_ahead_seconds=horizon))


def gen(gid, session, segment, arrival, expected, max_tokens):
    req = GenerationRequest(session_id=session, segment_index=segment,
                            prompt_ids=tuple(range(6)), max_tokens=max_tokens,
                            expected_frames=expected)
    return Generation(gen_id=gid, request=req, arrival=arrival, seed=gid)


def drive(seed, horizon, batch, steps=3000):
    """Run both schedulers through the same random life; return their priority counts."""
    rng = random.Random(seed)
    ours, ref = make(Scheduler, horizon, batch), make(Unparked, horizon, batch)
    count_ours, count_ref = Counting(ours), Counting(ref)
    now, next_id, segments = 0.0, 1, {}
    for _ in range(steps):
        now += rng.choice([0.0005, 0.002, 0.01, 0.05, 0.3])
        if rng.random() < 0.08 and len(segments) < 40:  # a session or its next segment
            sid = f"s{rng.randrange(12)}"
            seg = segments.get(sid, -1) + 1
            segments[sid] = seg
            expected, max_tokens = rng.randrange(5, 60), rng.choice([70, 140, 280, 700])
            for sched in (ours, ref):
                sched.add(gen(next_id, sid, seg, now, expected, max_tokens))
            next_id += 1
        if rng.random() < 0.01:
            live = [g.gen_id for g in ours.running()]
            if live:
                victim = rng.choice(live)
                assert ours.cancel(victim, now) == ref.cancel(victim, now) is None
        plans = [sched.schedule(now) for sched in (ours, ref)]
        a, b = plans
        assert [g.gen_id for g in a.prefill] == [g.gen_id for g in b.prefill]
        assert [g.gen_id for g in a.decode] == [g.gen_id for g in b.decode]
        assert [g.gen_id for g in a.admitted] == [g.gen_id for g in b.admitted]
        assert [g.gen_id for g in a.released] == [g.gen_id for g in b.released]
        assert abs(a.idle_s - b.idle_s) < 1e-9
        stop = {g.gen_id for g in a.rows if rng.random() < 0.02}
        for sched, plan in zip((ours, ref), plans):
            tokens = {g.gen_id: [legal_token(g, g.gen_id in stop)] for g in plan.rows}
            sched.update(plan, StepResult(tokens), now)
        assert ours.stats(now) == ref.stats(now)
    for sched in (ours, ref):
        assert sched.pool.num_used == len(sched.running())
    return count_ours.calls, count_ref.calls


def test_parking_makes_the_same_plans_as_judging_everything_every_step():
    for seed in range(4):
        drive(seed, horizon=0.5, batch=rng_batch(seed))


def rng_batch(seed):
    return [4, 8, 48, 16][seed % 4]


def test_without_a_horizon_nothing_is_parked_and_plans_match():
    drive(11, horizon=0.0, batch=8)


def test_parking_saves_most_of_the_judging_when_sessions_run_far_ahead():
    ours, ref = drive(5, horizon=0.2, batch=48)
    assert ours < 0.5 * ref, (ours, ref)


def test_a_parked_segment_is_judged_again_when_the_one_before_it_ends():
    s = make(Scheduler, horizon=0.3, batch=4)
    head = gen(1, "a", 0, 0.0, expected=200, max_tokens=2800)
    later = gen(2, "a", 1, 0.0, expected=200, max_tokens=2800)
    s.add(head)
    s.add(later)
    now = 0.0
    while head.num_frames < 2:  # both run until `later` is judged far ahead (200-frame estimate)
        plan = s.schedule(now)
        s.update(plan, StepResult({g.gen_id: [legal_token(g)] for g in plan.rows}), now)
        now += 0.001
    assert later.gen_id in s._parking and head.gen_id in ids(s.schedule(now).rows)
    s.cancel(head.gen_id, now)  # the estimate that kept `later` far ahead is gone
    plan = s.schedule(now)
    assert later.gen_id in ids(plan.rows)  # at once, not at its old wake-up time
