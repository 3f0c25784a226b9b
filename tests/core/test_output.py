"""How a generation ended, as the flusher puts it on its final event (core/output.py
finish_of)."""

from orpheus_svc.core.output import GRAMMAR_ERROR, finish_of

from .sched_helpers import make_gen


def test_a_finish_carries_the_reason_the_counts_and_the_waits_from_arrival():
    gen = make_gen(prompt_len=12, arrival=10.0)
    gen.finish_reason, gen.num_frames = "stop", 3
    gen.admitted_at, gen.first_token_at = 10.25, 10.75
    fin = finish_of(gen)
    assert (fin.reason, fin.num_prompt_tokens, fin.num_generated, fin.num_frames) == (
        "stop", 12, 0, 3)
    assert fin.error is None
    assert (fin.queued_s, fin.first_token_s) == (0.25, 0.75)


def test_a_generation_ended_before_it_ran_is_cancelled_with_no_waits():
    fin = finish_of(make_gen(arrival=3.0))
    assert fin.reason == "cancelled" and fin.error is None
    assert fin.queued_s is None and fin.first_token_s is None


def test_an_error_says_what_happened():
    gen = make_gen()
    gen.finish_reason = "error"
    assert finish_of(gen).error == GRAMMAR_ERROR  # the scheduler's own: the audio grammar
    assert finish_of(gen, "backend failed (error id x)").error == "backend failed (error id x)"
    gen.finish_reason = "length"
    assert finish_of(gen).error is None
