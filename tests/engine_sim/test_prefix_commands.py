"""EngineLoop.add_prefix / drop_prefix (engine/loop.py): the backend's prefix pool is
written by the engine thread between steps; a full pool refuses a prefix, changing nothing;
a request whose prefix the pool holds counts only its turn against the prefill budget."""

import dataclasses
import threading

import pytest

from orpheus_svc.core.prefix_book import PrefixPoolFull
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.engine.intake import row_problem
from orpheus_svc.engine.loop import EngineLoop
from orpheus_svc.engine.sim.backend import SimBackend
from orpheus_svc.engine.sim.profiles import get_profile

from ..engine.harness import Collector, RecordingFlusher

PREFIX = tuple(range(1000, 1100))
TURN = (128259, 128000, 40, 41, 42, 128009, 128260, 128261, 128257)


class Recording(SimBackend):
    """The sim, recording on which thread the pool was written and each prefill's turn."""

    def __init__(self, pool_tokens):
        super().__init__(get_profile("h100-fp8"), num_slots=4, max_seq_len=512,
                         prefix_pool_tokens=pool_tokens)
        self.log = []

    def add_prefix(self, ids):
        self.log.append(("add", threading.current_thread().name))
        super().add_prefix(ids)

    def step(self, plan):
        self.log.extend(("prefill", r.request.prefix_cached) for r in plan.prefill)
        return super().step(plan)


def _engine(pool_tokens):
    events = Collector()
    backend = Recording(pool_tokens)
    core = EngineLoop(backend, RecordingFlusher(events), events)
    core.start()
    return core, backend, events


def _req():
    return GenerationRequest("s", 0, PREFIX + TURN, 70, SamplingParams(seed=1),
                             prefix_len=len(PREFIX))


def test_a_prefix_is_written_on_the_engine_thread_and_marks_later_requests():
    core, backend, events = _engine(pool_tokens=150)
    try:
        core.add_prefix(PREFIX).result(30)
        assert backend.log == [("add", "engine-core")] and backend.holds_prefix(PREFIX)
        gid = core.submit(_req())
        events.wait_for(lambda evs: any(getattr(e, "final", False) and e.gen_id == gid
                                        for e in evs), 30)
        assert ("prefill", True) in backend.log
        # a second prefix does not fit beside the first: refused, the pool unchanged
        with pytest.raises(PrefixPoolFull, match="engine.prefix_pool_mb"):
            core.add_prefix(tuple(range(5000, 5060))).result(30)
        assert len(backend.prefixes) == 1
        core.drop_prefix(PREFIX).result(30)
        assert not backend.holds_prefix(PREFIX)
        gid = core.submit(_req())
        events.wait_for(lambda evs: any(getattr(e, "final", False) and e.gen_id == gid
                                        for e in evs), 30)
        assert backend.log[-1] == ("prefill", False)  # computed with its turn again
    finally:
        core.stop()


def test_without_a_pool_a_prefix_is_refused_at_once():
    core, backend, _ = _engine(pool_tokens=0)
    try:
        with pytest.raises(RuntimeError, match="no prefix pool"):
            core.add_prefix(PREFIX).result(5)
        assert backend.log == []
    finally:
        core.stop()


def test_a_prefix_that_leaves_no_turn_is_refused_as_the_rows_problem():
    req = _req()
    assert row_problem(req) is None
    assert "prefix_len" in row_problem(dataclasses.replace(req, prefix_len=len(req.prompt_ids)))
    assert "prefix_len" in row_problem(dataclasses.replace(req, prefix_len=-1))
