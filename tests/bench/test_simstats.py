"""GPU or host? The sim backend's step-period histogram and stats file, and the bench's
per-level difference of two snapshots (issue 16)."""

import json
import time

import pytest

from orpheus_bench import simstats
from orpheus_svc.engine.sim import backend as simb
from orpheus_svc.engine.sim.backend import SimBackend
from orpheus_svc.engine.sim.profiles import get_profile

from tests.engine_sim.test_sim_backend import FakeClock, _plan, make_gen
from tests.core.gen_helpers import set_counters

H100 = get_profile("h100-fp8")


def _backend(clock):
    return SimBackend(H100, num_slots=64, max_seq_len=4096, length_sigma=0.0,
                      clock=clock, sleep=clock.sleep)


def test_step_periods_are_counted_and_a_slow_host_shows():
    clock = FakeClock()
    be = _backend(clock)
    gens = [make_gen(i, seed=i, expected_frames=50) for i in range(1, 5)]
    be.step(_plan(1, prefill=gens))  # idle start: no period
    for g in gens:
        set_counters(g, num_generated=1)
    d = H100.step_seconds(4, 4 * 41)
    be.step(_plan(2, decode=gens))  # host kept up: period d
    for g in gens:
        set_counters(g, num_generated=2)
    clock.advance(3 * d)  # host slower than the step
    be.step(_plan(3, decode=gens))  # period 3 d, host-bound
    s = be.stats()
    assert sum(s["step_hist"].values()) == 2
    assert s["max_step_s"] == pytest.approx(3 * d)
    assert s["host_bound_steps"] == 1
    buckets = s["step_buckets"]
    p50 = simstats.hist_quantile_s(s["step_hist"], buckets, 50)
    p99 = simstats.hist_quantile_s(s["step_hist"], buckets, 99)
    assert d <= p50 <= d * 1.05
    assert 3 * d <= p99 <= 3 * d * 1.05


def _snap(pid=1, **kw):
    base = {"pid": pid, "profile": "h100-fp8", "steps": 0, "rows": 0, "host_bound_steps": 0,
            "host_excess_s": 0.0, "modelled_s": 0.0, "max_step_s": 0.0, "step_hist": {},
            "step_buckets": {"first_s": 1e-4, "ratio": 1.05, "count": 241}}
    return {**base, **kw}


def test_delta_splits_the_excess_by_late_wake_ups_only_when_the_server_counts_them():
    old = simstats.delta(_snap(steps=1), _snap(steps=9, host_bound_steps=2))
    assert "late_wakes" not in old  # an older server: no zeros that look measured
    wake = dict(host_bound_by_wake_steps=0, host_excess_wake_s=0.0, late_wakes=0,
                late_wake_s=0.0)
    before = _snap(steps=10, **wake)
    after = _snap(steps=50, host_bound_steps=4, host_excess_s=0.04,
                  **{**wake, "host_bound_by_wake_steps": 3, "host_excess_wake_s": 0.03,
                     "late_wakes": 5, "late_wake_s": 0.05})
    d = simstats.delta(before, after)
    assert (d["host_bound_by_wake_steps"], d["late_wakes"]) == (3, 5)
    assert d["host_excess_wake_s"] == pytest.approx(0.03)
    assert d["late_wake_s"] == pytest.approx(0.05)


def test_delta_is_the_level_alone():
    b = simb.STEP_BUCKETS_S
    i10 = next(i for i, e in enumerate(b) if e >= 0.010)  # ~10 ms
    i30 = next(i for i, e in enumerate(b) if e >= 0.030)
    before = _snap(steps=100, rows=1000, host_bound_steps=5, host_excess_s=0.5, modelled_s=1.0,
                   max_step_s=0.5, step_hist={str(i10): 100})
    after = _snap(steps=300, rows=5000, host_bound_steps=15, host_excess_s=0.8, modelled_s=3.0,
                  max_step_s=0.5, step_hist={str(i10): 280, str(i30): 20})
    d = simstats.delta(before, after)
    assert d["steps"] == 200 and d["mean_batch"] == 20
    assert d["host_bound_steps"] == 10 and d["host_bound_fraction"] == 0.05
    assert d["host_excess_s"] == pytest.approx(0.3)
    assert d["gpu_share"] == pytest.approx(2.0 / 2.3)
    sm = d["step_ms"]
    assert sm["n"] == 200
    assert sm["p50"] == pytest.approx(b[i10] * 1000, abs=1e-3)
    assert sm["p95"] == sm["p99"] == pytest.approx(b[i30] * 1000, abs=1e-3)
    # the all-time max (0.5 s) was before this level: the level's max is its top bucket
    assert sm["max"] == pytest.approx(b[i30] * 1000, abs=1e-3)
    assert simstats.delta(before, _snap(pid=2)) is None  # a restarted server: no delta
    assert simstats.delta(None, after) is None


def test_the_stats_file_is_written_and_read_fresh(monkeypatch, tmp_path):
    path = tmp_path / "sim-stats.json"
    monkeypatch.setenv(simb.STATS_FILE_ENV, str(path))
    be = SimBackend(H100, num_slots=8, max_seq_len=4096, sleep=lambda s: None)
    t0 = time.time()
    doc = simstats.read(str(path), not_before=t0, wait_s=3.0)
    assert doc is not None and doc["written_at"] >= t0 and doc["profile"] == "h100-fp8"
    assert {"host_bound_steps", "host_excess_s", "step_hist", "max_step_s"} <= set(doc)
    be.step(_plan(1, prefill=[make_gen(1)]))
    doc2 = simstats.read(str(path), not_before=time.time(), wait_s=3.0)
    assert doc2["steps"] == 1 and doc2["pid"] == doc["pid"]
    assert simstats.read(str(tmp_path / "none.json"), wait_s=0.1) is None
    json.loads(path.read_text())  # always whole (written atomically)
