"""The trtllm backend behind the real EngineLoop thread, TensorRT-LLM replaced by the stand-in."""

import dataclasses
from functools import partial

from orpheus_svc.config import EngineConfig
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.engine.loop import EngineLoop
from orpheus_svc.engine.trtllm.build import sampling_kwargs
from orpheus_svc.engine.trtllm.backend import TrtllmBackend
from orpheus_svc.engine.trtllm.processor import RequestLogitsProcessor
from orpheus_svc.engine.trtllm.stream import StreamBridge
from tests.engine.harness import Collector, RecordingFlusher

from .driver import PROMPT, Params, _params, frame_codes, frame_tokens
from .standin import StandInLLM


def _scripted(req):
    """Each request streams max_tokens // 7 frames in uneven deltas, then stops."""
    frames = req.params.kwargs["max_tokens"] // 7 - 1
    ids = [t for f in range(frames) for t in frame_tokens(f)]
    cuts = list(range(0, len(ids), 5)) + [len(ids)]
    return [(ids[a:b], None) for a, b in zip(cuts[:-1], cuts[1:], strict=True)] + [([], "stop")]


def test_sessions_beyond_the_slots_all_finish_with_their_frames_and_never_overfill():
    engine_cfg = dataclasses.replace(EngineConfig(), max_sessions=3, max_batch_size=1,
                                     max_seq_len=256)
    llm = StandInLLM(script=_scripted)
    backend = TrtllmBackend(StreamBridge(llm), partial(_params, sampling_kwargs), num_slots=3,
                            max_seq_len=256)
    events = Collector()
    flusher = RecordingFlusher(events)
    core = EngineLoop(backend, flusher, events, settings=engine_cfg.scheduler_settings(), seed=1)
    assert core.settings.max_batch_size == 3  # every running generation is in every plan
    core.start()
    try:
        ids = [core.submit(GenerationRequest(session_id=f"s{i}", segment_index=0,
                                             prompt_ids=PROMPT, max_tokens=7 * (2 + i % 4),
                                             sampling=SamplingParams()))
               for i in range(10)]
        events.wait_for(lambda ev: events.ended(ids))
        fin = events.finishes()
        for i, gid in enumerate(ids):
            assert fin[gid].reason == "stop", fin[gid]
            assert flusher.frames[gid] == [frame_codes(f) for f in range(1 + i % 4)]
            assert flusher.final[gid]
        assert llm.max_live <= 3 and len(llm.requests) == 10
        assert core.stats().free_slots == 3
    finally:
        core.stop()
        backend.close()


def test_sampling_params_carry_the_request_and_the_stop_id_and_never_the_penalty():
    req = GenerationRequest(session_id="s", segment_index=0, prompt_ids=PROMPT, max_tokens=700,
                            sampling=SamplingParams(temperature=0.5, top_p=0.9,
                                                    repetition_penalty=1.2))
    from orpheus_svc.core.generation import Generation

    gen = Generation(gen_id=1, request=req, arrival=0.0, seed=1234)
    marker = object()
    kw = sampling_kwargs(gen.row(), marker)
    processor = kw.pop("logits_processor")
    # TensorRT-LLM 1.2's default sampler would ignore repetition_penalty (and a later one
    # would apply it on top of ours): the request's own processor carries it instead.
    assert kw == dict(end_id=128258, pad_id=128263, max_tokens=700, temperature=0.5, top_p=0.9,
                      seed=1234, detokenize=False)
    assert isinstance(processor, RequestLogitsProcessor) and processor.grammar is marker
    assert (processor.penalty.prompt_len, processor.penalty.penalty) == (len(PROMPT), 1.2)
    greedy = dataclasses.replace(req, sampling=SamplingParams(temperature=0.0))
    kw = sampling_kwargs(Generation(gen_id=2, request=greedy, arrival=0.0, seed=1).row())
    assert kw["top_k"] == 1 and "temperature" not in kw
    assert kw["logits_processor"].grammar is None  # mask off: the penalty still goes along
    assert kw["logits_processor"].penalty.penalty == 1.1  # Orpheus's default
    assert isinstance(_params(sampling_kwargs, gen.row()), Params)


def test_a_grammar_violation_through_engine_loop_ends_the_generation_and_aborts_its_request():
    """The scheduler's parser is the only one: the violation ends the generation there, and
    EngineLoop's release() of the ended generation aborts its TensorRT-LLM request."""
    from orpheus_svc.core.tokens import audio_token_id

    llm = StandInLLM(script=lambda req: [(frame_tokens(0) + [audio_token_id(3, 5)], None)])
    backend = TrtllmBackend(StreamBridge(llm), partial(_params, sampling_kwargs), num_slots=2,
                            max_seq_len=256)
    events = Collector()
    core = EngineLoop(backend, RecordingFlusher(events), events, seed=1)
    core.start()
    try:
        gid = core.submit(GenerationRequest("s", 0, PROMPT, 70, SamplingParams()))
        events.wait_for(lambda ev: events.ended([gid]))
        llm.wait_for(lambda llm: llm.requests and llm.requests[0].aborted and llm.live == 0)
        assert events.finish(gid).reason == "error"
        assert core.stats().grammar_violations == 1
    finally:
        core.stop()
        backend.close()
