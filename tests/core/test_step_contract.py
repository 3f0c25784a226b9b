"""The backend contract's plain data (core/step.py), the backends' traits
(core/backends.py) and the settings' checks (core/checks.py), directly: DecodeRows is the
same rows as StepRows, frozen, and indexable; a StepPlan's counts, parts and ids."""

import math

import numpy as np
import pytest

from orpheus_svc.core.backends import BACKENDS, BackendTraits
from orpheus_svc.core.checks import SettingError, is_finite, is_int, require
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.step import DecodeRows, StepPlan, StepRow

REQ = GenerationRequest("s", 0, (1, 2), 10)


def decode_row(gen_id, slot=None, last=7, stop=False):
    return StepRow(gen_id, gen_id + 100 if slot is None else slot, REQ, gen_id * 11, False,
                   gen_id + 1, last, gen_id + 2, gen_id % 7, stop)


def prefill_row(gen_id):
    return StepRow(gen_id, gen_id + 100, REQ, 5, True, 0, None, 0, 0, False)


def test_decode_rows_hold_the_rows_as_arrays_and_give_them_back_as_step_rows():
    rows = (decode_row(3, stop=True), decode_row(1, last=None), decode_row(2))
    d = DecodeRows.from_rows(rows)
    assert d.gen_ids.tolist() == [3, 1, 2] and d.slots.tolist() == [103, 101, 102]
    assert d.num_generated.tolist() == [4, 2, 3] and d.position.tolist() == [5, 3, 4]
    assert d.last_token.tolist() == [7, -1, 7]  # a missing last token is -1 in the array
    assert d.frame_position.tolist() == [3, 1, 2]
    assert d.stop_allowed.tolist() == [True, False, False] and d.stop_allowed.dtype == bool
    assert d.gen_ids.dtype == np.int64 and d.seeds == (33, 11, 22) and d.requests == (REQ,) * 3
    assert len(d) == 3 and list(d) == list(rows) and d[1] == rows[1] and d.rows == rows
    assert d == rows and d == DecodeRows.from_rows(rows)
    assert d != DecodeRows.from_rows(rows[:2]) and d != rows[:2]
    assert d.__eq__(list(rows)) is NotImplemented
    assert repr(d) == "DecodeRows(3 rows, gen_ids=[3, 1, 2]...)"


def test_rows_built_from_the_arrays_are_the_same_step_rows():
    rows = (decode_row(3, stop=True), decode_row(1), decode_row(2))
    d = DecodeRows.from_rows(rows)
    fresh = DecodeRows(d.gen_ids, d.slots, d.num_generated, d.last_token, d.position,
                       d.frame_position, d.stop_allowed, d.requests, d.seeds)
    assert fresh.rows == rows
    assert all(type(r) is StepRow and r.prefill is False for r in fresh.rows)
    assert type(fresh.rows[0].gen_id) is int and type(fresh.rows[0].stop_allowed) is bool
    assert fresh.rows is fresh.rows  # built once


def test_decode_rows_are_frozen_arrays_and_all():
    d = DecodeRows.from_rows((decode_row(1),))
    with pytest.raises(AttributeError, match="DecodeRows is frozen: cannot set gen_ids"):
        d.gen_ids = np.zeros(1, np.int64)
    for array in (d.gen_ids, d.slots, d.num_generated, d.last_token, d.position,
                  d.frame_position, d.stop_allowed):
        with pytest.raises(ValueError):
            array[0] = 0
    with pytest.raises(TypeError):
        hash(d)


def test_a_prefill_row_is_refused_among_the_decode_rows():
    with pytest.raises(ValueError, match="a prefill row among the decode rows"):
        DecodeRows.from_rows((decode_row(1), prefill_row(2)))


def test_take_is_those_rows_in_that_order():
    rows = tuple(decode_row(i) for i in range(5))
    part = DecodeRows.from_rows(rows).take([4, 0, 2])
    assert part.rows == (rows[4], rows[0], rows[2])
    assert part.seeds == (44, 0, 22) and len(part.requests) == 3
    assert len(DecodeRows.from_rows(rows).take([])) == 0


def test_a_plan_counts_its_rows_prefill_first_and_takes_parts():
    pre = (prefill_row(9), prefill_row(8))
    dec = (decode_row(1), decode_row(2), decode_row(3))
    plan = StepPlan(4, list(pre), dec)
    assert plan.prefill == pre and isinstance(plan.decode, DecodeRows)
    assert plan.rows == pre + dec and plan.gen_ids() == [9, 8, 1, 2, 3]
    assert plan.num_rows == 5 and not plan.empty
    part = plan.part([1], [2, 0])
    assert part.step == 4 and part.prefill == (pre[1],) and part.decode.rows == (dec[2], dec[0])
    assert StepPlan(5).empty and StepPlan(5).num_rows == 0 and StepPlan(5).gen_ids() == []
    assert not StepPlan(5, pre).empty and not StepPlan(5, (), dec).empty
    kept = DecodeRows.from_rows(dec)
    assert StepPlan(6, (), kept).decode is kept


@pytest.mark.parametrize("name, cpu, cuda", [
    ("torch", False, True), ("graph", False, True), ("trtllm", True, True), ("sim", True, True)])
def test_which_backends_run_at_real_time_where(name, cpu, cuda):
    traits = BACKENDS[name]
    assert traits.name == name
    assert traits.runs_at_real_time("cpu") is cpu and traits.runs_at_real_time("cuda") is cuda
    assert BackendTraits("x", "never", "").runs_at_real_time("cuda") is False


def test_a_setting_error_names_owner_setting_why_and_value():
    class Engine:
        max_batch = 0

    with pytest.raises(SettingError) as err:
        require(False, Engine(), "max_batch", "must be >= 1")
    e = err.value
    assert str(e) == "Engine.max_batch must be >= 1, got 0" and isinstance(e, ValueError)
    assert (e.owner, e.name, e.why, e.value) == ("Engine", "max_batch", "must be >= 1", 0)
    assert e.worded("engine") == "engine.max_batch must be >= 1, got 0"
    require(True, Engine(), "max_batch", "must be >= 1")  # nothing raised


def test_ints_and_finite_numbers_exclude_bools():
    assert is_int(0) and is_int(-3) and not is_int(True) and not is_int(1.0)
    assert not is_int("1") and not is_int(None)
    assert is_finite(0) and is_finite(1.5) and is_finite(-2)
    assert not is_finite(True) and not is_finite(math.inf) and not is_finite(math.nan)
    assert not is_finite("1") and not is_finite(None)


def test_a_long_decode_rows_shows_its_first_eight_ids():
    d = DecodeRows.from_rows(tuple(decode_row(i) for i in range(10)))
    assert repr(d) == "DecodeRows(10 rows, gen_ids=[0, 1, 2, 3, 4, 5, 6, 7]...)"
