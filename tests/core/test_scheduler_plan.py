"""The plan the scheduler builds for a backend (core/step.py): frozen rows only, budgets
fitted to the slot, and slots that drain until the backend confirms their end."""

import dataclasses

import pytest

from orpheus_svc.core.generation import Generation
from orpheus_svc.core.prompt import PromptTooLong
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.scheduler import Scheduler
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.step import StepResult, StepRow

from .sched_helpers import legal_token


def _gen(gid, max_tokens=70, prompt_len=9):
    req = GenerationRequest(f"s{gid}", 0, tuple(range(prompt_len)), max_tokens)
    return Generation(gen_id=gid, request=req, arrival=float(gid), seed=gid)


def test_rows_are_frozen_snapshots_not_the_generations():
    s = Scheduler(SlotPool(2, 256), SchedulerSettings(max_batch_size=2))
    g = _gen(1)
    s.add(g)
    plan = s.schedule(0.0)
    (row,) = plan.prefill
    assert isinstance(row, StepRow) and row.gen_id == 1 and row.slot == g.slot
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.decode = ()
    s.update(plan, StepResult({1: [legal_token(row)]}), 0.0)
    assert row.num_generated == 0 and row.prefill  # the snapshot did not move
    (row2,) = s.schedule(0.0).decode
    assert row2.num_generated == 1 and row2.last_token == g.last_token


def test_max_tokens_is_fitted_to_the_slot_at_admission():
    s = Scheduler(SlotPool(1, 256), SchedulerSettings())
    g = _gen(1, max_tokens=1000)
    s.add(g)
    (row,) = s.schedule(0.0).prefill
    assert g.request.max_tokens == row.request.max_tokens == 245  # whole frames, 1 spare


def test_a_draining_slot_is_taken_until_the_backend_confirms_it():
    s = Scheduler(SlotPool(1, 256, confirm_frees=True), SchedulerSettings())
    first, second = _gen(1, max_tokens=7), _gen(2)
    s.add(first)
    s.add(second)
    while not first.finished:
        plan = s.schedule(0.0)
        (row,) = plan.rows
        s.update(plan, StepResult({1: [legal_token(row)]}), 0.0)
    assert first.finish_reason == "length" and s.has_work
    assert s.schedule(0.0).empty and second.slot is None  # drains: no admission
    s.update(s.schedule(0.0), StepResult(freed=[1]), 0.0)
    plan = s.schedule(0.0)
    assert [r.gen_id for r in plan.prefill] == [2] and second.slot == 0


def test_a_prompt_that_leaves_no_room_for_a_frame_is_refused_when_queued():
    s = Scheduler(SlotPool(1, 256), SchedulerSettings())
    with pytest.raises(PromptTooLong, match="prompt is 250 tokens and max_seq_len is 256"):
        s.add(_gen(1, prompt_len=250))
    assert s.stats().waiting == 0 and s.stats().submitted == 0 and not s.has_work
