"""Benchmark text sets: deterministic, the advertised sizes, and fragments that reassemble."""

from orpheus_bench.load import text_ready_time
from orpheus_bench.texts import TEXT_SETS, make_text, make_texts, word_fragments


def test_texts_are_deterministic_and_distinct():
    a = make_texts("conversational", 20, seed=3)
    assert a == make_texts("conversational", 20, seed=3)
    assert len(set(a)) == 20
    assert make_texts("conversational", 5, seed=4) != a[:5]


def test_sizes_match_the_sets():
    for name, (target, hard_max, _) in TEXT_SETS.items():
        texts = make_texts(name, 30)
        assert all(len(t) <= hard_max for t in texts)
        mean = sum(map(len, texts)) / len(texts)
        assert 0.8 * target < mean < 1.1 * target
        assert all(t.rstrip()[-1] in ".?" for t in texts)


def test_fragments_are_words_with_their_spaces_and_reassemble_exactly():
    text = make_text("longform", 1)
    frags = word_fragments(text)
    assert "".join(frags) == text
    assert all(f.strip() and " " not in f.strip() for f in frags)


def test_text_ready_is_when_the_fragment_completing_segment_0_was_sent():
    text = "Hello there. How are you today? Fine."
    frags = word_fragments(text)  # "Hello ", "there. ", "How ", ...
    sent = [float(i) for i in range(len(frags))]
    assert text_ready_time(text, frags, sent, 99.0, "Hello there.") == 1.0
    assert text_ready_time(text, frags, sent, 99.0, text) == 99.0  # cut only at half-close
    assert text_ready_time(text, frags, sent, 99.0, None) is None
