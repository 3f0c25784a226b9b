"""What Scheduler.update hands out for the engine loop to move on (core/output.py
StepOutput): the flusher's pushes with their seeds, the drops with their messages, a
grammar break losing its own frames only, and the one step clock."""

from orpheus_svc.core.generation import Generation
from orpheus_svc.core.output import GRAMMAR_ERROR
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.scheduler import Scheduler
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.step import StepResult
from orpheus_svc.core.tokens import audio_token_id

FRAME = [audio_token_id(p, 40 + p) for p in range(7)]
BAD = audio_token_id(3, 0)  # position 3 where position 0 is due: outside the grammar


def _sched(*gens):
    s = Scheduler(SlotPool(4, 256), SchedulerSettings(max_batch_size=4))
    for g in gens:
        s.add(g)
    return s


def _gen(gid, seed=None):
    req = GenerationRequest(f"s{gid}", 0, tuple(range(8)), 140, SamplingParams(seed=seed))
    return Generation(gen_id=gid, request=req, arrival=0.0, seed=1000 + gid)


def test_a_grammar_break_loses_its_own_frames_and_ends_as_a_drop_with_why():
    a, b = _gen(1), _gen(2)
    s = _sched(a, b)
    plan = s.schedule(0.0)
    out = s.update(plan, StepResult({1: FRAME + [BAD], 2: FRAME}), 0.0)
    assert [(g.gen_id, len(c)) for g, c in out.frames] == [(2, 1)]  # b's frame still goes
    assert [p.gen_id for p in out.pushes] == [2] and not out.pushes[0].final
    assert a.finish_reason == "error" and a.num_frames == 0
    ((gen_id, fin),) = out.drops
    assert gen_id == 1 and fin.reason == "error" and fin.error == GRAMMAR_ERROR


def test_a_failed_row_is_dropped_with_the_backends_message():
    a = _gen(1)
    s = _sched(a)
    plan = s.schedule(0.0)
    out = s.update(plan, StepResult(errors={1: "internal error (error id e1)"}), 0.0)
    assert out.drops[0][0] == 1 and out.drops[0][1].error == "internal error (error id e1)"
    assert not out.pushes and out.finished == [a]


def test_pushes_carry_the_seed_only_for_a_seeded_session():
    a, b = _gen(1, seed=77), _gen(2)
    s = _sched(a, b)
    out = s.update(s.schedule(0.0), StepResult({1: FRAME, 2: FRAME}), 0.0)
    assert {p.gen_id: p.seed for p in out.pushes} == {1: a.seed, 2: None}
    assert all(p.playout is not None for p in out.pushes)  # the first frames: the clock


def test_the_step_period_starts_at_the_first_step_after_a_wait_then_at_each_end():
    s = _sched(_gen(1))
    out = s.update(s.schedule(1.0), StepResult({1: FRAME[:1]}), 1.5)
    assert out.period_s == 0.5  # began when it was planned
    out = s.update(s.schedule(2.0), StepResult({1: FRAME[1:2]}), 2.25)
    assert out.period_s == 0.75  # since the step before ended


def test_the_scheduler_stamps_admission_and_the_first_token_for_the_finish():
    g = _gen(1)
    s = _sched(g)
    s.update(s.schedule(2.0), StepResult({1: FRAME[:1]}), 2.5)
    out = s.update(s.schedule(3.0), StepResult(errors={1: "x"}), 3.0)
    (_, fin), = out.drops
    assert (fin.queued_s, fin.first_token_s) == (2.0, 2.5)  # arrival 0.0
