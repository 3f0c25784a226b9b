"""The scheduling comparison's baselines (bench/orpheus_bench/policies.py), injected into the
production scheduler as SchedulerSettings.priority."""

import dataclasses

import pytest

from orpheus_bench.policies import POLICIES, fifo, main, round_robin
from orpheus_svc.core.scheduler_settings import SchedulerSettings, deadline_priority
from tests.core.sched_helpers import make_gen, make_scheduler, run_step


def _three_sessions_one_ahead(priority=deadline_priority):
    s = make_scheduler(slots=3, batch=3)
    s.settings = SchedulerSettings(max_batch_size=1, max_waiting=8, aging_steps=10_000,
                                   priority=priority)
    gens = [make_gen(session=f"s{i}", arrival=float(i)) for i in range(3)]
    for g in gens:
        s.add(g)
    return s, gens


def test_fifo_policy_runs_in_arrival_order_only():
    s, gens = _three_sessions_one_ahead(fifo)
    for _ in range(20):
        plan, _ = run_step(s, 10.0)
        # the oldest forever: no TTFB turn for the others
        assert [r.gen_id for r in plan.rows] == [gens[0].gen_id]


def test_round_robin_policy_takes_turns():
    s, gens = _three_sessions_one_ahead(round_robin)
    ran = [run_step(s, 10.0)[0].rows[0].gen_id for _ in range(6)]
    assert ran == [g.gen_id for g in gens + gens]


def test_deadline_is_the_default_order():
    assert SchedulerSettings().priority is deadline_priority is POLICIES["deadline"]


def test_policies_entry_point_injects_the_order_into_serve(monkeypatch):
    seen = {}

    def fake_serve_main(config, *, priority=None):
        seen.update(config=config, priority=priority)
        return 0

    import orpheus_svc.app.server as app
    monkeypatch.setattr(app, "serve_main", fake_serve_main)
    assert main(["--policy", "round_robin", "--backend", "sim", "--port", "0"]) == 0
    assert seen["priority"] is round_robin and seen["config"].engine.backend == "sim"


def test_the_engine_takes_an_order_only_before_it_runs():
    from orpheus_svc.core.step import BackendCapabilities
    from orpheus_svc.engine.loop import EngineLoop

    class Backend:
        capabilities = BackendCapabilities("fake", num_slots=2, max_seq_len=64)

    loop = EngineLoop(Backend(), None, lambda events: None)
    loop.settings = dataclasses.replace(loop.settings, priority=fifo)
    assert loop.settings.priority is fifo
    loop._thread = object()  # as if started
    with pytest.raises(RuntimeError, match="fixed once"):
        loop.settings = SchedulerSettings()
