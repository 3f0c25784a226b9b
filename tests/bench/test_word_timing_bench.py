"""bench/word_timing.py, the espeak-ng measurement of the word-timing estimator: its mapping
of espeak-ng's word events back to the client's words and its scoring, without espeak-ng;
one short run through libespeak-ng where it is installed."""

import importlib.util
import sys
from pathlib import Path

import pytest

from orpheus_svc.core.word_timing import split_words

_SPEC = importlib.util.spec_from_file_location(
    "word_timing_bench", Path(__file__).resolve().parents[2] / "bench" / "word_timing.py")
bench = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = bench  # its dataclasses look their module up while being built
_SPEC.loader.exec_module(bench)


def test_the_spoken_text_holds_each_words_spoken_form_at_its_span():
    words = split_words("pay $3.50 now")
    spoken, spans = bench.spoken_text(words)
    assert spoken == "pay three dollars and fifty cents now"
    assert [spoken[a:b] for a, b in spans] == ["pay", "three dollars and fifty cents", "now"]


def test_true_starts_take_each_words_first_event_and_none_where_it_has_none():
    spans = [(0, 3), (4, 34), (35, 36), (37, 40)]
    # a number said as several words has several events; the lone dash has none
    events = [(0, 0), (4, 900), (10, 1500), (18, 2000), (37, 4000)]
    assert bench.true_starts(spans, events) == [0, 900, None, 4000]


def test_score_leaves_out_the_first_word_and_counts_starts_inside_their_word():
    truth = [0, 1000, None, 3000]
    estimated = [0, 1200, 2000, 2900]
    got = bench.score(estimated, truth, total=5000, rate_hz=1000)
    assert got.errors_ms == [200.0, 100.0]
    # 1200 lies in [1000, 3000); 2900 is before its word's true start 3000
    assert got.inside == [True, False]


def test_score_bounds_the_last_word_by_the_audios_end():
    got = bench.score([0, 4999], [0, 3000], total=5000, rate_hz=1000)
    assert got.inside == [True]
    got = bench.score([0, 5000], [0, 3000], total=5000, rate_hz=1000)
    assert got.inside == [False]


def test_summarise_gives_median_p90_and_share():
    scored = [bench.Scored([float(x) for x in range(1, 11)], [True] * 5 + [False] * 5)]
    assert bench.summarise(scored) == {"words": 10, "median_ms": 5.5, "p90_ms": 10.0,
                                       "inside_share": 0.5}


def test_the_held_out_report_uses_only_the_odd_sentences():
    words = split_words("one two three")
    est = [t.start_sample for t in bench.wt.place_words(
        words, bench.wt.word_weights(words), 0, 10_000, True, lead_in_s=0.0, sample_rate=1000)]
    exact = [bench.Spoken(i, 175, words, est, 10_000, 1000) for i in (0, 2)]
    off = [bench.Spoken(i, 175, words, [est[0]] + [e + 100 for e in est[1:]], 10_000, 1000)
           for i in (1, 3)]
    assert bench.report(exact + off, held_out=True)["all"]["median_ms"] == 100.0
    assert bench.report(exact + off, held_out=False)["all"]["median_ms"] == 0.0


@pytest.mark.skipif(bench.load_espeak() is None, reason="libespeak-ng is not installed")
def test_espeak_reports_a_start_for_every_word_in_order():
    espeak = bench.Espeak(bench.load_espeak())
    (s,) = bench.synthesise(espeak, ["The quick brown fox, at 3 pm."], rates=(175,))
    assert all(t is not None for t in s.truth)
    assert s.truth == sorted(s.truth) and s.truth[-1] < s.total
    assert len(set(s.truth)) == len(s.truth)
