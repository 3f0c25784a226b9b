"""trtllm backend logic against a stand-in for TensorRT-LLM's streaming results (no GPU)."""

import pytest

from orpheus_svc.core.tokens import END_OF_SPEECH_ID, audio_token_id

from .driver import Driver, frame_codes, frame_tokens, speech
from .standin import StandInLLM


@pytest.fixture
def driver():
    d = Driver(slots=2)
    yield d
    d.close()


def _requests(d, n):
    d.llm.wait_for(lambda llm: len(llm.requests) >= n)
    return d.llm.requests


@pytest.mark.parametrize("end_id_in_output", [True, False])
def test_deltas_of_any_size_become_the_frames_in_order(driver, end_id_in_output):
    gen = driver.add(max_tokens=70)
    driver.run_until(lambda: driver.llm.requests)
    req = _requests(driver, 1)[0]
    ids = speech(4, stop=False)
    for chunk in (ids[:3], ids[3:7], ids[7:8], ids[8:20], ids[20:]):  # 3, 4, 1, 12, 8 tokens
        req.emit(chunk)
    req.finish("stop", [END_OF_SPEECH_ID] if end_id_in_output else [])
    driver.run_until(lambda: gen.gen_id in driver.finished)
    assert driver.finished[gen.gen_id].finish_reason == "stop"
    assert driver.frames[gen.gen_id] == [frame_codes(f) for f in range(4)]
    assert gen.num_generated == 29  # 28 audio tokens + the stop id


def test_at_most_slots_requests_are_in_flight_and_the_oldest_enters_first(driver):
    gens = [driver.add() for _ in range(3)]
    driver.run_until(lambda: len(driver.llm.requests) == 2)
    for _ in range(3):
        driver.step()
    reqs = driver.llm.requests
    assert len(reqs) == 2 and driver.backend.live == 2
    assert [r.params.kwargs["seed"] for r in reqs] == [7, 7]
    assert driver.scheduler.get(gens[2].gen_id).slot is None  # still waiting for a slot
    reqs[0].emit(speech(1))
    reqs[0].finish("stop")
    driver.run_until(lambda: len(driver.llm.requests) == 3)
    assert gens[0].gen_id in driver.finished
    assert driver.llm.max_live == 2


def test_cancel_aborts_the_request_and_its_slot_waits_for_the_confirmation():
    d = Driver(slots=1, llm=StandInLLM(confirm_aborts=False))
    try:
        first, second = d.add(), d.add()
        d.run_until(lambda: d.llm.requests)
        req = d.llm.requests[0]
        req.emit(frame_tokens(0))
        d.run_until(lambda: d.frames[first.gen_id])
        d.scheduler.cancel(first.gen_id, 0.0)
        d.step()
        d.llm.wait_for(lambda llm: llm.requests[0].aborted)
        assert d.finished[first.gen_id].finish_reason == "cancelled"
        for _ in range(3):  # the slot drains: the scheduler holds `second` back
            d.step()
        assert len(d.llm.requests) == 1 and d.backend.live == 1
        assert second.slot is None and d.scheduler.stats().free_slots == 0
        req.finish("cancelled")  # TensorRT-LLM confirms the abort
        d.run_until(lambda: len(d.llm.requests) == 2)
        assert second.slot == 0
        assert d.llm.requests[1].params.kwargs["max_tokens"] == second.request.max_tokens
    finally:
        d.close()


def test_an_unconfirmed_abort_stops_counting_after_the_grace_period():
    now = [0.0]
    d = Driver(slots=1, llm=StandInLLM(confirm_aborts=False), clock=lambda: now[0],
               abort_grace_s=5.0)
    try:
        first, _ = d.add(), d.add()
        d.run_until(lambda: d.llm.requests)
        d.scheduler.cancel(first.gen_id, 0.0)
        d.step()
        d.step()
        assert len(d.llm.requests) == 1
        assert d.scheduler.stats().free_slots == 0
        now[0] = 6.0
        d.run_until(lambda: len(d.llm.requests) == 2)
        assert d.backend.counters["unconfirmed_aborts"] == 1
    finally:
        d.close()


def test_a_failing_submit_ends_the_generation_with_the_reason():
    d = Driver(slots=2, llm=StandInLLM(submit_error=ValueError("prompt exceeds max_input_len")))
    try:
        gen = d.add()
        d.run_until(lambda: gen.gen_id in d.finished)
        assert gen.finish_reason == "error"
        assert "TensorRT-LLM: ValueError: prompt exceeds max_input_len" in d.errors[gen.gen_id]
        assert d.backend.live == 0
    finally:
        d.close()


def test_an_exception_mid_stream_ends_the_generation_with_the_reason(driver):
    gen = driver.add()
    driver.run_until(lambda: driver.llm.requests)
    req = driver.llm.requests[0]
    req.emit(frame_tokens(0))
    req.fail(RuntimeError("executor worker died"))
    driver.run_until(lambda: gen.gen_id in driver.finished)
    assert gen.finish_reason == "error"
    assert "RuntimeError: executor worker died" in driver.errors[gen.gen_id]


@pytest.mark.parametrize("reason,expect", [("timeout", "timed the request out"),
                                           ("length", "length limit after 7 tokens"),
                                           ("cancelled", "cancelled the request")])
def test_an_early_end_from_tensorrt_llm_is_an_error_not_a_hang(driver, reason, expect):
    gen = driver.add(max_tokens=70)
    driver.run_until(lambda: driver.llm.requests)
    driver.llm.requests[0].finish(reason, frame_tokens(0))
    driver.run_until(lambda: gen.gen_id in driver.finished)
    assert gen.finish_reason == "error" and expect in driver.errors[gen.gen_id]
    assert driver.frames[gen.gen_id] == [frame_codes(0)]  # the frame before the end is kept


def test_a_grammar_violation_is_counted_and_aborts_the_request(driver):
    gen = driver.add()
    driver.run_until(lambda: driver.llm.requests)
    req = driver.llm.requests[0]
    req.emit(frame_tokens(0) + [audio_token_id(3, 5)])  # position 3 where 0 is due
    driver.run_until(lambda: gen.gen_id in driver.finished)
    assert gen.finish_reason == "error"
    assert driver.scheduler.stats().grammar_violations == 1
    # Aborted at once, with no further step needed (nothing else is running).
    driver.llm.wait_for(lambda llm: req.aborted and llm.live == 0)


def test_the_length_limit_ends_at_max_tokens_like_tensorrt_llm(driver):
    gen = driver.add(max_tokens=14)
    driver.run_until(lambda: driver.llm.requests)
    driver.llm.requests[0].finish("length", speech(2, stop=False))
    driver.run_until(lambda: gen.gen_id in driver.finished)
    assert gen.finish_reason == "length" and len(driver.frames[gen.gen_id]) == 2
    driver.llm.wait_for(lambda llm: llm.live == 0)
    assert not driver.errors and not driver.llm.requests[0].aborted


def test_close_aborts_live_requests_then_shuts_the_llm_down():
    closed = []
    d = Driver(slots=2, on_close=lambda: closed.append(True))
    try:
        d.add()
        d.run_until(lambda: d.llm.requests)
        d.backend.close()
        assert d.llm.requests[0].aborted and closed == [True]
    finally:
        d.close()


def test_a_finished_generation_frees_its_slot_in_the_same_step_when_tensorrt_llm_ended_it():
    d = Driver(slots=1)
    try:
        first, second = d.add(), d.add()
        d.run_until(lambda: d.llm.requests)
        d.llm.requests[0].finish("stop", speech(1))
        d.run_until(lambda: first.gen_id in d.finished)
        assert d.scheduler.pool.num_draining == 0 and d.scheduler.stats().free_slots == 1
        d.run_until(lambda: len(d.llm.requests) == 2)
        assert second.slot == 0 and d.llm.max_live == 1
    finally:
        d.close()
