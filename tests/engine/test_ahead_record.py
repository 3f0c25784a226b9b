"""engine/ahead.py: the engine's record of which steps ran ahead and why the others did not
(issue 32 item 2), and when it is logged (the GPU check reads the last line's record)."""

import logging

import pytest

from orpheus_svc.engine.ahead import AheadRecord


def test_a_step_alone_is_counted_under_the_reason_given_before_it():
    rec = AheadRecord()
    rec.launched(False)             # the first step: the engine was idle
    rec.launched(True)
    rec.launched(True)
    rec.not_next("next_empty")
    rec.launched(False)
    rec.not_next("launch_failed")
    rec.launched(False)
    rec.launched(False)             # no reason given since: idle again
    assert rec.as_dict() == {"steps": 6, "ahead": 2, "share": 0.3333,
                             "alone": {"idle": 2, "next_empty": 1, "launch_failed": 1}}
    with pytest.raises(AssertionError):
        rec.not_next("tired")


def test_it_logs_every_ten_seconds_while_busy_and_one_second_after_when_idle(caplog):
    now = [0.0]
    rec = AheadRecord(clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="orpheus_svc.engine.ahead")
    for _ in range(4):
        rec.launched(True)
    now[0] = 9.9
    rec.maybe_log()
    assert not caplog.records
    now[0] = 10.0
    rec.maybe_log()
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("run-ahead: 4 of 4 steps (100.0%)") and "'share': 1.0" in line
    rec.launched(False)
    now[0] = 10.5
    rec.maybe_log(idle=True)  # within a second of the last line
    assert len(caplog.records) == 1
    now[0] = 11.0
    rec.maybe_log(idle=True)
    assert caplog.records[-1].getMessage().startswith("run-ahead: 0 of 1 steps (0.0%)")
    now[0] = 30.0
    rec.maybe_log(idle=True)  # no step since: nothing to say
    assert len(caplog.records) == 2
