"""The shortcut for "everything runs" (Scheduler._everything_runs) changes the scheduler's
work, not its choices: the same rows run, prefill rows in the same order, and every
generation's steps_waited is the same as when every candidate is keyed and sorted.

Decode rows may come in another order on the shortcut (candidate order): no backend reads
it (torch re-sorts by slot; sim and trtllm key by gen_id), so the decode rows are compared
as sets, and the prefill rows (trtllm submits them in this order) as lists.
"""

import random

from orpheus_svc.core.generation import Generation
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.scheduler import Scheduler
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.step import StepResult

from .sched_helpers import legal_token


class Full(Scheduler):
    """The reference: always keys and sorts every candidate."""

    def _everything_runs(self, now):
        return None


class Counted(Scheduler):
    fast = 0

    def _everything_runs(self, now):
        out = super()._everything_runs(now)
        self.fast += out is not None
        return out


def make(cls, slots, batch, prefill_budget, aging, horizon=0.0):
    return cls(SlotPool(slots, 4096), SchedulerSettings(
        max_batch_size=batch, max_waiting=64, aging_steps=aging,
        max_prefill_tokens=prefill_budget, max_ahead_seconds=horizon))


def gen(gid, session, segment, arrival, prompt, expected, max_tokens):
    req = GenerationRequest(session_id=session, segment_index=segment,
                            prompt_ids=tuple(range(prompt)), max_tokens=max_tokens,
                            expected_frames=expected)
    return Generation(gen_id=gid, request=req, arrival=arrival, seed=gid)


def drive(seed, steps=1500, horizon=0.0):
    rng = random.Random(seed)
    slots = rng.choice([4, 8, 24, 48])
    batch = rng.choice([2, 4, 8, 16, 48, 64])
    budget = rng.choice([8, 40, 200, 4096])
    aging = rng.choice([2, 8, 64])
    ours, ref = make(Counted, slots, batch, budget, aging, horizon), \
        make(Full, slots, batch, budget, aging, horizon)
    now, next_id, segments, slow = 0.0, 1, {}, 0
    for _ in range(steps):
        now += rng.choice([0.0005, 0.002, 0.01, 0.05, 0.3])
        if rng.random() < rng.choice([0.03, 0.1, 0.3]) and len(segments) < 60:
            sid = f"s{rng.randrange(16)}"
            seg = segments.get(sid, -1) + 1
            segments[sid] = seg
            prompt = rng.choice([3, 6, 20, 90])
            expected, max_tokens = rng.randrange(5, 60), rng.choice([14, 70, 140, 280])
            for sched in (ours, ref):
                sched.add(gen(next_id, sid, seg, now, prompt, expected, max_tokens))
            next_id += 1
        if rng.random() < 0.02:
            live = [g.gen_id for g in ours.running()]
            if live:
                victim = rng.choice(live)
                assert ours.cancel(victim, now) == ref.cancel(victim, now) is None
        before = ours.fast
        a, b = ours.schedule(now), ref.schedule(now)
        slow += ours.fast == before
        assert [g.gen_id for g in a.prefill] == [g.gen_id for g in b.prefill]
        assert sorted(g.gen_id for g in a.decode) == sorted(g.gen_id for g in b.decode)
        assert len(a.decode) == len({g.gen_id for g in a.decode})
        assert [g.gen_id for g in a.admitted] == [g.gen_id for g in b.admitted]
        assert [g.gen_id for g in a.released] == [g.gen_id for g in b.released]
        assert abs(a.idle_s - b.idle_s) < 1e-12
        waited = {g.gen_id: g.steps_waited for g in ours.running()}
        assert waited == {g.gen_id: g.steps_waited for g in ref.running()}
        stop = {g.gen_id for g in a.rows if rng.random() < 0.03}
        for sched, plan in ((ours, a), (ref, b)):
            tokens = {g.gen_id: [legal_token(g, g.gen_id in stop)] for g in plan.rows}
            sched.update(plan, StepResult(tokens), now)
        assert ours.stats(now) == ref.stats(now)
    return ours.fast, slow


def test_the_shortcut_makes_the_same_plans_as_keying_and_sorting_everything():
    fast = slow = 0
    for seed in range(40):
        f, s = drive(seed)
        fast, slow = fast + f, slow + s
    # both paths were exercised, many times each
    assert fast > 5000 and slow > 5000, (fast, slow)


def test_the_shortcut_is_never_taken_with_the_playout_horizon_on():
    for seed in range(3):
        fast, _ = drive(seed, steps=400, horizon=0.5)
        assert fast == 0


def test_the_shortcut_computes_no_key_for_decode_rows():
    s = make(Scheduler, slots=8, batch=8, prefill_budget=4096, aging=64)
    calls = []
    inner = s._priority
    s._priority = lambda g, now: calls.append(g.gen_id) or inner(g, now)
    gens = [gen(i, f"s{i}", 0, 0.0, 6, 30, 700) for i in range(1, 5)]
    for g in gens:
        s.add(g)
    plan = s.schedule(0.0)  # admission keys the waiting ones; the prefill rows are ordered
    s.update(plan, StepResult({g.gen_id: [legal_token(g)] for g in plan.rows}), 0.0)
    calls.clear()
    plan = s.schedule(0.001)
    assert sorted(r.gen_id for r in plan.decode) == [1, 2, 3, 4] and not plan.prefill
    assert calls == []


def test_over_the_prefill_budget_the_full_path_decides():
    s = make(Scheduler, slots=8, batch=8, prefill_budget=10, aging=64)
    for i in range(1, 4):
        s.add(gen(i, f"s{i}", 0, float(i), 6, 30, 700))
    plan = s.schedule(5.0)
    assert [r.gen_id for r in plan.prefill] == [1]  # the oldest goes; 6 + 6 > 10
    assert [g.steps_waited for g in sorted(s.running(), key=lambda g: g.gen_id)] == [0, 1, 1]


def test_prefill_rows_keep_the_priority_order_across_admissions():
    # newest first (an injected order): 1 waits for the prefill budget at the first step,
    # 3 is admitted at the second; both then fit, and 3 must come before 1 as on the full path
    settings = SchedulerSettings(max_batch_size=8, max_waiting=8, aging_steps=64,
                                 max_prefill_tokens=10,
                                 priority=lambda g, session, now, st: (-g.gen_id,))
    plans = []
    for cls in (Scheduler, Full):
        s = cls(SlotPool(4, 4096), settings)
        s.add(gen(1, "a", 0, 0.0, 6, 30, 700))
        s.add(gen(2, "b", 0, 0.0, 6, 30, 700))
        plan = s.schedule(0.0)
        assert [r.gen_id for r in plan.prefill] == [2]
        s.update(plan, StepResult({g.gen_id: [legal_token(g)] for g in plan.rows}), 0.0)
        s.add(gen(3, "c", 0, 0.0, 3, 30, 700))
        plans.append(s.schedule(0.001))
    assert [r.gen_id for r in plans[0].prefill] == [r.gen_id for r in plans[1].prefill] == [3, 1]
