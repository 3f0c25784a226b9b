"""What every backend does, one suite for all (issue 38): torch, graph (uncaptured, the CPU
path of its logic), sim, and trtllm through its stand-in LLM, each driven by the real
EngineLoop with a recording flusher:

- a cancelled running generation ends "cancelled", its slot is free at the next step (a
  queued generation gets it) and its neighbour finishes untouched;
- the same seed gives the same tokens, on a fresh backend;
- every token obeys the audio grammar (the frame position's ids; stop only on a frame
  boundary, after at least one frame);
- a backend that runs ahead keeps a row that sampled the stop id in the next step, and its
  extra token is dropped: the frames are those of a run that does not run ahead;
- a failing row fails only itself where the backend can re-run a step on part of its rows
  (capabilities.retry_safe) or runs each request apart (trtllm); the graph engine, whose
  step writes every row's device state at once, fails that step's rows and goes on.

The trtllm stand-in (tests/trtllm/standin.py) plays the model: each request streams a
grammar-legal token sequence drawn from its SamplingParams seed, as TensorRT-LLM would from
its own sampler; seed 999 streams a few frames and then never ends (until aborted).
"""

from __future__ import annotations

import dataclasses
import threading
from functools import partial

import numpy as np
import pytest
import torch

from orpheus_svc.core.grammar import position_id_range
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.tokens import END_OF_SPEECH_ID, FRAME_TOKENS
from orpheus_svc.engine.graph.backend import GraphBackend
from orpheus_svc.engine.loop import EngineLoop
from orpheus_svc.engine.model.llama import SlotLlama
from orpheus_svc.engine.sim.backend import SimBackend
from orpheus_svc.engine.sim.profiles import get_profile
from orpheus_svc.engine.torch.backend import TorchBackend
from orpheus_svc.engine.trtllm.backend import TrtllmBackend
from orpheus_svc.engine.trtllm.build import sampling_kwargs
from orpheus_svc.engine.trtllm.stream import StreamBridge
from orpheus_svc.models.demo import random_state_dict
from tests.trtllm.driver import _params
from tests.trtllm.standin import StandInLLM

from .harness import Collector, RecordingFlusher
from .tiny import tiny_spec

PROMPT = (128259, 128000, 40, 41, 42, 128009, 128260, 128261, 128257)
ENDLESS = 999  # the trtllm stand-in's seed of a request that never ends by itself


def _model(slots, seq, spare):
    spec = tiny_spec()
    w = random_state_dict(spec, 0, dtype=torch.float32)
    w = {k: (v * 10 if not k.endswith("norm.weight") else v) for k, v in w.items()}
    return SlotLlama(spec, w, num_slots=slots, max_seq_len=seq, spare_slots=spare)


def _seeded_stream(seed: int, max_tokens: int) -> list[int]:
    """A grammar-legal token stream from a seed: what the stand-in's model generates."""
    rng = np.random.default_rng(seed)
    frames = int(rng.integers(3, 9))
    ids = [position_id_range(p)[0] + int(rng.integers(0, 4096))
           for _ in range(frames) for p in range(FRAME_TOKENS)] + [END_OF_SPEECH_ID]
    return ids[:max_tokens]


def _script(req):
    kw = req.params.kwargs
    if kw["seed"] == ENDLESS:  # some frames, then nothing until it is aborted
        return [(_seeded_stream(1, 14), None)]
    ids = _seeded_stream(kw["seed"], kw["max_tokens"])
    done = "stop" if ids and ids[-1] == END_OF_SPEECH_ID else "length"
    return [(ids[:7], None), (ids[7:], done)]


BUILDERS = {
    "torch": lambda slots, seq: TorchBackend(_model(slots, seq, 0)),
    "graph": lambda slots, seq: GraphBackend(_model(slots, seq, 1), slots, graphs=False),
    "sim": lambda slots, seq: SimBackend(get_profile("h100-fp8"), num_slots=slots,
                                         max_seq_len=seq, sleep=lambda s: None),
    "trtllm": lambda slots, seq: TrtllmBackend(
        StreamBridge(StandInLLM(script=_script)), partial(_params, sampling_kwargs),
        num_slots=slots, max_seq_len=seq, wait_s=0.005),
}
NAMES = sorted(BUILDERS)


class Tokens:
    """Wraps a backend's step/collect to keep every generation's tokens as they came, with
    the frame position and stop permission of the row that sampled each."""

    def __init__(self, backend):
        self.backend = backend
        self.seen: dict[int, list[tuple[int, int, bool]]] = {}
        self.lock = threading.Lock()
        if backend.capabilities.runs_ahead:
            launch, collect = backend.launch, backend.collect
            backend.launch = lambda plan: (plan, launch(plan))
            backend.collect = lambda handle: self._keep(handle[0], collect(handle[1]))
        step = backend.step
        backend.step = lambda plan: self._keep(plan, step(plan))

    def _keep(self, plan, result):
        with self.lock:
            rows = {r.gen_id: r for r in plan.rows}
            for gid, toks in result.tokens.items():
                r = rows.get(gid)
                for k, t in enumerate(toks):  # a streaming backend: its positions follow on
                    p = None if r is None else (r.frame_position + k) % FRAME_TOKENS
                    # the row's stop permission is for its first token (None: not stated)
                    ok = None if r is None or k else r.stop_allowed
                    self.seen.setdefault(gid, []).append((t, p, ok))
            if result.decode_tokens is not None:
                for r, t in zip(plan.decode, result.decode_tokens.tolist()):
                    self.seen.setdefault(r.gen_id, []).append((t, r.frame_position,
                                                               r.stop_allowed))
        return result


def _engine(name, slots=2, seq=256):
    backend = BUILDERS[name](slots, seq)
    tokens = Tokens(backend)
    events = Collector()
    flusher = RecordingFlusher(events)
    core = EngineLoop(backend, flusher, events, seed=1)
    return core, flusher, events, tokens


def _request(seed, max_tokens=56, session="s"):
    return GenerationRequest(session, 0, PROMPT, max_tokens, SamplingParams(seed=seed))


def _run(name, requests, **kw):
    core, flusher, events, tokens = _engine(name, **kw)
    core.start()
    try:
        ids = [core.submit(r) for r in requests]
        events.wait_for(lambda ev: events.ended(ids), timeout=60)
    finally:
        core.stop()
    return ids, flusher, events, tokens


@pytest.mark.parametrize("name", NAMES)
def test_the_same_seed_gives_the_same_tokens(name):
    def frames():
        ids, flusher, events, _ = _run(name, [_request(41), _request(42)])
        assert all(events.finish(g).reason in ("stop", "length") for g in ids)
        return [flusher.frames[g] for g in ids]
    first = frames()
    assert first[0] and first[0] != first[1]  # two seeds: two streams
    assert frames() == first


@pytest.mark.parametrize("name", NAMES)
def test_every_token_obeys_the_audio_grammar(name):
    ids, flusher, events, tokens = _run(name, [_request(50 + i, 70) for i in range(3)],
                                        slots=3)
    for gid in ids:
        seen = tokens.seen[gid]
        assert seen
        kept = seen[:len(flusher.frames[gid]) * FRAME_TOKENS + 1]  # past a stop: dropped
        for k, (tok, p, stop_ok) in enumerate(kept):
            assert p == k % FRAME_TOKENS
            if tok == END_OF_SPEECH_ID:
                assert p == 0 and k >= FRAME_TOKENS and stop_ok in (True, None), (gid, k)
                break
            lo, hi = position_id_range(p)
            assert lo <= tok < hi, (gid, k, tok, p)


@pytest.mark.parametrize("name", NAMES)
def test_a_cancelled_row_frees_its_slot_and_its_neighbour_finishes_untouched(name):
    alone, flusher_alone, _, _ = _run(name, [_request(61, 70)])
    want = flusher_alone.frames[alone[0]]
    core, flusher, events, _ = _engine(name, slots=2, seq=2048)
    core.start()
    try:
        # long enough not to end by itself first (the sim: a long expected length)
        victim = core.submit(dataclasses.replace(
            _request(ENDLESS if name == "trtllm" else 60, 1900, "victim"),
            expected_frames=1000))
        neighbour = core.submit(_request(61, 70, "neighbour"))
        events.wait_for(lambda ev: len(flusher.frames[victim]) >= 1)
        core.cancel(victim)
        late = core.submit(_request(62, 21, "late"))  # needs the victim's slot
        events.wait_for(lambda ev: events.ended([victim, neighbour, late]), timeout=60)
    finally:
        core.stop()
    assert events.finish(victim).reason == "cancelled"
    assert events.finish(late).reason in ("stop", "length")
    assert flusher.frames[neighbour] == want


@pytest.mark.parametrize("name", [n for n in NAMES if n != "trtllm"])
def test_a_failing_row_fails_only_what_the_backend_can_isolate(name):
    """A row whose presence makes the step raise (before the backend touches anything)."""
    core, flusher, events, _ = _engine(name, slots=4)
    bad_seed = 77
    backend = core.backend
    method = "launch" if backend.capabilities.runs_ahead else "step"
    inner = getattr(backend, method)

    def failing(plan):
        if any(r.request.sampling.seed == bad_seed for r in plan.rows):
            raise RuntimeError("injected row fault")
        return inner(plan)
    setattr(backend, method, failing)
    core.start()
    try:
        ids = [core.submit(_request(bad_seed if i == 1 else 70 + i, 35)) for i in range(4)]
        events.wait_for(lambda ev: events.ended(ids), timeout=60)
    finally:
        core.stop()
    reasons = [events.finish(g).reason for g in ids]
    assert reasons[1] == "error"
    if backend.capabilities.retry_safe:  # re-run without it: only it fails
        assert all(r in ("stop", "length") for r in reasons[:1] + reasons[2:])
    else:  # the graph engine: the step's rows fail together, the engine goes on
        assert "error" in reasons
        later = _request(90, 14)
        core2, _, events2, _ = _engine(name, slots=4)
        core2.start()
        try:
            g = core2.submit(later)
            events2.wait_for(lambda ev: events2.ended([g]), timeout=60)
        finally:
            core2.stop()
        assert events2.finish(g).reason == "length"


def test_a_failing_request_of_the_trtllm_backend_fails_only_itself():
    """TensorRT-LLM runs each request apart: a request that fails in its stream fails alone."""
    def script(req):
        if req.params.kwargs["seed"] == 77:
            req.fail(RuntimeError("injected request fault"))
            return []
        return _script(req)

    backend = TrtllmBackend(StreamBridge(StandInLLM(script=script)),
                            partial(_params, sampling_kwargs), num_slots=4, max_seq_len=256,
                            wait_s=0.005)
    events = Collector()
    core = EngineLoop(backend, RecordingFlusher(events), events, seed=1)
    core.start()
    try:
        ids = [core.submit(_request(77 if i == 1 else 70 + i, 35)) for i in range(4)]
        events.wait_for(lambda ev: events.ended(ids), timeout=60)
    finally:
        core.stop()
    reasons = [events.finish(g).reason for g in ids]
    assert reasons[1] == "error" and all(r in ("stop", "length") for r in reasons[:1] + reasons[2:])


@pytest.mark.parametrize("name", [n for n in NAMES if BUILDERS[n](2, 64).capabilities.runs_ahead])
def test_running_ahead_a_stopped_row_is_stepped_once_more_and_its_extra_token_dropped(name):
    """A run-ahead backend gives the frames of the same backend stepped without running
    ahead, and the row that sampled the stop id was in the next step's plan too."""
    plans = []

    def run(ahead):
        core, flusher, events = _stop_engine(name, 2, 256, ahead, plans.append)
        core.start()
        try:
            g = core.submit(_request(5, 200))
            events.wait_for(lambda ev: events.ended([g]), timeout=60)
        finally:
            core.stop()
        return g, flusher.frames[g], events.finish(g)

    g, frames, finish = run(True)
    g2, frames2, finish2 = run(False)
    assert finish.reason == finish2.reason == "stop"
    assert frames == frames2
    steps_with_it = [p for p in plans if g in [r.gen_id for r in p.rows]]
    # its frames' tokens + the stop; the step after the stop still held it (run ahead)
    assert len(steps_with_it) == len(frames) * FRAME_TOKENS + 2


def _stop_engine(name, slots, seq, ahead, on_launch=None):
    """An EngineLoop over a run-ahead backend whose generations end by themselves (the stop
    logit boosted); `ahead` False: the same backend stepped without running ahead."""
    backend = {"graph": lambda: GraphBackend(_stop_model(slots, seq), slots,
                                             graphs=False)}[name]()
    if on_launch is not None and ahead:
        launch = backend.launch
        backend.launch = lambda plan: on_launch(plan) or launch(plan)
    if not ahead:
        backend.capabilities = dataclasses.replace(backend.capabilities, runs_ahead=False)
    events = Collector()
    flusher = RecordingFlusher(events)
    return EngineLoop(backend, flusher, events, seed=1), flusher, events


def _stop_model(slots, seq):
    """The tiny model with a stronger stop logit, so that a generation ends by itself."""
    spec = tiny_spec()
    w = random_state_dict(spec, 0, dtype=torch.float32)
    w = {k: (v * 10 if not k.endswith("norm.weight") else v) for k, v in w.items()}
    w["model.embed_tokens.weight"][END_OF_SPEECH_ID] *= 40
    return SlotLlama(spec, w, num_slots=slots, max_seq_len=seq, spare_slots=1)


@pytest.mark.parametrize("name", [n for n in NAMES if BUILDERS[n](2, 64).capabilities.runs_ahead])
def test_run_ahead_holds_while_generations_join_leave_and_are_cancelled(name):
    """Issue 32 item 2: under churn (more generations than slots, new ones arriving while
    others run, one cancelled mid-way) every step but the first is launched while the one
    before it is in flight (engine/ahead.py), and each seeded generation's frames are those
    of the same load stepped without running ahead (its rows are batch-invariant: a row's
    tokens do not depend on when its neighbours joined). Before, a step was planned ahead
    only while nothing waited or was cancelled."""
    def run(ahead):
        core, flusher, events = _stop_engine(name, 3, 512, ahead)
        core.start()
        try:
            first = [core.submit(_request(70 + i, 120, f"a{i}")) for i in range(2)]
            victim = core.submit(_request(80, 400, "victim"))
            events.wait_for(lambda ev: len(flusher.frames[first[0]]) >= 1)
            later = [core.submit(_request(90 + i, 120, f"b{i}")) for i in range(4)]
            events.wait_for(lambda ev: len(flusher.frames[victim]) >= 2)
            core.cancel(victim)
            ids = first + later
            events.wait_for(lambda ev: events.ended(ids + [victim]), timeout=120)
        finally:
            core.stop()
        assert events.finish(victim).reason == "cancelled"
        assert all(events.finish(g).reason in ("stop", "length") for g in ids)
        return [flusher.frames[g] for g in ids], core.ahead

    frames, record = run(True)
    frames_alone, _ = run(False)
    assert frames == frames_alone and all(frames)
    assert record.steps > 30, record.as_dict()
    # the first step follows an idle engine; the others run ahead, but for a step whose
    # in-flight rows all ended by length with nothing else to run (next_empty)
    assert record.alone["idle"] == 1 and record.alone["launch_failed"] == 0
    assert record.ahead >= record.steps - 1 - record.alone["next_empty"]
    assert record.share >= 0.95, record.as_dict()
