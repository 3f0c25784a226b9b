"""The graph engine (engine/graph) without a GPU: its decode step on static buffers, padded to
a batch bucket with the dummy slot, the token choice on the device, and run-ahead through
EngineLoop must give exactly the eager backend's tokens for the same seeds.

Float64 on the CPU: the two paths order some sums differently (one GEMM over the 7 x 4096
audio rows and a gather, against one GEMM per frame position), and float64 keeps those
differences far below what could move a float32 logit, so any token difference is a bug."""


import numpy as np
import pytest
import torch

from orpheus_svc.core.generation import Generation
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.scheduler import Scheduler
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.tokens import END_OF_SPEECH_ID
from orpheus_svc.engine.graph.backend import GraphBackend
from orpheus_svc.engine.graph.rows import INPUT_ROWS, PrefillRow
from orpheus_svc.engine.loop import EngineLoop
from orpheus_svc.engine.torch.backend import TorchBackend
from orpheus_svc.engine.model.llama import SlotLlama

from .harness import Collector, RecordingFlusher
from .tiny import tiny_spec

from orpheus_svc.models.demo import random_state_dict

PROMPT = (128259, 128000, 40, 41, 42, 128009, 128260, 128261, 128257)


def _weights(stop_boost: float = 1.0):
    spec = tiny_spec()
    w = random_state_dict(spec, 0, dtype=torch.float32)
    w = {k: (v * 10 if not k.endswith("norm.weight") else v) for k, v in w.items()}
    w["model.embed_tokens.weight"][END_OF_SPEECH_ID] *= stop_boost  # tied head: stops likelier
    return spec, w


def _model(graph: bool, quantization="none", slots=6, seq=160, stop_boost=1.0):
    spec, w = _weights(stop_boost)
    return SlotLlama(spec, w, num_slots=slots, max_seq_len=seq, dtype=torch.float64,
                     quantization=quantization, spare_slots=1 if graph else 0)


def _graph(quantization="none", max_batch=6, **kw):
    return GraphBackend(_model(True, quantization, **kw), max_batch, graphs=False)


def _request(i, max_tokens=40, temperature=0.6, top_p=0.8, penalty=1.1):
    prompt = PROMPT[:5 + i % 3] + PROMPT[5:]
    return GenerationRequest(f"s{i}", 0, prompt, max_tokens,
                             SamplingParams(temperature, top_p, penalty, seed=100 + i))


def _drive(backend, requests, max_batch=6):
    """Schedule and step by hand (no thread): tokens per generation id."""
    sched = Scheduler(SlotPool(backend.capabilities.num_slots, backend.capabilities.max_seq_len),
                      SchedulerSettings(max_batch_size=max_batch))
    for i, req in enumerate(requests):
        sched.add(Generation(gen_id=i + 1, request=req, arrival=0.0, seed=req.sampling.seed))
    tokens = {}
    while sched.has_work:
        plan = sched.schedule(0.0)
        result = backend.step(plan)
        for gid, toks in result.tokens.items():
            tokens.setdefault(gid, []).extend(toks)
        if result.decode_tokens is not None:
            for gid, tok in zip(plan.decode.gen_ids.tolist(), result.decode_tokens.tolist()):
                tokens.setdefault(gid, []).append(tok)
        sched.update(plan, result, 0.0)
    return tokens


@pytest.mark.parametrize("quantization", ["none", "fp8"])
def test_graph_step_chooses_the_eager_tokens_with_bucket_padding(quantization):
    # 5 rows run in the bucket of 8 (3 padding rows on the dummy slot), then fewer as they
    # end; different sampling settings per row, greedy among them
    reqs = [_request(0), _request(1, 25, 1.0, 0.95, 1.3), _request(2, 33, 0.0),
            _request(3, 40, 0.9, 0.5, 1.0), _request(4, 12)]
    eager = _drive(TorchBackend(_model(False, quantization)), reqs)
    graph_backend = _graph(quantization, max_batch=8)
    assert graph_backend.runner.buckets == [1, 2, 4, 8]
    got = _drive(graph_backend, reqs)
    assert got == eager
    assert [len(got[i + 1]) for i in range(5)] == [40, 25, 33, 40, 12]


def test_a_full_batch_of_max_batch_size_rows_steps_without_padding():
    """Every slot busy: 6 rows in the bucket of 6 (the last one, no padding row) choose the
    eager tokens. Caught planted bug: `bisect_right` in buckets.bucket_for, which made a
    step of exactly max_batch_size rows raise and so fail every row of it."""
    reqs = [_request(i, 10) for i in range(6)]
    eager = _drive(TorchBackend(_model(False)), reqs)
    graph_backend = _graph(max_batch=6)
    assert graph_backend.runner.buckets == [1, 2, 4, 6]
    got = _drive(graph_backend, reqs)
    assert got == eager and [len(got[i + 1]) for i in range(6)] == [10] * 6


def test_padding_rows_touch_only_the_dummy_slot():
    backend = _graph(max_batch=8)
    model, runner = backend.model, backend.runner
    dummy = runner.state.dummy
    before = [k.clone() for k in model.k_cache]
    seen_before = runner.state.seen.clone()
    # 3 rows (slots 0, 1, 2) run in the bucket of 4: one padding row
    rows = np.array([[0, 1, 2], [20, 3, 5], [0, 1, 2], [0, 0, 0], [0, 0, 0]], np.int64)
    runner.collect(runner.launch([], rows))
    padding = dict(zip(INPUT_ROWS, runner.inputs(4)[0][:, 3].tolist()))
    assert padding == dict(slots=dummy, pos=0, fpos=0, stop_ok=0, counter=0, token=-1,
                           sample=0, first=0, seed=0, adapter=-1)
    for li, k in enumerate(model.k_cache):
        changed = (k != before[li]).flatten(1).any(dim=1).nonzero().flatten().tolist()
        assert changed == [0, 1, 2, dummy]  # slots 3..5 (other generations') untouched
    marked = (runner.state.seen != seen_before).flatten(1).any(dim=1).nonzero().flatten()
    # the three rows marked what they sampled (stop is not allowed), padding only the dummy
    assert {0, 1, 2} <= set(marked.tolist()) <= {0, 1, 2, dummy}


@pytest.mark.parametrize("prefill_rows", [0, 3, 64])
def test_prompts_are_rows_of_the_step_and_give_the_eager_tokens(prefill_rows):
    """Issue 32: no eager prefill. A new prompt's tokens are rows of the captured step,
    beside the decode rows; a step with more rows than the largest graph holds (prefill_rows
    0 and 3 here: every prompt of 7-9 tokens is longer) runs as several replays in order.
    Float64: any token that differs from the eager backend's is a bug."""
    reqs = [_request(0, 20), _request(1, 14, 1.0, 0.95, 1.3), _request(2, 9, 0.0),
            _request(3, 17)]
    eager = _drive(TorchBackend(_model(False)), reqs, max_batch=4)
    backend = GraphBackend(_model(True), 4, graphs=False, prefill_rows=prefill_rows)
    assert backend.runner.capacity == 4 + prefill_rows
    assert backend.capabilities.max_prefill_tokens == (prefill_rows or 160)  # or the slot
    assert _drive(backend, reqs, max_batch=4) == eager


@pytest.mark.parametrize("prefill_rows", [0, 8])
def test_a_step_holds_every_prompt_the_capped_budget_admits(prefill_rows):
    """The prefill budget the engine really runs with (engine/intake.py effective_settings,
    from the backend's max_prefill_tokens) never admits more prompt tokens than the runner's
    staging holds: many long prompts arriving at once, with the scheduler's default budget
    of 4096 tokens."""
    from orpheus_svc.engine.intake import effective_settings
    backend = GraphBackend(_model(True, slots=12), 12, graphs=False, prefill_rows=prefill_rows)
    settings = effective_settings(SchedulerSettings(max_batch_size=12), backend.capabilities)
    sched = Scheduler(SlotPool(12, 160), settings)
    prompt = (list(PROMPT) * 20)[:120]
    for i in range(12):
        sched.add(Generation(gen_id=i + 1, request=GenerationRequest(
            f"s{i}", 0, prompt, 2, SamplingParams(seed=i)), arrival=0.0, seed=i))
    while sched.has_work:
        plan = sched.schedule(0.0)
        sched.update(plan, backend.step(plan), 0.0)


def test_a_prompt_row_before_the_last_writes_only_its_own_kv():
    """A prompt's rows before its last sample nothing: last_ids and the seen marks of its
    slot are written by its last row alone (the others' go to the dummy slot)."""
    backend = _graph(max_batch=4)
    runner, state = backend.runner, backend.runner.state
    state.last_ids[2] = 4242  # what the slot held before: only the last row may change it
    prompt = list(PROMPT)
    row = PrefillRow(slot=2, prompt_ids=prompt, temperature=0.6, top_p=0.8,
                     repetition_penalty=1.1, seed=7, frame_position=0, stop_allowed=False,
                     counter=0)
    first, _ = runner.collect(runner.launch([row], None))
    assert state.last_ids[2].item() == first[0] != 4242
    assert int(state.seen[2].sum()) == 1  # one audio id marked: the sampled one
    k = backend.model.k_cache[0]
    assert (k[2, :, :len(prompt)] != 0).any(dim=-1).all()  # every prompt position written
    assert not (k[2, :, len(prompt):] != 0).any()


def test_last_ids_on_the_device_are_the_tokens_the_host_read():
    backend = _graph()
    tokens = _drive(backend, [_request(0, 17), _request(1, 9)])
    ids = backend.runner.state.last_ids
    assert ids[0].item() == tokens[1][-1] and ids[1].item() == tokens[2][-1]


def _run_loop(backend, requests, cancel_after=None):
    events = Collector()
    flusher = RecordingFlusher(events)
    core = EngineLoop(backend, flusher, events, seed=1,
                      settings=SchedulerSettings(max_batch_size=6))
    launched = []
    if backend.capabilities.runs_ahead:
        launch = backend.launch

        def recording(plan):
            launched.append(plan)
            return launch(plan)
        backend.launch = recording
    step = backend.step

    def stepping(plan):
        launched.append(plan)
        return step(plan)
    backend.step = stepping
    core.start()
    try:
        ids = [core.submit(r) for r in requests]
        events.wait_for(lambda ev: events.ended(ids))
    finally:
        core.stop()
    return ids, flusher, events, launched


def test_run_ahead_through_the_engine_loop_gives_the_eager_frames_and_ends():
    # stops are likely here (the stop row of the head boosted), so rows stop mid-batch and
    # their one extra token, chosen ahead, must be dropped
    reqs = [_request(i, 60 + 7 * i) for i in range(5)]
    ids_e, eager, ev_e, _ = _run_loop(TorchBackend(_model(False, stop_boost=2.0)), reqs)
    ids_g, graph, ev_g, plans = _run_loop(_graph(stop_boost=2.0), reqs)
    fin_e = [ev_e.finish(i) for i in ids_e]
    fin_g = [ev_g.finish(i) for i in ids_g]
    assert [(f.reason, f.num_generated, f.num_frames) for f in fin_g] == \
        [(f.reason, f.num_generated, f.num_frames) for f in fin_e]
    assert {f.reason for f in fin_e} == {"stop", "length"}  # both kinds of end happened
    assert [graph.frames[i] for i in ids_g] == [eager.frames[i] for i in ids_e]
    ahead = [p for p in plans if len(p.decode) and (p.decode.last_token == -1).all()]
    assert len(ahead) > len(plans) // 2  # most steps were launched before the last was read


# The plan made while a step is in flight (Scheduler.schedule's in_flight, what the graph
# engine's run-ahead launches): tests/core/test_scheduler_in_flight.py.


def test_the_decode_step_has_no_host_sync_or_data_dependent_shape():
    """What a CUDA graph cannot hold (a .item(), a branch on device data, a shape that
    depends on values) breaks dynamo's full-graph trace of the step; on the CPU this is the
    check that the captured step would be the whole step: prompt rows and a new prompt's
    sampling state included (issue 32)."""
    from orpheus_svc.engine.graph.step import decode_step
    from orpheus_svc.engine.model.invariant import invariant_step
    backend = _graph()
    runner = backend.runner
    _drive(backend, [_request(0, 3)])
    for invariant in (False, True):  # the unseeded step and the seeded rows' step
        torch._dynamo.reset()
        step = torch.compile(decode_step, backend="eager", fullgraph=True)
        with torch.inference_mode(), invariant_step(invariant):
            step(runner.model, runner.state, *runner.inputs(2),
                 runner._attend[2, invariant], runner.out[:2])


def test_fp8_weights_are_rowwise_e4m3_within_their_rounding():
    from orpheus_svc.engine.model.linear import FP8, Fp8Linear
    g = torch.Generator().manual_seed(4)
    scales = torch.logspace(-3, 1, 32, dtype=torch.float64)[:, None]  # rows of any size
    w = torch.randn(32, 64, dtype=torch.float64, generator=g) * scales
    lin = Fp8Linear(w, torch.float64)
    assert lin.qweight.dtype == FP8 and lin.scale_row.shape == (1, 32)
    # each row scaled so that its largest value is 448, E4M3's largest: none saturates
    assert lin.qweight.float().abs().amax(dim=1).eq(448).all()
    # E4M3 rounds to 3 mantissa bits (within 2^-4 of the value) and, below 2^-6, to a step
    # of 2^-9 (within 2^-10), in units of the row's scale
    err = (lin.dequantized().double() - w).abs()
    step = lin.scale_row.view(-1, 1).double()
    assert (err <= 2 ** -4 * w.abs() + 2 ** -10 * step).all()
    x = torch.randn(5, 64, dtype=torch.float64, generator=g)
    rel = ((lin(x) - x @ w.T).norm() / (x @ w.T).norm()).item()
    assert 1e-4 < rel < 2 * 2 ** -4  # really quantised (both operands), and close


def test_the_graph_backend_refuses_a_model_without_its_dummy_slot():
    with pytest.raises(ValueError, match="spare_slots=1"):
        GraphBackend(_model(False), 4, graphs=False)
    with pytest.raises(ValueError, match="CUDA"):
        GraphBackend(_model(True), 4, graphs=True)


def _flaky_run(fail_on):
    """Two requests, one after the other, through a graph backend whose launch raises for
    the plans `fail_on(plan, calls so far)` picks; their finishes and how many failed."""
    backend = _graph()
    launch, calls, failed = backend.launch, [], []

    def flaky(plan):
        calls.append(plan)
        if fail_on(plan, len(calls)):
            failed.append(plan)
            raise RuntimeError("device fault")
        return launch(plan)
    backend.launch = flaky
    events = Collector()
    core = EngineLoop(backend, RecordingFlusher(events), events, seed=1)
    core.start()
    try:
        first = core.submit(_request(0, 30))
        events.wait_for(lambda ev: events.ended([first]))
        second = core.submit(_request(1, 12))
        events.wait_for(lambda ev: events.ended([second]))
    finally:
        core.stop()
    return events.finish(first), events.finish(second), len(failed)


def test_a_failed_launch_fails_its_rows_and_the_engine_goes_on():
    """A run-ahead backend's launch that raises fails the generations of that step with an
    internal error (not retry_safe: no partial re-run), and the engine serves the next."""
    first, second, failed = _flaky_run(lambda plan, n: n == 1)  # the first one's prefill
    assert failed == 1
    assert first.reason == "error" and "internal error" in first.error
    assert (second.reason, second.num_generated) == ("length", 12)


def test_a_failed_launch_ahead_runs_that_step_after_the_one_before():
    """A step launched ahead that fails to launch is planned again by schedule() once the
    step before it is read: its generation loses nothing."""
    first, second, failed = _flaky_run(
        lambda plan, n: n == 5 and len(plan.decode) and (plan.decode.last_token == -1).all())
    assert failed == 1
    assert (first.reason, first.num_generated) == ("length", 30)
    assert (second.reason, second.num_generated) == ("length", 12)
