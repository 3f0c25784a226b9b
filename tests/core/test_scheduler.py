import dataclasses
import random
import subprocess
import sys

import pytest

from orpheus_svc.core.admission import AdmissionError
from orpheus_svc.core.step import StepResult
from orpheus_svc.core.tokens import FRAME_SECONDS

from .sched_helpers import ids, legal_token, make_gen, make_scheduler, run_step, run_until_frames


def test_core_modules_import_neither_torch_nor_grpc():
    code = ("import sys, orpheus_svc.core.scheduler, orpheus_svc.core.slots, "
            "orpheus_svc.core.playout, orpheus_svc.core.prompt, orpheus_svc.core.tokens, "
            "orpheus_svc.core.events, orpheus_svc.core.generation\n"
            "bad = [m for m in ('torch', 'grpc') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_everything_runs_when_it_fits_in_the_batch():
    s = make_scheduler(slots=4, batch=4)
    gens = [make_gen(session=f"s{i}") for i in range(3)]
    for g in gens:
        s.add(g)
    plan = s.schedule(0.0)
    assert {g.gen_id for g in plan.prefill} == {g.gen_id for g in gens}
    assert [g.gen_id for g in plan.admitted] == [g.gen_id for g in gens]
    s.update(plan, StepResult({g.gen_id: [legal_token(g)] for g in plan.rows}), 0.0)
    plan = s.schedule(0.01)
    assert len(plan.decode) == 3 and not plan.prefill


def test_ttfb_priority_new_session_runs_before_sessions_with_audio():
    s = make_scheduler(slots=4, batch=2)
    old = [make_gen(session=f"old{i}", arrival=0.0) for i in range(2)]
    for g in old:
        s.add(g)
    now = 0.0
    for g in old:
        now = run_until_frames(s, g, 2, now)
    new = make_gen(session="new", arrival=now)
    s.add(new)
    plan = s.schedule(now)
    assert new.gen_id in ids(plan.prefill)
    assert len(plan.rows) == 2


def test_ttfb_class_is_oldest_first():
    s = make_scheduler(slots=4, batch=1)
    late, early = make_gen(session="a", arrival=2.0), make_gen(session="b", arrival=1.0)
    s.add(late)
    s.add(early)
    assert ids(s.schedule(3.0).rows) == [early.gen_id]


def test_deadline_order_least_buffered_session_first():
    s = make_scheduler(slots=2, batch=2)
    ahead, behind = make_gen(session="ahead"), make_gen(session="behind")
    s.add(ahead)
    s.add(behind)
    now = run_until_frames(s, behind, 2, 0.0)
    # give "ahead" many more frames while "behind" sits out
    s.settings = type(s.settings)(max_batch_size=1, max_waiting=8, aging_steps=10_000)
    while ahead.num_frames < 30:
        plan = s.schedule(now)
        plan = dataclasses.replace(plan, prefill=(), decode=(ahead.row(),))  # only "ahead"
        s.update(plan, StepResult({ahead.gen_id: [legal_token(ahead)]}), now)
    assert s.buffered_seconds("ahead", now) > s.buffered_seconds("behind", now)
    plan = s.schedule(now)
    assert ids(plan.rows) == [behind.gen_id]


def test_later_segment_of_a_session_waits_behind_the_one_being_played():
    s = make_scheduler(slots=3, batch=1, aging=10_000)
    seg0 = make_gen(session="a", segment=0, arrival=0.0, expected_frames=40)
    seg1 = make_gen(session="a", segment=1, arrival=0.0, expected_frames=40)
    s.add(seg1)  # arrival order must not matter: segment order does
    s.add(seg0)
    now = 0.0
    picked = []
    for _ in range(30):
        plan, _ = run_step(s, now)
        picked.extend(ids(plan.rows))
        now += FRAME_SECONDS / 7 / 4  # 4x faster than real time
    assert picked[0] == seg0.gen_id
    assert seg0.num_frames > seg1.num_frames


def test_segment_behind_runs_before_its_session_runs_dry():
    s = make_scheduler(slots=3, batch=1, aging=10_000)
    seg0 = make_gen(session="a", segment=0, expected_frames=10, max_tokens=70)
    seg1 = make_gen(session="a", segment=1, expected_frames=10)
    other = make_gen(session="b", segment=0)
    for g in (seg0, seg1, other):
        s.add(g)
    now = 0.0
    while not seg0.finished:
        run_step(s, now)
        now += 0.0005
    dry_at = now + s.buffered_seconds("a", now)
    while seg1.num_frames == 0:
        run_step(s, now)
        now += 0.0005
    assert now < dry_at  # seg1's first frame is ready before seg0's audio has played out


def test_aging_runs_a_generation_left_out_too_long():
    s = make_scheduler(slots=3, batch=1, aging=5)
    gens = [make_gen(session=f"s{i}", arrival=float(i)) for i in range(3)]
    for g in gens:
        s.add(g)
    now = 10.0
    ran = set()
    for _ in range(20):
        plan, _ = run_step(s, now)
        ran.update(ids(plan.rows))
    assert ran == {g.gen_id for g in gens}
    assert max(g.steps_waited for g in gens) <= 5


def test_bounded_admission_queue_refuses_beyond_capacity():
    s = make_scheduler(slots=2, waiting=3)
    for i in range(5):  # 2 slots free + 3 waiting
        s.add(make_gen(session=f"s{i}"))
    with pytest.raises(AdmissionError, match="capacity"):
        s.add(make_gen(session="x"))
    s.schedule(0.0)  # two admitted: the queue holds 3
    with pytest.raises(AdmissionError):
        s.add(make_gen(session="y"))
    assert s.stats().rejected == 2


def test_cancel_running_frees_slot_at_next_step_and_admits_waiter():
    s = make_scheduler(slots=1, waiting=2)
    a, b = make_gen(session="a"), make_gen(session="b", arrival=1.0)
    s.add(a)
    s.add(b)
    run_step(s, 0.0)
    assert a.slot is not None and b.slot is None
    assert s.cancel(a.gen_id, 0.1) is None  # running: released at the next step
    plan = s.schedule(0.2)
    assert plan.released == (a,) and a.finish_reason == "cancelled"
    assert plan.admitted == (b,) and b.slot == 0
    assert s.stats().cancelled == 1


def test_cancel_waiting_generation_ends_it_immediately():
    s = make_scheduler(slots=1, waiting=2)
    a, b = make_gen(session="a"), make_gen(session="b")
    s.add(a)
    s.add(b)
    s.schedule(0.0)
    assert s.cancel(b.gen_id, 0.0) is b and b.finish_reason == "cancelled"
    assert s.stats().waiting == 0


def test_stop_only_ends_at_frame_boundary_and_length_limit_holds():
    s = make_scheduler()
    g = make_gen(max_tokens=21)
    s.add(g)
    now = 0.0
    while not g.finished:
        run_step(s, now)
    assert g.finish_reason == "length" and g.num_generated == 21 and g.num_frames == 3
    h = make_gen(session="h")
    s.add(h)
    run_until_frames(s, h, 1, 0.0)
    run_step(s, 0.0, stop_ids={h.gen_id})
    assert h.finish_reason == "stop" and h.num_frames == 1 and s.pool.num_free == 4


def test_illegal_token_ends_generation_as_error_and_counts_violation():
    s = make_scheduler()
    g = make_gen()
    s.add(g)
    plan = s.schedule(0.0)
    out = s.update(plan, StepResult({g.gen_id: [5]}), 0.0)
    assert out.finished == [g] and g.finish_reason == "error"
    assert s.stats().grammar_violations == 1 and s.pool.num_free == 4


def test_prefill_budget_limits_prompt_tokens_per_step_but_oldest_always_runs():
    s = make_scheduler(slots=4, batch=4, max_prefill_tokens=100)
    big = make_gen(session="a", prompt_len=300, arrival=0.0)
    small = make_gen(session="b", prompt_len=50, arrival=1.0)
    s.add(big)
    s.add(small)
    plan = s.schedule(2.0)
    assert ids(plan.prefill) == [big.gen_id]


def test_no_slot_leaks_after_random_submit_cancel_finish():
    rng = random.Random(7)
    s = make_scheduler(slots=6, batch=4, waiting=5)
    live = []
    now = 0.0
    for _ in range(1000):
        op = rng.random()
        if op < 0.35:
            g = make_gen(session=f"s{rng.randrange(8)}", segment=rng.randrange(3),
                         max_tokens=7 * rng.randint(1, 4), arrival=now)
            try:
                s.add(g)
                live.append(g)
            except AdmissionError:
                pass
        elif op < 0.55 and live:
            s.cancel(rng.choice(live).gen_id, now)
        else:
            stop = {g.gen_id for g in live if rng.random() < 0.1}
            run_step(s, now, stop_ids=stop)
        live = [g for g in live if not g.finished]
        now += 0.003
        st = s.stats()
        assert st.used_slots + st.free_slots == 6
        assert st.used_slots == st.active
    for g in list(live):
        s.cancel(g.gen_id, now)
    s.schedule(now)
    st = s.stats()
    assert st.free_slots == 6 and st.active == 0 and st.waiting == 0
    assert st.submitted == st.finished + st.cancelled


def test_later_segments_of_an_accepted_session_are_queued_not_refused():
    s = make_scheduler(slots=1, waiting=0)
    s.add(make_gen(session="a", segment=0))
    s.schedule(0.0)
    s.add(make_gen(session="a", segment=1))  # no room, but the session was accepted
    with pytest.raises(AdmissionError):
        s.add(make_gen(session="b", segment=0))
    assert s.stats().waiting == 1 and s.stats().rejected == 1


def test_several_tokens_per_step_are_applied_in_order_and_stop_at_the_end():
    s = make_scheduler()
    g = make_gen(max_tokens=700)
    s.add(g)
    plan = s.schedule(0.0)
    from orpheus_svc.core.tokens import END_OF_SPEECH_ID, audio_token_id
    toks = [audio_token_id(i % 7, i) for i in range(14)] + [END_OF_SPEECH_ID, audio_token_id(0, 1)]
    out = s.update(plan, StepResult({g.gen_id: toks}), 0.0)
    assert [(gen, codes.tolist()) for gen, codes in out.frames] == [
        (g, [list(range(7)), list(range(7, 14))])]
    assert not out.frames[0][1].flags.writeable  # merged codes are read-only like one frame's
    assert g.finish_reason == "stop" and g.num_generated == 15  # nothing after the stop
    assert out.finished == [g] and s.pool.num_free == 4


def test_no_tokens_this_step_means_no_progress():
    s = make_scheduler()
    g = make_gen()
    s.add(g)
    out = s.update(s.schedule(0.0), StepResult({}), 0.0)
    assert not out.frames and not out.finished and g.num_generated == 0


def test_underrun_risk_counts_sessions_about_to_run_dry():
    s = make_scheduler(slots=2, batch=2)
    a, b = make_gen(session="a"), make_gen(session="b")
    s.add(a)
    s.add(b)
    now = run_until_frames(s, a, 10, 0.0)  # both get ~10 frames = 0.85 s of audio quickly
    assert s.stats(now).underrun_risk == 0
    assert s.stats(now + 0.8).underrun_risk == 2  # 0.05 s left each
    assert s.stats().underrun_risk == 0  # no clock, no estimate


def test_playout_horizon_skips_sessions_far_ahead_without_aging_them():
    from orpheus_svc.core.scheduler_settings import SchedulerSettings
    s = make_scheduler(slots=2, batch=2)
    s.settings = SchedulerSettings(max_batch_size=2, max_waiting=8, aging_steps=3, max_ahead_seconds=0.5)
    ahead = make_gen(session="ahead")
    s.add(ahead)
    now = run_until_frames(s, ahead, 10, 0.0)  # 0.85 s buffered > 0.5 s horizon
    for _ in range(10):
        plan = s.schedule(now)
        assert ahead.gen_id not in ids(plan.rows) and ahead.steps_waited == 0
    later = now + 0.5  # 0.35 s left: back under the horizon
    assert ahead.gen_id in ids(s.schedule(later).rows)


def test_bad_settings_are_refused_naming_the_field():
    from orpheus_svc.core.scheduler_settings import SchedulerSettings
    with pytest.raises(ValueError, match="SchedulerSettings.priority must be a function"):
        SchedulerSettings(priority="random")
    with pytest.raises(ValueError, match=r"SchedulerSettings.max_batch_size must be >= 1, got 0"):
        SchedulerSettings(max_batch_size=0)
    with pytest.raises(ValueError, match="SchedulerSettings.max_ahead_seconds must be >= 0"):
        SchedulerSettings(max_ahead_seconds=-1.0)


def test_plan_says_how_long_to_idle_when_every_generation_is_beyond_the_horizon():
    from orpheus_svc.core.scheduler_settings import SchedulerSettings
    s = make_scheduler(slots=1, batch=1)
    s.settings = SchedulerSettings(max_batch_size=1, max_waiting=8, max_ahead_seconds=0.5)
    g = make_gen()
    s.add(g)
    now = run_until_frames(s, g, 10, 0.0)
    buffered = s.buffered_seconds("s", now)
    plan = s.schedule(now)
    assert plan.empty and abs(plan.idle_s - (buffered - 0.5)) < 1e-6


def test_prompts_that_fill_the_prefill_budget_exactly_are_prefilled_in_one_step():
    s = make_scheduler(slots=4, batch=4, max_prefill_tokens=16)
    gens = [make_gen(session=f"s{i}", prompt_len=8) for i in range(3)]
    for g in gens:
        s.add(g)
    plan = s.schedule(0.0)
    assert [r.gen_id for r in plan.prefill] == [gens[0].gen_id, gens[1].gen_id]
