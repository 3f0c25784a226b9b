"""Table rows and plots render from a level result (synthetic), JSON round-trips."""

import io
import json

import pytest

from orpheus_bench.metrics import SessionTrace, aggregate, session_metrics, slo_check
from orpheus_bench.report import cpu_probe_ms, machine, plot, row, table, write_json


def level(c, late=False):
    traces = []
    for i in range(4):
        period = 0.2 if late and i == 0 else 0.1
        traces.append(SessionTrace(index=i, t_start=0.0, t_end=2.0,
                                   arrivals=[(0.05 + k * period, 2400) for k in range(10)]))
    r = {"label": "scaling", "concurrency": c, "requests": 4, "input": "whole", "seeded": False,
         **aggregate([session_metrics(t) for t in traces], 2.0)}
    r["server"] = {"cpu_util": 0.5, "cpu_s_per_audio_s": 0.002, "tokens_per_s": 1000.0}
    r["load"] = {"cpu_util_per_proc": [0.1], "maybe_saturated": False}
    r["slo"] = slo_check(r)
    return r


def test_row_and_table_show_the_level():
    r = level(8, late=True)
    line = row(r)
    assert line.split()[1:3] == ["no", "8"] and "FAIL" in line
    out = io.StringIO()
    table([level(1), r], out)
    assert len(out.getvalue().splitlines()) == 3


def test_the_row_says_whether_the_sessions_were_seeded():
    """Issue 33: a seeded load measured another path; the table says which one ran."""
    seeded = {**level(8), "seeded": True}
    assert row(seeded).split()[1] == "yes" and row(level(8)).split()[1] == "no"
    old = level(8)
    del old["seeded"]  # a result from before the field: unknown, not "no"
    assert row(old).split()[1] == "-"


def test_the_sim_note_says_how_much_of_the_host_time_late_wake_ups_caused():
    sim = {"steps": 900, "host_bound_steps": 12, "host_excess_s": 0.05,
           "step_ms": {"p50": 5.0, "p95": 7.0, "p99": 9.0, "max": 30.0}}
    old, new = level(8), level(16)
    old["sim"] = sim
    new["sim"] = {**sim, "host_bound_by_wake_steps": 9, "host_excess_wake_s": 0.04,
                  "late_wakes": 31, "late_wake_s": 0.2}
    out = io.StringIO()
    table([old, new], out)
    notes = [line for line in out.getvalue().splitlines() if "host-bound" in line]
    assert "wake" not in notes[0]  # stats from before the counters: nothing invented
    assert "12 host-bound (0.05 s over the GPU model; 9 steps and 0.04 s of it from 31 late " \
           "wake-ups)" in notes[1]


def test_json_is_written_atomically_and_reads_back(tmp_path):
    doc = {"runs": [level(4)]}
    path = tmp_path / "sub" / "r.json"
    write_json(path, doc)
    assert json.loads(path.read_text())["runs"][0]["concurrency"] == 4
    assert not list(path.parent.glob("*.tmp"))


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    files = plot([level(1), level(8, late=True), level(16)], tmp_path, "test", 150)
    assert [p.rsplit("/", 1)[1] for p in files] == ["ttfb.png", "underruns.png"]
    assert all((tmp_path / f).stat().st_size > 1000 for f in ("ttfb.png", "underruns.png"))


def test_the_cpu_probe_reports_its_fastest_timing_in_ms():
    ticks = iter([0.0, 0.030, 1.0, 1.019, 2.0, 2.025])  # three probes: 30, 19, 25 ms
    assert cpu_probe_ms(repeat=3, clock=lambda: next(ticks)) == pytest.approx(19.0)


def test_every_run_records_the_machine_speed_probe():
    m = machine()
    assert m["cpu_probe_ms"] > 0 and m["cpu_count"] >= 1 and m["platform"]
