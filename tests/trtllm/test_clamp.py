"""max_tokens fitted to the slot; a prompt that cannot fit is refused before submission."""

import time
from functools import partial

import pytest

from orpheus_svc.core.events import Rejected
from orpheus_svc.core.generation import Generation
from orpheus_svc.core.prompt import PromptTooLong, fit_to_slot
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.step import StepPlan
from orpheus_svc.core.tokens import FRAME_TOKENS
from orpheus_svc.engine.loop import EngineLoop
from orpheus_svc.engine.trtllm.build import sampling_kwargs
from orpheus_svc.engine.trtllm.backend import TrtllmBackend
from orpheus_svc.engine.trtllm.stream import StreamBridge
from tests.engine.harness import Collector, RecordingFlusher

from .driver import PROMPT, Driver, _params, speech
from .standin import StandInLLM


@pytest.mark.parametrize("prompt_len,max_tokens,max_seq_len,expect", [
    (9, 70, 256, 70),            # fits: unchanged
    (9, 1000, 256, 245),         # cut to whole frames, one position spare
    (248, 70, 256, 7),           # room 8: one frame
    (100, 3, 256, 3),            # never raised above the request's own budget
])
def test_fit_to_slot_keeps_prompt_plus_budget_inside_the_slot(prompt_len, max_tokens,
                                                              max_seq_len, expect):
    got = fit_to_slot(prompt_len, max_tokens, max_seq_len)
    assert got == expect and prompt_len + got < max_seq_len
    assert got == max_tokens or got % FRAME_TOKENS == 0


@pytest.mark.parametrize("prompt_len", [249, 256, 300])
def test_a_prompt_without_room_for_a_frame_is_too_long(prompt_len):
    with pytest.raises(PromptTooLong, match=f"prompt is {prompt_len} tokens and max_seq_len is 256"):
        fit_to_slot(prompt_len, 70, 256)


def _core(llm, max_seq_len=64):
    backend = TrtllmBackend(StreamBridge(llm), partial(_params, sampling_kwargs), num_slots=2,
                            max_seq_len=max_seq_len)
    events = Collector()
    core = EngineLoop(backend, RecordingFlusher(events), events, seed=1)
    return core, backend, events


def test_through_engine_core_tensorrt_llm_never_sees_a_request_it_would_refuse():
    # The stand-in refuses prompt + max_tokens > max_seq_len, like the TensorRT runtime.
    llm = StandInLLM(max_seq_len=64, script=lambda req: [(speech(1), None), ([], "stop")])
    core, backend, events = _core(llm)
    core.start()
    try:
        long_budget = core.submit(GenerationRequest("a", 0, PROMPT, 4000, SamplingParams()))
        too_long = core.submit(GenerationRequest("b", 0, tuple(range(57)), 70, SamplingParams()))
        events.wait_for(lambda ev: events.ended([long_budget, too_long]))
    finally:
        core.stop()
        backend.close()
    (rejected,) = events.of(Rejected)
    assert rejected.gen_id == too_long and rejected.code == "INVALID_ARGUMENT"
    assert "prompt is 57 tokens and max_seq_len is 64" in rejected.reason
    (req,) = llm.requests  # the long prompt never reached TensorRT-LLM
    assert req.params.kwargs["max_tokens"] == fit_to_slot(len(PROMPT), 4000, 64) == 49
    ((gid, fin),) = events.finishes().items()
    assert gid == long_budget and fin.reason == "stop"


def test_the_backend_fits_a_request_that_bypassed_admission():
    d = Driver(slots=2, llm=StandInLLM(max_seq_len=256))
    try:
        gen = d.add(max_tokens=1000)  # straight into the scheduler, no EngineLoop admission
        d.run_until(lambda: d.llm.requests)
        assert d.llm.requests[0].params.kwargs["max_tokens"] == 245
        assert gen.request.max_tokens == 245  # fitted by the scheduler, for every backend
        assert not d.errors
    finally:
        d.close()


def test_the_backend_ends_a_prompt_that_cannot_fit_without_submitting_it():
    llm = StandInLLM(max_seq_len=256)
    backend = TrtllmBackend(StreamBridge(llm), partial(_params, sampling_kwargs), num_slots=1,
                            max_seq_len=256)
    req = GenerationRequest("s", 0, tuple(range(252)), 70, SamplingParams())
    gen = Generation(gen_id=1, request=req, arrival=time.monotonic(), seed=1)
    try:
        result = backend.step(StepPlan(step=1, prefill=(gen.row(),)))
    finally:
        backend.close()
    assert "prompt is 252 tokens and max_seq_len is 256" in result.errors[1]
    assert llm.requests == [] and backend.live == 0
