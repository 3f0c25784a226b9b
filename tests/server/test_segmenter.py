from hypothesis import given, settings, strategies as st

from orpheus_svc.server.segmenter import SentenceBuffer

TEXT = ("Hello there, Dr. Smith. It costs 3.50 dollars! Really?! Yes... "
        "The U.S. team won. Call me at 5 p.m. tomorrow.\nNew line item")


def _segments(text, cuts, **kw):
    buf, out, prev = SentenceBuffer(**kw), [], 0
    for c in sorted(set(cuts)) + [len(text)]:
        out.extend(buf.push(text[prev:c]))
        prev = c
    return out + buf.close()


def test_sentences_split_at_ends_not_at_abbreviations_or_decimals():
    assert _segments(TEXT, []) == [
        "Hello there, Dr. Smith.", "It costs 3.50 dollars!", "Really?!", "Yes...",
        "The U.S. team won.", "Call me at 5 p.m. tomorrow.", "New line item"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, len(TEXT)), max_size=40))
def test_any_fragmentation_gives_the_same_segments(cuts):
    assert _segments(TEXT, cuts) == _segments(TEXT, [])


def test_single_characters_give_the_same_segments():
    assert _segments(TEXT, range(len(TEXT))) == _segments(TEXT, [])


def test_a_boundary_waits_for_the_next_character():
    buf = SentenceBuffer()
    assert buf.push("It costs 3.") == []
    assert buf.push("5 now. And") == ["It costs 3.5 now."]
    assert buf.pending == " And"


def test_flush_cuts_whatever_is_buffered_and_skips_whitespace():
    buf = SentenceBuffer()
    assert buf.push("no end yet") == []
    assert buf.flush() == ["no end yet"]
    assert buf.push("   \n  ") == [] and buf.flush() == []


def test_long_text_without_punctuation_is_cut_at_a_space_under_the_limit():
    words = " ".join(f"word{i}" for i in range(200))
    segs = _segments(words, [], max_chars=50)
    assert all(len(s) <= 50 for s in segs)
    assert " ".join(segs) == words  # nothing lost, no word split


def test_long_text_prefers_a_clause_mark():
    text = "a" * 25 + " bb, " + "c " * 30
    segs = SentenceBuffer(max_chars=40).push(text)
    assert segs[0] == "a" * 25 + " bb,"


def test_first_segment_may_end_at_a_clause_for_early_audio():
    buf = SentenceBuffer(first_clause_min_chars=20)
    assert buf.push("Well, as I was saying to you, the weather") == ["Well, as I was saying to you,"]
    assert buf.push(" is nice, and so on. Next") == ["the weather is nice, and so on."]


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=400),
       st.lists(st.integers(0, 400), max_size=10))
def test_no_text_is_lost_and_no_segment_is_blank(text, cuts):
    segs = _segments(text, [c for c in cuts if c <= len(text)], max_chars=60)
    assert all(s.strip() == s and s for s in segs)
    assert "".join("".join(s.split()) for s in segs) == "".join(text.split())
    assert all(len(s) <= 61 for s in segs)
