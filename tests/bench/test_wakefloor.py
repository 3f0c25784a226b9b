"""The null-host pacer (orpheus_bench.wakefloor) counts host-bound steps as the sim does."""

import pytest

from orpheus_bench.wakefloor import pace


class Clock:
    """Time moves only by sleep (plus a scripted oversleep per call) and by work."""

    def __init__(self, oversleep=()):
        self.t = 50.0
        self.oversleep = list(oversleep)

    def __call__(self):
        return self.t

    def sleep(self, s):
        assert s > 0
        self.t += s + (self.oversleep.pop(0) if self.oversleep else 0.0)

    def work(self, clock, until):
        self.t = max(self.t, until)


def test_a_punctual_machine_gives_no_host_bound_steps_whatever_the_work_below_a_step():
    c = Clock()
    r = pace(100, 0.010, 0.009, clock=c, sleep=c.sleep, work=c.work)
    assert r["host_bound_steps"] == 0 and r["late_sum_s"] == 0 and r["sleeps"] == 100
    assert c.t == pytest.approx(50.0 + 100 * 0.010 + 0.009)  # period = the step


def test_a_late_return_beyond_the_slack_makes_the_next_step_host_bound():
    # the 3rd sleep returns 12 ms late; with 1 ms of work the next call is 3 ms past its end
    c = Clock(oversleep=[0, 0, 0.012])
    r = pace(6, 0.010, 0.001, clock=c, sleep=c.sleep, work=c.work)
    assert r["host_bound_steps"] == 1
    assert r["host_excess_s"] == pytest.approx(0.003)
    assert r["late_over_9ms"] == 1 and r["late_over_1ms"] == 1
    assert r["late_max_ms"] == pytest.approx(12.0)


def test_a_late_return_within_the_slack_is_absorbed():
    c = Clock(oversleep=[0, 0.004, 0])
    r = pace(5, 0.010, 0.001, clock=c, sleep=c.sleep, work=c.work)
    assert r["host_bound_steps"] == 0 and r["late_over_2ms"] == 1


def test_work_longer_than_a_step_makes_every_later_step_host_bound():
    c = Clock()
    r = pace(10, 0.010, 0.015, clock=c, sleep=c.sleep, work=c.work)
    assert r["host_bound_steps"] == 9  # the first step starts when called
    assert r["host_excess_s"] == pytest.approx(9 * 0.005)


def test_the_command_writes_the_floor_with_the_machine(tmp_path, capsys):
    import json

    from orpheus_bench.wakefloor import main
    out = tmp_path / "wake-floor.summary.json"
    assert main(["--steps", "3", "--step-ms", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["steps"] == 3 and doc["step_ms"] == 1.0 and doc["machine"]["cpu_probe_ms"] > 0
    assert doc["host_bound_steps"] >= 0 and json.loads(capsys.readouterr().out) == doc
