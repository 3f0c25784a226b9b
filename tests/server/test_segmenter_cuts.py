"""SentenceBuffer cuts: why each segment ended and where it lies in the session's text."""

import random

from orpheus_svc.server.segmenter import (
    CLAUSE, END_OF_INPUT, FLUSH, MAX_LENGTH, SENTENCE, Cut, SentenceBuffer,
)


def feed(buf: SentenceBuffer, fragments) -> list[Cut]:
    cuts: list[Cut] = []
    for f in fragments:
        cuts += buf.flush_cuts() if f is None else buf.push_cuts(f)
    return cuts + buf.flush_cuts(END_OF_INPUT)


def test_each_cut_names_its_cause_and_its_range_in_the_session_text():
    frags = ["  Hel", "lo there. How", " are", None, " you\nFine", " then"]
    text = "".join(f for f in frags if f is not None)
    cuts = feed(SentenceBuffer(), frags)
    assert [(c.text, c.cause) for c in cuts] == [
        ("Hello there.", SENTENCE), ("How are", FLUSH), ("you", SENTENCE),
        ("Fine then", END_OF_INPUT)]
    assert cuts[0].start == 2 and cuts[0].end == 14
    for c in cuts:
        assert text[c.start:c.end] == c.text


def test_max_length_and_clause_causes():
    long = "word " * 30
    cuts = feed(SentenceBuffer(max_chars=40), [long])
    assert cuts[0].cause == MAX_LENGTH and len(cuts[0].text) <= 40
    first = feed(SentenceBuffer(first_clause_min_chars=10), ["Well, as I was saying, it works."])
    assert [c.cause for c in first] == [CLAUSE, END_OF_INPUT]


def test_a_flush_with_nothing_pending_cuts_nothing_but_offsets_stay_right():
    buf = SentenceBuffer()
    assert buf.push_cuts("One. ") == [Cut("One.", 0, 4, SENTENCE)]
    assert buf.flush_cuts() == []  # only the space was pending
    assert buf.push_cuts("Two. ") == [Cut("Two.", 5, 9, SENTENCE)]


def test_ranges_hold_for_any_split_of_the_text():
    text = ("Dr. Smith said hi. It costs 3.5 dollars!  Really?\n\nYes, \u00e9t\u00e9 "
            "est l\u00e0 \u2026 ok. " + "x" * 70 + " end")
    rng = random.Random(7)
    for _ in range(200):
        cuts_at = sorted(rng.sample(range(1, len(text)), rng.randint(0, 12)))
        frags = [text[a:b] for a, b in zip([0] + cuts_at, cuts_at + [len(text)])]
        plain = SentenceBuffer(max_chars=40)
        expected = [t for f in frags for t in plain.push(f)] + plain.close()
        cuts = feed(SentenceBuffer(max_chars=40), frags)
        assert [c.text for c in cuts] == expected
        for c in cuts:
            assert text[c.start:c.end] == c.text
        assert [c.start for c in cuts] == sorted(c.start for c in cuts)
