"""Scheduler.schedule_ahead's guards: it plans the next step before this one's tokens are
known only where that is what schedule() would run, and otherwise returns None, so that
the engine collects the step and calls schedule().

While run-ahead succeeds the engine never calls schedule() (engine/loop.py _step), so a
guard that is missing is not one late step: whatever only schedule() does (admit a
deferred segment, prefill a generation left out, park a row past the playout horizon)
does not happen for as long as the batch keeps running. Pinned before issue 38 moves the
scheduler: the mutation audit deleted four of these guards one at a time (deferred
admissions, playout horizon, draining slots, the live count) and no test failed."""

from orpheus_svc.core.budget import MIN_SLACK_S, REALTIME_TOKENS_PER_S
from orpheus_svc.core.generation import Generation, GenerationRequest
from orpheus_svc.core.scheduler import Scheduler, SchedulerSettings
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.step import StepResult

from .sched_helpers import legal_token, make_gen, make_scheduler


def _gen(gid, session, segment, arrival=0.0, expected=50, prompt_len=6):
    req = GenerationRequest(session_id=session, segment_index=segment,
                            prompt_ids=tuple(range(prompt_len)), max_tokens=700,
                            expected_frames=expected)
    return Generation(gen_id=gid, request=req, arrival=arrival, seed=gid)


def _step(sched, now, stop=()):
    plan = sched.schedule(now)
    _update(sched, plan, now, stop)
    return plan


def _update(sched, plan, now, stop=()):
    tokens = {g.gen_id: [legal_token(g, g.gen_id in stop)] for g in plan.rows}
    return sched.update(plan, StepResult(tokens=tokens), now)


def test_run_ahead_goes_on_while_every_candidate_runs():
    """The control for the tests below: nothing waits, nothing is held back."""
    sched = make_scheduler(slots=4, batch=4)
    for _ in range(3):
        sched.add(make_gen())
    _step(sched, 0.0)
    plan = sched.schedule(0.001)
    ahead = sched.schedule_ahead(plan, 0.001)
    assert ahead is not None
    assert ahead.decode.gen_ids.tolist() == plan.decode.gen_ids.tolist()
    assert not ahead.prefill and not ahead.admitted and not ahead.released


def test_a_generation_waiting_for_a_slot_or_a_cancel_stops_run_ahead():
    """schedule() would admit the waiting one into the next free slot, or release the
    cancelled one's slot (also pinned with the graph backend's own tests)."""
    sched = make_scheduler(slots=2, batch=2)
    for _ in range(3):
        sched.add(make_gen())
    plan = sched.schedule(0.0)
    assert sched.schedule_ahead(plan, 0.0) is None  # the third waits for a slot
    sched = make_scheduler(slots=2, batch=2)
    running = make_gen()
    sched.add(running)
    plan = sched.schedule(0.0)
    sched.cancel(running.gen_id, 0.0)
    assert sched.schedule_ahead(plan, 0.0) is None


def test_a_candidate_left_out_of_the_plan_stops_run_ahead():
    """The second new generation's prompt does not fit this step's prefill budget: it is a
    candidate the plan left out, and the next schedule() would prefill it. Caught planted
    bug: without the live-count guard the step ahead was the first one's row alone, and so
    every step after it: the second listener's first audio waited for the first to end."""
    sched = make_scheduler(slots=4, batch=4, max_prefill_tokens=10)
    first, second = make_gen(prompt_len=8), make_gen(prompt_len=8)
    sched.add(first)
    sched.add(second)
    plan = sched.schedule(0.0)
    assert [r.gen_id for r in plan.prefill] == [first.gen_id] and second.slot is not None
    assert sched.schedule_ahead(plan, 0.0) is None
    _update(sched, plan, 0.0)
    assert second.gen_id in [r.gen_id for r in sched.schedule(0.001).prefill]


def test_more_candidates_than_the_batch_stops_run_ahead():
    """Four running generations, a batch of two: schedule() rotates who runs (batch order,
    aging); a step ahead would keep the same two. (Both the batch-size guard and the live
    count catch this; the test fails only if both go.)"""
    sched = make_scheduler(slots=4, batch=2)
    gens = [make_gen() for _ in range(4)]
    for g in gens:
        sched.add(g)
    plan = sched.schedule(0.0)
    assert len(plan.rows) == 2 and all(g.slot is not None for g in gens)
    assert sched.schedule_ahead(plan, 0.0) is None


def test_the_playout_horizon_stops_run_ahead():
    """With engine.max_ahead_seconds on, schedule() keys every row each step and parks the
    ones whose listener is far enough ahead; only schedule() can. Caught planted bug: without
    the horizon guard, a session beyond the horizon kept its place in every step ahead."""
    for horizon, runs_ahead in ((0.0, True), (2.0, False)):
        sched = Scheduler(SlotPool(4, 4096), SchedulerSettings(max_batch_size=4,
                                                               max_ahead_seconds=horizon))
        sched.add(make_gen())
        _step(sched, 0.0)
        plan = sched.schedule(0.001)
        assert (sched.schedule_ahead(plan, 0.001) is not None) is runs_ahead


def test_a_draining_slot_stops_run_ahead_until_the_backend_confirms_it():
    """A pool whose frees wait for the backend (confirm_frees, core/slots.py): while a slot
    drains the engine goes through schedule(). Caught planted bug: the draining guard
    deleted (schedule_ahead planned a step while a slot drained)."""
    sched = Scheduler(SlotPool(3, 4096, confirm_frees=True), SchedulerSettings(max_batch_size=3))
    ending, going_on = make_gen(), make_gen()
    sched.add(ending)
    sched.add(going_on)
    now = 0.0
    while not ending.stop_allowed:  # one frame, then the stop id is legal
        _step(sched, now)
        now += 0.001
    _step(sched, now, stop={ending.gen_id})
    assert ending.finish_reason == "stop" and sched.pool.num_draining == 1
    plan = sched.schedule(now + 0.001)
    assert [int(g) for g in plan.decode.gen_ids] == [going_on.gen_id]
    assert sched.schedule_ahead(plan, now + 0.001) is None
    sched.freed([ending.gen_id])  # the backend confirms
    assert sched.pool.num_draining == 0
    assert sched.schedule_ahead(plan, now + 0.001) is not None


def _budget_with_a_deferred_segment(step_s):
    """Three sessions' first segments running under the row budget, steps of `step_s`
    seconds (3 tokens each), then session a's next segment, which the budget defers: its
    listener has a's whole first segment (50 frames, about 4 s) to hear before it."""
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


def test_a_deferred_segment_coming_due_stops_run_ahead():
    """A later segment the row budget holds back does not stop run-ahead until it is due
    (its listener needs it within MIN_SLACK_S); from then on schedule() must admit it.
    Caught planted bug: the deferred-admission guard deleted, so the due segment waited
    while the batch ran ahead, and its listener ran dry."""
    sched, heads, later, now = _budget_with_a_deferred_segment(step_s=0.1)
    assert sched.stats().row_budget == 0  # a slow engine: room for no more rows
    plan = sched.schedule(now)
    assert later.slot is None
    assert sched.schedule_ahead(plan, now) is not None  # held back, not due: ahead is fine
    due = now + sched.buffered_seconds("a", now)  # not a bound: search for when it is due
    while sched.schedule_ahead(plan, due) is not None:
        due += 0.05
        assert due < now + 10
    # it is due because its slack fell to MIN_SLACK_S, and schedule() then admits it
    assert sched._sessions["a"].slack(later, due) <= MIN_SLACK_S + 0.05
    _update(sched, plan, due)
    assert later.gen_id in [g.gen_id for g in sched.schedule(due).admitted]


def test_room_in_the_row_budget_for_a_deferred_segment_stops_run_ahead():
    """Two of three rows end at step n, which was planned with step n+1 ahead of it: the
    budget (2.5 rows measured) now has room for a's deferred next segment, and schedule()
    would admit it at once. Caught planted bug: the deferred-admission guard deleted (or
    its room clause), so the segment waited until it came due, with its listener's buffer
    run down."""
    step_s = 3 / (2.5 * 2 * REALTIME_TOKENS_PER_S)  # 3 rows: 2.5 rows at 2 x real time
    sched, heads, later, now = _budget_with_a_deferred_segment(step_s)
    assert sched.stats().row_budget == 2  # 3 running: no room
    while not heads[0].stop_allowed:
        _step(sched, now)
        now += step_s
    plan = sched.schedule(now)
    ahead = sched.schedule_ahead(plan, now)
    assert ahead is not None and later.slot is None  # not due, no room: ahead is fine
    _update(sched, plan, now, stop={heads[1].gen_id, heads[2].gen_id})
    now += step_s
    assert heads[1].finished and heads[2].finished and not heads[0].finished
    assert sched.schedule_ahead(ahead, now) is None  # 1 runs, the budget has room for 2
    assert later.gen_id in [g.gen_id for g in sched.schedule(now).admitted]
