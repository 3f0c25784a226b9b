"""The backend contract (core/step.py): every backend states its capabilities and implements
release() and close(); EngineLoop derives the scheduler settings from config + capabilities
in one place; plans are immutable rows, never the scheduler's Generations."""

import dataclasses
from functools import partial

import pytest

from orpheus_svc.core.generation import GenerationRequest, SamplingParams
from orpheus_svc.core.scheduler import SchedulerSettings
from orpheus_svc.core.step import BackendCapabilities, StepPlan, StepRow
from orpheus_svc.engine.loop import EngineLoop, effective_settings
from orpheus_svc.engine.sim.backend import SimBackend
from orpheus_svc.engine.sim.profiles import get_profile
from orpheus_svc.engine.torch.backend import TorchBackend
from orpheus_svc.engine.trtllm.backend import TrtllmBackend
from orpheus_svc.engine.trtllm.build import sampling_kwargs
from orpheus_svc.engine.trtllm.stream import StreamBridge
from tests.trtllm.driver import _params
from tests.trtllm.standin import StandInLLM

from .harness import Collector, RecordingFlusher
from .tiny import tiny_model

PROMPT = (128259, 128000, 40, 41, 42, 128009, 128260, 128261, 128257)
CONFIGURED = SchedulerSettings(max_batch_size=4, max_prefill_tokens=512, max_ahead_seconds=2.0)


def test_a_backend_that_samples_per_step_runs_the_configured_settings():
    caps = BackendCapabilities(name="x", num_slots=16, max_seq_len=256, retry_safe=True)
    assert effective_settings(CONFIGURED, caps) is CONFIGURED


def test_a_backend_that_streams_deltas_gets_every_row_no_prefill_budget_and_no_horizon():
    caps = BackendCapabilities(name="x", num_slots=16, max_seq_len=256, streams_deltas=True)
    got = effective_settings(CONFIGURED, caps)
    assert got.max_batch_size == 16 and got.max_prefill_tokens == 16 * 256
    assert got.max_ahead_seconds == 0.0
    assert dataclasses.replace(got, max_batch_size=4, max_prefill_tokens=512,
                               max_ahead_seconds=2.0) == CONFIGURED  # nothing else changes


def _backends():
    llm = StandInLLM()
    bridge = StreamBridge(llm)
    return [
        TorchBackend(tiny_model(num_slots=2, max_seq_len=64)),
        SimBackend(get_profile("h100-fp8"), num_slots=2, max_seq_len=64, sleep=lambda s: None),
        TrtllmBackend(bridge, partial(_params, sampling_kwargs), num_slots=2, max_seq_len=64),
    ]


def test_every_backend_states_its_capabilities_and_implements_release_and_close():
    for backend in _backends():
        caps = backend.capabilities
        assert isinstance(caps, BackendCapabilities)
        assert (caps.num_slots, caps.max_seq_len) == (2, 64)
        assert list(backend.release([12345])) == [12345]  # unknown: nothing held
        backend.close()
    names = [b.capabilities for b in _backends()]
    assert [(c.name, c.retry_safe, c.streams_deltas) for c in names] == [
        ("torch", True, False), ("sim", True, False), ("trtllm", False, True)]
    for b in _backends():
        b.close()


class _Recording(TorchBackend):
    def __init__(self, model):
        super().__init__(model)
        self.plans, self.released = [], []

    def step(self, plan):
        self.plans.append(plan)
        return super().step(plan)

    def release(self, gen_ids):
        self.released.extend(gen_ids)
        return super().release(gen_ids)


def test_the_loop_hands_frozen_rows_and_releases_every_ended_generation():
    events = Collector()
    backend = _Recording(tiny_model(num_slots=2, max_seq_len=128))
    core = EngineLoop(backend, RecordingFlusher(events), events, seed=1)
    core.start()
    try:
        gid = core.submit(GenerationRequest("s", 0, PROMPT, 14, SamplingParams(seed=3)))
        events.wait_for(lambda ev: events.ended([gid]))
    finally:
        core.stop()
    assert events.finish(gid).reason == "length"
    assert backend.released == [gid]
    rows = [r for p in backend.plans for r in p.rows]
    assert all(isinstance(p, StepPlan) and isinstance(r, StepRow) for p in backend.plans
               for r in p.rows)
    assert [r.num_generated for r in rows] == list(range(14))
    assert rows[0].prefill and not any(r.prefill for r in rows[1:])
    assert [r.position for r in rows[1:]] == [len(PROMPT) + i for i in range(13)]
    assert [r.frame_position for r in rows] == [i % 7 for i in range(14)]
    assert [r.stop_allowed for r in rows] == [i == 7 for i in range(14)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        backend.plans[0].prefill = ()
