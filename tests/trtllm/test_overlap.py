"""Our logits processor and TensorRT-LLM's overlap scheduler: the shipped configuration never
combines them, the combination is refused at start-up, and the stand-in shows why. Also what
the real build path sends with each request, and the seeds it refuses."""

import dataclasses

import pytest

from orpheus_svc.config import Config, EngineConfig
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.tokens import AUDIO_BASE, CODES_PER_POSITION
from orpheus_svc.engine.loop import EngineLoop
from orpheus_svc.engine.trtllm.build import build_trtllm_backend
from orpheus_svc.engine.trtllm.grammar import AudioGrammarLogitsProcessor
from orpheus_svc.engine.trtllm.manifest import FORMAT_CHECKPOINT, FORMAT_ENGINE
from orpheus_svc.engine.trtllm.processor import RequestLogitsProcessor
from orpheus_svc.engine.trtllm.startup import TrtllmStartupError
from tests.engine.harness import Collector, RecordingFlusher

from . import fake_trtllm
from .driver import PROMPT, Driver
from .replay import ExecutorReplay
from .standin import StandInLLM
from .test_startup import _artifact


def _config(engine_dir, **engine):
    e = dataclasses.replace(EngineConfig(), backend="trtllm", trtllm_engine_dir=engine_dir,
                            **engine)
    return dataclasses.replace(Config(), engine=e)


def _run(backend, engine_cfg, n, max_tokens, seed=None):
    """n generations through the real EngineLoop; returns (Finish by id, flusher, stats).
    `seed`: the client's seed of generation i is seed + i (None: the engine picks them)."""
    events = Collector()
    flusher = RecordingFlusher(events)
    core = EngineLoop(backend, flusher, events, settings=engine_cfg.scheduler_settings(),
                      seed=3)
    core.start()
    try:
        ids = [core.submit(GenerationRequest(session_id=f"s{i}", segment_index=0,
                                             prompt_ids=PROMPT, max_tokens=max_tokens,
                                             sampling=SamplingParams(
                                                 seed=None if seed is None else seed + i)))
               for i in range(n)]
        events.wait_for(lambda ev: events.ended(ids))
        return events.finishes(), flusher, core.stats()
    finally:
        core.stop()
        backend.close()


def test_the_default_configuration_builds_the_llm_without_the_overlap_scheduler(
        tmp_path, monkeypatch, caplog):
    fake = fake_trtllm.install(monkeypatch)
    caplog.set_level("INFO", logger="orpheus_svc.engine.trtllm.build")
    build_trtllm_backend(_config(_artifact(tmp_path, fmt=FORMAT_CHECKPOINT)))
    (llm,) = fake.llms
    assert fake.runtimes == ["pytorch"]
    assert llm.llm_kwargs["disable_overlap_scheduler"] is True
    assert llm.llm_kwargs["enable_chunked_prefill"] is False
    assert llm.llm_kwargs["max_seq_len"] == 4096 and llm.llm_kwargs["max_batch_size"] == 32
    assert "overlap scheduler disabled" in caplog.text and "previous token" in caplog.text


def test_the_shipped_configuration_holds_the_grammar_over_hundreds_of_tokens(
        tmp_path, monkeypatch):
    fake = fake_trtllm.install(monkeypatch)
    cfg = _config(_artifact(tmp_path, fmt=FORMAT_CHECKPOINT), max_sessions=4, max_batch_size=4)
    backend, _ = build_trtllm_backend(cfg)
    fin, flusher, stats = _run(backend, cfg.engine, n=2, max_tokens=154)
    (llm,) = fake.llms
    assert len(llm.requests) == 2
    for req in llm.requests:  # every request carried the mask, and it ran without lag
        processor = req.params.kwargs["logits_processor"]
        assert isinstance(processor, RequestLogitsProcessor)
        assert isinstance(processor.grammar, AudioGrammarLogitsProcessor)
        assert processor.penalty.penalty == 1.1 and "repetition_penalty" not in req.params.kwargs
    assert stats.grammar_violations == 0
    for gen_id, ev in fin.items():
        assert ev.reason in ("stop", "length"), ev
        assert ev.num_generated >= 7 and len(flusher.frames[gen_id]) == ev.num_frames
    assert len(fin) == 2
    assert llm.shut_down


@pytest.mark.parametrize("setting", ["on", "True"])  # YAML turns a bare `on` into True
def test_the_mask_with_the_overlap_scheduler_is_refused_before_any_gpu_work(
        tmp_path, monkeypatch, setting):
    fake = fake_trtllm.install(monkeypatch)
    cfg = _config(_artifact(tmp_path, fmt=FORMAT_CHECKPOINT), trtllm_overlap_scheduler=setting)
    with pytest.raises(TrtllmStartupError) as err:
        build_trtllm_backend(cfg)
    msg = str(err.value)
    assert "engine.trtllm_grammar_mask" in msg and "engine.trtllm_overlap_scheduler" in msg
    assert fake.gpu_probes == 0 and fake.llms == []


def test_without_the_mask_the_overlap_scheduler_stays_off_for_the_penalty(tmp_path, monkeypatch):
    fake = fake_trtllm.install(monkeypatch)
    build_trtllm_backend(_config(_artifact(tmp_path / "a", fmt=FORMAT_CHECKPOINT),
                                 trtllm_grammar_mask=False))
    assert fake.llms[0].llm_kwargs["disable_overlap_scheduler"] is True
    with pytest.raises(TrtllmStartupError, match="the repetition penalty would hit another"):
        build_trtllm_backend(_config(_artifact(tmp_path / "b", fmt=FORMAT_CHECKPOINT),
                                     trtllm_grammar_mask=False, trtllm_overlap_scheduler="on"))


def test_a_clients_seed_on_the_pytorch_runtime_ends_with_the_reason_not_silently(
        tmp_path, monkeypatch):
    fake = fake_trtllm.install(monkeypatch)
    cfg = _config(_artifact(tmp_path, fmt=FORMAT_CHECKPOINT), max_sessions=2, max_batch_size=2)
    backend, _ = build_trtllm_backend(cfg)
    assert "TensorRT-LLM 1.2.0 does not honour a per-request seed" in \
        backend.capabilities.seed_refusal
    fin, _, _ = _run(backend, cfg.engine, n=1, max_tokens=70, seed=5)
    (ev,) = fin.values()
    assert ev.reason == "error" and ev.error.startswith("sampling.seed: TensorRT-LLM 1.2.0 ")
    assert fake.llms[0].requests == []  # never reached TensorRT-LLM


def test_a_tensorrt_engine_takes_the_clients_seed(tmp_path, monkeypatch):
    fake = fake_trtllm.install(monkeypatch)
    cfg = _config(_artifact(tmp_path, fmt=FORMAT_ENGINE), max_sessions=2, max_batch_size=2)
    backend, _ = build_trtllm_backend(cfg)
    assert backend.capabilities.seed_refusal is None
    fin, _, _ = _run(backend, cfg.engine, n=2, max_tokens=70, seed=5)
    assert sorted(r.params.kwargs["seed"] for r in fake.llms[0].requests) == [5, 6]
    assert all(ev.reason in ("stop", "length") for ev in fin.values())


def test_the_tensorrt_engine_gets_no_overlap_argument_and_refuses_on(tmp_path, monkeypatch):
    fake = fake_trtllm.install(monkeypatch)
    build_trtllm_backend(_config(_artifact(tmp_path / "a", fmt=FORMAT_ENGINE)))
    assert fake.runtimes == ["tensorrt"]
    assert "disable_overlap_scheduler" not in fake.llms[0].llm_kwargs
    with pytest.raises(TrtllmStartupError, match="engine.trtllm_overlap_scheduler is on"):
        build_trtllm_backend(_config(_artifact(tmp_path / "b", fmt=FORMAT_ENGINE),
                                     trtllm_grammar_mask=False, trtllm_overlap_scheduler="on"))


def test_the_replayed_overlap_timing_breaks_the_mask_after_two_tokens():
    # What the refused combination would do: the processor sees the tokens of one step ago.
    replay = ExecutorReplay(overlap=True)
    d = Driver(slots=1, llm=StandInLLM(script=replay))
    d.backend._make_params = _with_mask(d.backend._make_params)
    try:
        gen = d.add(max_tokens=70)
        d.run_until(lambda: gen.gen_id in d.finished)
        assert gen.finish_reason == "error"
        assert d.scheduler.stats().grammar_violations == 1
        assert gen.num_generated == 2  # the second token is the first bad one
        assert replay.visible[1] == []  # step 1 still saw no generated token ...
        first, second = d.llm.requests[0].outputs[0].token_ids[:2]
        assert position_of(first) == position_of(second) == 0  # ... so it masked position 0
    finally:
        d.close()


def test_the_same_replay_without_overlap_keeps_the_grammar():
    replay = ExecutorReplay(overlap=False)
    d = Driver(slots=1, llm=StandInLLM(script=replay))
    d.backend._make_params = _with_mask(d.backend._make_params)
    try:
        gen = d.add(max_tokens=140)
        d.run_until(lambda: gen.gen_id in d.finished)
        assert gen.finish_reason in ("stop", "length")
        assert d.scheduler.stats().grammar_violations == 0
        assert len(replay.visible[5]) == 5  # step k saw all k tokens before it
    finally:
        d.close()


def _with_mask(make_params):
    def make(gen):
        params = make_params(gen)
        params.kwargs["logits_processor"] = AudioGrammarLogitsProcessor()
        return params
    return make


def position_of(token_id):
    return (token_id - AUDIO_BASE) // CODES_PER_POSITION
