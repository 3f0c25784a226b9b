"""The backend contract (core/step.py), one suite for every backend (torch, graph, sim,
trtllm's stand-in): each states its capabilities and implements release() and close() (and
launch/collect when it runs ahead); EngineLoop derives the scheduler settings from config +
capabilities in one place; plans are immutable rows, never the scheduler's Generations."""

import dataclasses
from functools import partial

import pytest
import torch

from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.step import BackendCapabilities, StepPlan, StepRow
from orpheus_svc.engine.intake import effective_settings
from orpheus_svc.engine.loop import EngineLoop
from orpheus_svc.engine.sim.backend import SimBackend
from orpheus_svc.engine.sim.profiles import get_profile
from orpheus_svc.engine.graph.backend import GraphBackend
from orpheus_svc.engine.torch.backend import TorchBackend
from orpheus_svc.engine.model.llama import SlotLlama
from orpheus_svc.engine.trtllm.backend import TrtllmBackend
from orpheus_svc.engine.trtllm.build import sampling_kwargs
from orpheus_svc.engine.trtllm.stream import StreamBridge
from tests.trtllm.driver import _params
from tests.trtllm.standin import StandInLLM

from .harness import Collector, RecordingFlusher
from .tiny import tiny_model, tiny_spec
from orpheus_svc.models.demo import random_state_dict

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


def _torch(slots=2, seq=64):
    return TorchBackend(tiny_model(num_slots=slots, max_seq_len=seq))


def _graph(slots=2, seq=64):
    spec = tiny_spec()
    model = SlotLlama(spec, random_state_dict(spec, 0, dtype=torch.float32),
                      num_slots=slots, max_seq_len=seq, spare_slots=1)
    return GraphBackend(model, slots, graphs=False)  # the graph path's logic, uncaptured


def _sim(slots=2, seq=64):
    return SimBackend(get_profile("h100-fp8"), num_slots=slots, max_seq_len=seq,
                      sleep=lambda s: None)


def _trtllm(slots=2, seq=64):
    return TrtllmBackend(StreamBridge(StandInLLM()), partial(_params, sampling_kwargs),
                         num_slots=slots, max_seq_len=seq)


# Every backend, with what it says it is: (name, retry_safe, streams_deltas, runs_ahead).
BACKENDS = {
    "torch": (_torch, ("torch", True, False, False)),
    "graph": (_graph, ("graph", False, False, True)),
    "sim": (_sim, ("sim", True, False, False)),
    "trtllm": (_trtllm, ("trtllm", False, True, False)),
}
# The ones that sample one token per row per step (the others stream deltas)
PER_STEP = [name for name, (_, caps) in BACKENDS.items() if not caps[2]]


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_every_backend_states_its_capabilities_and_implements_release_and_close(name):
    make, expected = BACKENDS[name]
    backend = make()
    caps = backend.capabilities
    assert isinstance(caps, BackendCapabilities)
    assert (caps.num_slots, caps.max_seq_len) == (2, 64)
    assert (caps.name, caps.retry_safe, caps.streams_deltas, caps.runs_ahead) == expected
    assert list(backend.release([12345])) == [12345]  # unknown: nothing held
    if caps.runs_ahead:
        assert callable(backend.launch) and callable(backend.collect)
    backend.close()


def _recording(backend):
    """Record every plan the backend is handed (by step or, running ahead, by launch) and
    every release."""
    backend.plans, backend.released = [], []
    for method in ("step", "launch"):
        inner = getattr(backend, method, None)
        if inner is None:
            continue

        def recorded(plan, inner=inner):
            backend.plans.append(plan)
            return inner(plan)
        setattr(backend, method, recorded)
    release = backend.release

    def releasing(gen_ids):
        backend.released.extend(gen_ids)
        return release(gen_ids)
    backend.release = releasing
    return backend


@pytest.mark.parametrize("name", PER_STEP)
def test_the_loop_hands_frozen_rows_and_releases_every_ended_generation(name):
    events = Collector()
    backend = _recording(BACKENDS[name][0](slots=2, seq=128))
    core = EngineLoop(backend, RecordingFlusher(events), events, seed=1)
    core.start()
    try:
        gid = core.submit(GenerationRequest("s", 0, PROMPT, 14, SamplingParams(seed=3)))
        events.wait_for(lambda ev: events.ended([gid]))
    finally:
        core.stop()
    assert events.finish(gid).reason == "length"
    assert backend.released == [gid]
    plans = [p for p in backend.plans if backend.capabilities.runs_ahead or p.rows]
    rows = [r for p in plans for r in p.rows]
    assert all(isinstance(p, StepPlan) and isinstance(r, StepRow) for p in plans for r in p.rows)
    assert [r.num_generated for r in rows] == list(range(14))
    assert rows[0].prefill and not any(r.prefill for r in rows[1:])
    assert [r.position for r in rows[1:]] == [len(PROMPT) + i for i in range(13)]
    assert [r.frame_position for r in rows] == [i % 7 for i in range(14)]
    assert [r.stop_allowed for r in rows] == [i == 7 for i in range(14)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plans[0].prefill = ()
