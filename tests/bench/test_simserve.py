"""The sim against the H200 run's server: the h200-server profile, simulated on a virtual
clock with the run's load (bench/orpheus_bench/simserve.py), gives the run's step period and
TTFB p95 at 128 and 256 sessions (bench/results/gpu-engine-h200/serve.summary.json).

A model checked against recorded figures, not a timing of this machine: the clock moves only
by the modelled steps, so the result is the same on any machine (the determinism test)."""

import json
from pathlib import Path

import pytest

from orpheus_bench.simserve import Level, simulate
from orpheus_svc.engine.sim.fit import ServedLevel
from orpheus_svc.engine.sim.profiles import get_profile

RUN = Path(__file__).resolve().parents[2] / "bench" / "results" / "gpu-engine-h200"
TOLERANCE = 0.25


def run_levels() -> dict[int, ServedLevel]:
    doc = json.loads((RUN / "serve.summary.json").read_text())
    return {r["sessions"]: ServedLevel.from_run(r) for r in doc["runs"]}


@pytest.fixture(scope="module")
def simulated():
    profile = get_profile("h200-server")
    return {n: simulate(profile, Level(sessions=n)) for n in (128, 256)}


@pytest.mark.parametrize("sessions", [128, 256])
def test_the_h200_server_profile_gives_the_runs_step_period(simulated, sessions):
    run, sim = run_levels()[sessions], simulated[sessions]
    assert sim.step_period_s == pytest.approx(run.period_s, rel=TOLERANCE)


@pytest.mark.parametrize("sessions", [128, 256])
def test_the_h200_server_profile_gives_the_runs_ttfb_p95(simulated, sessions):
    run, sim = run_levels()[sessions], simulated[sessions]
    assert sim.ttfb_p95_s == pytest.approx(run.ttfb_p95_s, rel=TOLERANCE)


@pytest.mark.parametrize("sessions", [128, 256])
def test_the_simulated_level_carries_the_runs_load(simulated, sessions):
    """Same segments (the server's segmenter on the same texts) and every one run to its
    slot's budget, as random weights did: generations and tokens within 1% of the run's."""
    run, sim = run_levels()[sessions], simulated[sessions]
    assert len(sim.ttfb_s) == sessions
    assert sim.generations == pytest.approx(run.generations, rel=0.01)
    assert sim.tokens == pytest.approx(run.tokens, rel=0.01)


def test_the_device_only_profile_misses_the_served_period():
    """What the served-step terms are for: the graph's device time alone gives less than
    half the run's step period at 128 sessions."""
    sim = simulate(get_profile("h200-bf16"), Level(sessions=128))
    assert sim.step_period_s < 0.5 * run_levels()[128].period_s


def test_a_level_is_the_same_every_time():
    profile = get_profile("h200-server")
    a, b = (simulate(profile, Level(sessions=16, ramp_s=2.0)) for _ in range(2))
    assert a.summary() == b.summary() and a.ttfb_s == b.ttfb_s
    assert a.steps > 0 and a.wall_s > 2.0
