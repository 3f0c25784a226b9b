"""Scheduler.schedule with a step in flight (issue 32 item 2): a backend that runs ahead
(the graph engine) has the next step planned and launched while the last one still runs,
whatever joins or leaves. New, cancelled, finished and deferred generations change the step
after next; the in-flight step's rows are given one token further; a prompt in flight is not
prefilled twice; a cancelled row's slot goes to a waiting generation at once, and update()
drops the cancelled row's token. Before, the scheduler refused to plan ahead whenever
anything waited, was cancelled, deferred, draining or parked: under a live load the host's
work and the device's ran one after the other (issue 32)."""

import numpy as np

from orpheus_svc.core.budget import MIN_SLACK_S, REALTIME_TOKENS_PER_S
from orpheus_svc.core.generation import Generation
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.scheduler import Scheduler
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.step import StepResult

from .sched_helpers import legal_token, make_gen, make_scheduler

ROW_FIELDS = ("gen_ids", "slots", "num_generated", "position", "frame_position",
              "stop_allowed")


def _gen(gid, session, segment, arrival=0.0, expected=50, prompt_len=6):
    req = GenerationRequest(session_id=session, segment_index=segment,
                            prompt_ids=tuple(range(prompt_len)), max_tokens=700,
                            expected_frames=expected)
    return Generation(gen_id=gid, request=req, arrival=arrival, seed=gid)


def _update(sched, plan, now, stop=()):
    tokens = {g.gen_id: [legal_token(g, g.gen_id in stop)] for g in plan.rows}
    return sched.update(plan, StepResult(tokens=tokens), now)


def _step(sched, now, stop=()):
    plan = sched.schedule(now)
    _update(sched, plan, now, stop)
    return plan


def _rows(plan):
    return {f: getattr(plan.decode, f).tolist() for f in ROW_FIELDS}


def test_the_rows_in_flight_are_planned_one_token_further():
    """The plan made in flight is the plan schedule() makes once the in-flight tokens are
    known (legal audio tokens that end nothing), field for field, across a frame boundary
    too (frame position 6 -> 0, a frame more)."""
    for steps_before in range(0, 9):
        a, b = make_scheduler(slots=4, batch=4), make_scheduler(slots=4, batch=4)
        gens_a = [make_gen() for _ in range(3)]
        for g in gens_a:
            a.add(g)
            b.add(Generation(gen_id=g.gen_id, request=g.request, arrival=0.0, seed=g.seed))
        for k in range(steps_before):
            _step(a, k * 0.001)
            _step(b, k * 0.001)
        now = steps_before * 0.001
        plan_a, plan_b = a.schedule(now), b.schedule(now)
        ahead = a.schedule(now, in_flight=plan_a)
        assert not ahead.prefill and not ahead.admitted
        assert (ahead.decode.last_token == -1).all()  # the device feeds what it sampled
        _update(b, plan_b, now)
        assert _rows(ahead) == _rows(b.schedule(now + 0.001)), steps_before


def test_a_prompt_in_flight_is_not_prefilled_twice():
    """Its prefill is the step in flight: next it decodes its second token. Caught planted
    bug: _needs_prefill without the in-flight check (the prompt prefilled again, its first
    token lost)."""
    sched = make_scheduler(slots=4, batch=4)
    gen = make_gen()
    sched.add(gen)
    plan = sched.schedule(0.0)
    assert [r.gen_id for r in plan.prefill] == [gen.gen_id]
    ahead = sched.schedule(0.0, in_flight=plan)
    assert not ahead.prefill
    assert ahead.decode.gen_ids.tolist() == [gen.gen_id]
    assert ahead.decode.num_generated.tolist() == [1]
    assert ahead.decode.frame_position.tolist() == [1]
    assert ahead.decode.position.tolist() == [8]  # the KV position of its first token


def test_a_new_generation_joins_the_step_after_next():
    """Submitted while a step is in flight: admitted and prefilled in the plan made in
    flight, beside the running rows one token further (before: no plan ahead while
    anything waited)."""
    sched = make_scheduler(slots=4, batch=4)
    running = make_gen()
    sched.add(running)
    _step(sched, 0.0)
    plan = sched.schedule(0.001)
    late = make_gen()
    sched.add(late)
    ahead = sched.schedule(0.001, in_flight=plan)
    assert [g.gen_id for g in ahead.admitted] == [late.gen_id]
    assert [r.gen_id for r in ahead.prefill] == [late.gen_id]
    assert ahead.decode.gen_ids.tolist() == [running.gen_id]
    assert ahead.decode.num_generated.tolist() == [2]


def test_a_cancelled_row_in_flight_gives_its_slot_to_a_waiting_one_and_its_token_is_dropped():
    """One slot: the running generation is cancelled while its step is in flight; the plan
    made then releases it and prefills the waiting one in the same slot. The in-flight
    step's token for the cancelled row must not reach the new generation. Caught planted
    bug: update() without its live check (the new generation got the cancelled one's
    token as its first)."""
    sched = make_scheduler(slots=1, batch=1)
    first, second = make_gen(), make_gen()
    sched.add(first)
    sched.add(second)
    _step(sched, 0.0)
    plan = sched.schedule(0.001)
    assert plan.decode.gen_ids.tolist() == [first.gen_id]
    sched.cancel(first.gen_id, 0.001)
    ahead = sched.schedule(0.001, in_flight=plan)
    assert [g.gen_id for g in ahead.released] == [first.gen_id]
    assert [g.gen_id for g in ahead.admitted] == [second.gen_id]
    assert [r.gen_id for r in ahead.prefill] == [second.gen_id] and not len(ahead.decode)
    assert second.slot == 0
    # the in-flight step's token for the cancelled row, as the graph engine returns it
    out = sched.update(plan, StepResult(decode_tokens=np.array([legal_token(r) for r in plan.rows])),
                       0.002)
    assert not out.frames and not out.finished
    assert second.num_generated == 0 and first.finish_reason == "cancelled"
    _update(sched, ahead, 0.003)
    assert second.num_generated == 1


def test_a_row_the_in_flight_token_ends_by_length_is_left_out():
    sched = Scheduler(SlotPool(2, 128), SchedulerSettings(max_batch_size=2))
    short, long_ = make_gen(max_tokens=1), make_gen(max_tokens=5)
    sched.add(short)
    sched.add(long_)
    plan = sched.schedule(0.0)
    ahead = sched.schedule(0.0, in_flight=plan)
    assert ahead.decode.gen_ids.tolist() == [long_.gen_id]  # short's first token is its last


def test_a_row_stopped_in_flight_is_stepped_once_more_and_its_extra_token_dropped():
    sched = make_scheduler(slots=2, batch=2)
    gen = make_gen()
    sched.add(gen)
    now = 0.0
    while not gen.stop_allowed:  # one frame, then the stop id is legal
        _step(sched, now)
        now += 0.001
    plan = sched.schedule(now)
    ahead = sched.schedule(now, in_flight=plan)
    assert ahead.decode.gen_ids.tolist() == [gen.gen_id]  # the stop is not known yet
    frames = gen.num_frames
    out = _update(sched, plan, now, stop={gen.gen_id})
    assert gen.finish_reason == "stop" and out.finished == [gen]
    out = sched.update(ahead, StepResult(decode_tokens=np.array([legal_token(gen)])), now)
    assert not out.frames and not out.finished and gen.num_frames == frames


def test_a_waiting_generation_takes_a_slot_freed_by_the_step_before():
    """Two slots, three generations: the third waits. One ends at step n, which is in
    flight when step n+1 is planned; once step n is updated, the plan made while step n+1
    is in flight admits the third into the freed slot (a slot that step n's ends free is
    used one step later than without run-ahead)."""
    sched = make_scheduler(slots=2, batch=2)
    a, b, c = make_gen(), make_gen(), make_gen()
    for g in (a, b, c):
        sched.add(g)
    now = 0.0
    while not a.stop_allowed:
        _step(sched, now)
        now += 0.001
    plan = sched.schedule(now)
    ahead = sched.schedule(now, in_flight=plan)
    assert not ahead.admitted and c.slot is None
    _update(sched, plan, now, stop={a.gen_id})
    assert a.finished and c.slot is None
    after = sched.schedule(now, in_flight=ahead)
    assert [g.gen_id for g in after.admitted] == [c.gen_id]
    assert [r.gen_id for r in after.prefill] == [c.gen_id]
    assert after.decode.gen_ids.tolist() == [b.gen_id]


def test_a_candidate_left_out_of_the_step_in_flight_is_planned_next():
    """The second prompt did not fit the in-flight step's prefill budget: it is prefilled
    in the step planned in flight (before: no plan ahead until it had been)."""
    sched = make_scheduler(slots=4, batch=4, max_prefill_tokens=10)
    first, second = make_gen(prompt_len=8), make_gen(prompt_len=8)
    sched.add(first)
    sched.add(second)
    plan = sched.schedule(0.0)
    assert [r.gen_id for r in plan.prefill] == [first.gen_id]
    ahead = sched.schedule(0.0, in_flight=plan)
    assert [r.gen_id for r in ahead.prefill] == [second.gen_id]
    assert ahead.decode.gen_ids.tolist() == [first.gen_id]


def test_more_candidates_than_the_batch_rotate_in_flight_too():
    """Four running, a batch of two: the rows the in-flight step left out age and run in the
    plan made in flight, as they would in schedule() (before: no plan ahead)."""
    sched = make_scheduler(slots=4, batch=2, aging=1)
    gens = [make_gen() for _ in range(4)]
    for g in gens:
        sched.add(g)
    for k in range(4):  # everyone prefilled, two at a time
        _step(sched, k * 0.001)
    plan = sched.schedule(0.01)
    ahead = sched.schedule(0.01, in_flight=plan)
    assert len(plan.rows) == len(ahead.rows) == 2
    assert set(plan.decode.gen_ids.tolist()).isdisjoint(ahead.decode.gen_ids.tolist())
    # the left-out rows had no token in flight: their rows are as they are
    assert (ahead.decode.last_token != -1).all()


def test_the_playout_horizon_parks_in_flight_too():
    """With engine.max_ahead_seconds on, the plan made in flight keys every row and parks
    the one whose listener is far ahead, as schedule() does (before: no plan ahead with a
    horizon at all)."""
    sched = Scheduler(SlotPool(4, 4096), SchedulerSettings(max_batch_size=4,
                                                           max_ahead_seconds=0.5))
    gen = _gen(1, "a", 0)
    sched.add(gen)
    now, ahead = 0.0, None
    for _ in range(200):  # the listener at t=0 hears nothing: the session gets far ahead
        plan = ahead if ahead is not None else sched.schedule(now)
        ahead = sched.schedule(now, in_flight=plan)
        _update(sched, plan, now)
        if not ahead.rows:
            break
    assert not ahead.rows and sched._parking and gen.slot is not None and not gen.finished


def _budget_with_a_deferred_segment(step_s):
    """Three sessions' first segments running under the row budget, steps of `step_s`
    seconds (3 tokens each), then session a's next segment, which the budget defers."""
    sched = Scheduler(SlotPool(8, 4096), SchedulerSettings(max_batch_size=8, row_budget=True))
    heads = [_gen(1, "a", 0), _gen(2, "b", 0), _gen(3, "c", 0)]
    for g in heads:
        sched.add(g)
    now = 0.0
    for _ in range(3):
        _step(sched, now)
        now += step_s
    later = _gen(4, "a", 1, arrival=now)
    sched.add(later)
    _step(sched, now)
    now += step_s
    assert later.slot is None and sched.stats().waiting == 1  # deferred, not waiting
    return sched, heads, later, now


def test_a_deferred_segment_coming_due_is_admitted_in_the_plan_made_in_flight():
    """The row budget holds a later segment back until its listener needs it within
    MIN_SLACK_S; a plan made in flight then admits it, as schedule() does (before: while
    the batch ran ahead nothing admitted it, and its listener ran dry)."""
    sched, heads, later, now = _budget_with_a_deferred_segment(step_s=0.1)
    assert sched.stats().row_budget == 0  # a slow engine: room for no more rows
    plan = sched.schedule(now)
    assert later.slot is None
    ahead = sched.schedule(now, in_flight=plan)
    assert later.slot is None and not ahead.admitted  # held back, not due
    due = now
    while later.slot is None:  # not a bound: search for when it comes due
        due += 0.05
        assert due < now + 10
        ahead = sched.schedule(due, in_flight=plan)
    # it came due because its slack fell to MIN_SLACK_S, and the plan made in flight took it
    assert sched._sessions.of("a").slack(later, due) <= MIN_SLACK_S + 0.05
    assert later.gen_id in [g.gen_id for g in ahead.admitted]
    assert later.gen_id in [r.gen_id for r in ahead.prefill]


def test_room_in_the_row_budget_is_used_by_the_plan_after_the_ends():
    """Two of three rows end at step n; the plan made while step n+1 is in flight (after
    update(n)) admits the deferred segment into the room the budget now has."""
    step_s = 3 / (2.5 * 2 * REALTIME_TOKENS_PER_S)  # 3 rows: 2.5 rows at 2 x real time
    sched, heads, later, now = _budget_with_a_deferred_segment(step_s)
    assert sched.stats().row_budget == 2  # 3 running: no room
    while not heads[0].stop_allowed:
        _step(sched, now)
        now += step_s
    plan = sched.schedule(now)
    ahead = sched.schedule(now, in_flight=plan)
    assert later.slot is None  # not due, no room yet
    _update(sched, plan, now, stop={heads[1].gen_id, heads[2].gen_id})
    now += step_s
    assert heads[1].finished and heads[2].finished and not heads[0].finished
    after = sched.schedule(now, in_flight=ahead)
    assert later.gen_id in [g.gen_id for g in after.admitted]


def test_an_empty_plan_in_flight_does_not_idle_the_engine():
    """Every in-flight row ends by length: nothing to plan ahead, but the engine is not
    waiting for work (the row budget's step clock keeps running)."""
    sched = make_scheduler(slots=2, batch=2)
    gen = make_gen(max_tokens=1)
    sched.add(gen)
    plan = sched.schedule(0.0)
    sched._last_step_end = 0.0
    ahead = sched.schedule(0.0, in_flight=plan)
    assert ahead.empty and ahead.idle_s == 0.0
    assert sched._last_step_end == 0.0
