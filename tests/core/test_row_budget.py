"""The real-time row budget (core/budget.py) and how the scheduler admits under it."""

import random

import pytest

from orpheus_svc.core.budget import MIN_SLACK_S, REALTIME_TOKENS_PER_S, WINDOW_S, RowBudget
from orpheus_svc.core.checks import SettingError
from orpheus_svc.core.generation import Generation
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.scheduler import Scheduler
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.step import StepResult

from .sched_helpers import legal_token


def test_the_cap_is_throughput_over_the_rate_one_row_needs():
    b = RowBudget(headroom=0.0)
    assert b.cap == 0  # nothing measured: only what is due runs
    b.observe(tokens=400, seconds=0.010)  # 40,000 tokens/s
    assert b.cap == pytest.approx(40_000 / REALTIME_TOKENS_PER_S)
    assert RowBudget(headroom=0.25).target == pytest.approx(REALTIME_TOKENS_PER_S * 1.25)


def test_the_estimate_follows_a_change_over_its_window_and_ignores_empty_time():
    b = RowBudget(headroom=0.0)
    b.observe(100, 0.01)  # 10,000 tokens/s
    b.observe(100, 0.0)   # no time: ignored
    assert b.tokens_per_s == pytest.approx(10_000)
    b.observe(300, 0.01)  # one 10 ms step at 30,000 moves it 2% of the way (10 ms / 0.5 s)
    assert b.tokens_per_s == pytest.approx(10_000 + 0.01 / WINDOW_S * 20_000)
    for _ in range(int(5 * WINDOW_S / 0.01)):  # five windows later it reads the new rate
        b.observe(300, 0.01)
    assert b.tokens_per_s == pytest.approx(30_000, rel=0.01)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_a_bad_headroom_is_refused(bad):
    with pytest.raises(ValueError):
        RowBudget(bad)
    with pytest.raises(SettingError, match="row_budget_headroom"):
        SchedulerSettings(row_budget=True, row_budget_headroom=bad)


def _gen(gid, session, segment, arrival, expected, max_tokens=700):
    req = GenerationRequest(session_id=session, segment_index=segment,
                            prompt_ids=tuple(range(6)), max_tokens=max_tokens,
                            expected_frames=expected)
    return Generation(gen_id=gid, request=req, arrival=arrival, seed=gid)


def _step(sched, now, stop=()):
    plan = sched.schedule(now)
    tokens = {g.gen_id: [legal_token(g, g.gen_id in stop)] for g in plan.rows}
    sched.update(plan, StepResult(tokens=tokens), now)
    return plan


def test_a_later_segment_waits_while_the_budget_is_full_and_goes_when_it_is_due():
    s = Scheduler(SlotPool(8, 4096), SchedulerSettings(max_batch_size=8, row_budget=True))
    heads = [_gen(1, "a", 0, 0.0, expected=20), _gen(2, "b", 0, 0.0, expected=20)]
    for g in heads:
        s.add(g)
    now = 0.0
    for _ in range(3):  # 2 tokens per 0.1 s: far below real time, the budget is 1 row
        _step(s, now)
        now += 0.1
    assert s.stats().row_budget == 0  # int(0.22): not even one row runs in real time
    later = _gen(3, "a", 1, now, expected=20)
    s.add(later)
    waited = False
    while later.slot is None:
        # the listeners wait for neither head (both are running), so "a"'s next segment is
        # needed only once a's head has played: it waits until that is within MIN_SLACK_S
        slack = s._sessions.of("a").slack(later, now)
        plan = _step(s, now)
        if later.slot is None:
            waited = True
            assert slack > MIN_SLACK_S and s.stats().waiting == 1
        else:
            assert slack <= MIN_SLACK_S and later.gen_id in [g.gen_id for g in plan.admitted]
        now += 0.1
    assert waited


def test_the_listeners_first_audio_is_never_held_by_the_budget():
    s = Scheduler(SlotPool(8, 4096), SchedulerSettings(max_batch_size=8, row_budget=True))
    s.add(_gen(1, "a", 0, 0.0, expected=50))
    now = 0.0
    for _ in range(3):
        _step(s, now)
        now += 0.1
    assert s.stats().row_budget == 0
    first = [_gen(10 + i, f"new{i}", 0, now, expected=50) for i in range(4)]
    for g in first:
        s.add(g)
    plan = _step(s, now)
    assert sorted(g.gen_id for g in plan.admitted) == [10, 11, 12, 13]


def test_nothing_running_admits_one_so_a_queue_never_waits_on_its_own_budget():
    s = Scheduler(SlotPool(8, 4096), SchedulerSettings(max_batch_size=8, row_budget=True))
    s._budget_room()  # the budget exists and has measured a slow engine
    s._budget.observe(tokens=1, seconds=1.0)
    # a session whose audio plays for a long while yet, with its next segment queued
    head = _gen(1, "a", 0, 0.0, expected=200)
    s.add(head)
    _step(s, 0.0)
    later = _gen(2, "a", 1, 0.0, expected=50)
    s.add(later)
    _step(s, 0.01)
    assert later.slot is None  # one running, budget of 0 rows: waits (slack about 17 s)
    s.cancel(head.gen_id, 0.02)
    plan = _step(s, 0.02)
    assert head.finished and [g.gen_id for g in plan.admitted] == [2]


def test_random_lives_keep_the_budget_and_never_hold_a_due_generation():
    """Random arrivals, stops and cancels with the budget on. After every admission pass:
    nothing that is due (its listener waits, or needs it within MIN_SLACK_S) waits while a
    slot is free, and whatever does wait is held by a full budget."""
    rng = random.Random(5)
    s = Scheduler(SlotPool(40, 4096), SchedulerSettings(
        max_batch_size=40, max_waiting=64, row_budget=True))
    now, next_id, segments, held, added = 0.0, 1, {}, 0, []
    for _ in range(4000):
        now += rng.choice([0.004, 0.01, 0.02, 0.05])
        if rng.random() < 0.06:
            sid = f"s{rng.randrange(16)}"
            seg = segments[sid] = segments.get(sid, -1) + 1
            gen = _gen(next_id, sid, seg, now, rng.randrange(5, 60), rng.choice([70, 140, 700]))
            added.append(gen)
            s.add(gen)
            next_id += 1
        if rng.random() < 0.01 and next_id > 1:
            s.cancel(rng.randrange(1, next_id), now)
        plan = s.schedule(now)
        waiting = [g for g in (s.get(i) for i in range(1, next_id))
                   if g is not None and g.slot is None and not g.finished]
        assert len(waiting) == s.stats().waiting
        # every generation is running, waiting or ended: none is lost in the queue
        assert sum(not g.finished for g in added) == len(s.running()) + len(waiting)
        if waiting and s.pool.num_free:
            held += 1
            assert len(s.running()) >= max(int(s._budget.cap), 1)
            for g in waiting:
                key = s._priority(g, now)
                assert key[0] == 2 and key[1] > MIN_SLACK_S - 1e-9, key
        stop = {g.gen_id for g in plan.rows if rng.random() < 0.03}
        tokens = {g.gen_id: [legal_token(g, g.gen_id in stop)] for g in plan.rows}
        s.update(plan, StepResult(tokens=tokens), now)
    assert held > 100 and s.stats().row_budget > 0  # the budget did hold generations back


def test_under_a_modelled_gpu_the_running_rows_settle_at_the_real_time_batch():
    """A GPU whose step takes 2 ms + 20 us per row runs (1/90.2 s - 2 ms) / 20 us = 454
    rows within the target (real time + 10%). 300 sessions, each with two segments of 5 s
    queued at once (600 rows wanted): the budget holds later segments back while the heads
    play, the running rows settle at 454, and no listener runs dry once it has started
    (the held segments all fall due together at about 4 s and then run over the budget)."""
    s = Scheduler(SlotPool(1024, 4096), SchedulerSettings(
        max_batch_size=1024, max_waiting=1024, row_budget=True, row_budget_headroom=0.1))
    for i in range(300):
        for seg in (0, 1):
            s.add(_gen(2 * i + seg + 1, f"s{i}", seg, 0.0, expected=59, max_tokens=59 * 7))
    now, running, late = 0.0, [], 0
    while s.has_work:
        plan = _step(s, now)
        if not running:  # nothing measured yet: only the heads (their listeners wait) run
            assert len(plan.rows) == 300
        now += 0.002 + 20e-6 * len(plan.rows)
        running.append((now, len(plan.rows)))
        late += sum(1 for sess in s._sessions.sessions()
                    if sess.gens and sess.playout_end is not None and sess.playout_end < now)
    settled = [n for t, n in running if 1.0 <= t <= 3.5]
    assert 454 * 0.95 <= min(settled) <= max(settled) <= 455, (min(settled), max(settled))
    assert late == 0


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_row_budget_is_a_bool_and_a_refusal_says_so(bad):
    with pytest.raises(SettingError) as err:
        SchedulerSettings(row_budget=bad)
    assert str(err.value) == f"SchedulerSettings.row_budget must be true or false, got {bad!r}"
