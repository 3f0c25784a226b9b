"""Language-aware segmentation (core/sentences.py through server/segmenter.py): each
language's sentence ends and abbreviations, per-script length limits, and the
fragment-invariance property (the same text gives the same segments however it is
fragmented) in English, French, Spanish, German, Mandarin and Hindi."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orpheus_svc.core.sentences import speech_chars
from orpheus_svc.server.segmenter import SentenceBuffer

SAMPLES = {
    "en": ("Hello there, Dr. Smith. It costs 3.50 dollars! Really?! The U.S. team won. "
           "Call me at 5 p.m. tomorrow, e.g. at home.\nNew line",
           ["Hello there, Dr. Smith.", "It costs 3.50 dollars!", "Really?!", "The U.S. team won.",
            "Call me at 5 p.m. tomorrow, e.g. at home.", "New line"]),
    "fr": ("Bonjour, M. Dupont ! Comment allez-vous ? « Très bien. » Mme Martin arrive, etc. "
           "et voilà. Voir p. ex. la page 3. Fin",
           ["Bonjour, M. Dupont !", "Comment allez-vous ?", "« Très bien. »",
            "Mme Martin arrive, etc. et voilà.", "Voir p. ex. la page 3.", "Fin"]),
    "es": ("¡Hola!¿Qué tal? Bien, Sra. García. El Sr. Pérez llegó a las 3. ¿Y tú? ¡Adiós!",
           ["¡Hola!", "¿Qué tal?", "Bien, Sra. García.", "El Sr. Pérez llegó a las 3.",
            "¿Y tú?", "¡Adiós!"]),
    "de": ("Am 3. Oktober ist z.B. Feiertag. Das ist gut! Er sagte: „Komm.“ Dann ging er, "
           "d.h. nach Hause. Ende",
           ["Am 3. Oktober ist z.B. Feiertag.", "Das ist gut!", "Er sagte: „Komm.“",
            "Dann ging er, d.h. nach Hause.", "Ende"]),
    "zh": ("你好。今天天气很好！他说：“好。”然后走了？是的，我们在3.5公里外。Hello there. 再见",
           ["你好。", "今天天气很好！", "他说：“好。”", "然后走了？", "是的，我们在3.5公里外。",
            "Hello there.", "再见"]),
    "hi": ("नमस्ते। आप कैसे हैं? मैं ठीक हूँ॥ कीमत 3.5 रुपये है। धन्यवाद!",
           ["नमस्ते।", "आप कैसे हैं?", "मैं ठीक हूँ॥", "कीमत 3.5 रुपये है।", "धन्यवाद!"]),
}
LANGUAGES = sorted(SAMPLES)


def _segments(text, cuts, **kw):
    buf, out, prev = SentenceBuffer(**kw), [], 0
    for c in sorted(set(cuts)) + [len(text)]:
        out.extend(buf.push(text[prev:c]))
        prev = c
    return out + buf.close()


@pytest.mark.parametrize("language", LANGUAGES)
def test_sentence_ends_and_abbreviations_of_each_language(language):
    text, expected = SAMPLES[language]
    assert _segments(text, [], language=language) == expected


@pytest.mark.parametrize("language", LANGUAGES)
def test_one_character_at_a_time_gives_the_same_segments(language):
    text, expected = SAMPLES[language]
    assert _segments(text, range(len(text)), language=language) == expected


@pytest.mark.parametrize("language", LANGUAGES)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_fragmentation_gives_the_same_segments(language, data):
    text, expected = SAMPLES[language]
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    assert _segments(text, cuts, language=language) == expected


# Random text made of each language's words, marks, abbreviations and numbers, with a small
# segment limit, so that sentence ends, abbreviations, newlines and forced cuts all meet.
_PIECES = {
    "en": ["word", "Dr.", "e.g.", "3.50", "U.S.", ".", "!", "?", "?!", "\"", ")", ",", ";", " ", " ", "\n", "Mr"],
    "fr": ["mot", "M.", "etc.", "p.", "ex.", "«", "»", "\u00a0", " !", " ?", ".", ",", " ", " ", "\n"],
    "es": ["palabra", "¿", "¡", "?", "!", ".", "Sr.", "Sra.", "3.", ",", " ", " ", "\n"],
    "de": ["Wort", "z.B.", "d.h.", "3.", "Okt.", ".", "!", "„", "“", ",", " ", " ", "\n"],
    "zh": ["你好", "天气", "。", "！", "？", "“", "”", "，", "：", "3.5", "Hi", ". ", " ", "\n"],
    "hi": ["नमस्ते", "कैसे", "।", "॥", "?", "!", ".", "3.5", ",", " ", " ", "\n"],
}


@pytest.mark.parametrize("language", LANGUAGES)
@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_random_text_any_fragmentation_same_segments_nothing_lost(language, data):
    text = "".join(data.draw(st.lists(st.sampled_from(_PIECES[language]), max_size=120)))
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=25))
    kw = {"language": language, "max_chars": data.draw(st.integers(20, 60)),
          "first_clause_min_chars": data.draw(st.sampled_from([0, 10]))}
    whole = _segments(text, [], **kw)
    assert _segments(text, cuts, **kw) == whole
    assert _segments(text, range(len(text)), **kw) == whole
    assert "".join("".join(whole).split()) == "".join(text.split())  # nothing lost or moved
    assert all(seg.strip() and speech_chars(seg) <= kw["max_chars"] for seg in whole)


def test_one_long_fragment_cannot_make_a_segment_longer_than_the_limit():
    text = " ".join(["word"] * 200) + ". End here."
    segs = _segments(text, [], max_chars=100)
    assert max(map(len, segs)) <= 100
    assert segs == _segments(text, range(len(text)), max_chars=100)


@pytest.mark.parametrize("language, char, first", [
    ("en", "a", 250), ("fr", "a", 250), ("zh", "你", 75), ("zh-CN", "你", 75), ("ko", "가", 113),
    ("hi", "क", 200), ("en", "7", 50)])
def test_length_limits_count_speech_not_code_points(language, char, first):
    # a run with no space, clause mark or sentence end is cut where it stops fitting
    # max_chars Latin characters of speech: 250 letters, 75 Han characters, 50 digits
    segs = _segments(char * 600, [], language=language, max_chars=250)
    assert len(segs[0]) == first
    assert all(speech_chars(seg) <= 250 for seg in segs)


def test_a_price_list_is_cut_by_how_long_it_is_to_say():
    text = ", ".join(f"item {i} costs ${i * 7}.99" for i in range(1, 40))
    segs = _segments(text, [], max_chars=250)
    assert all(speech_chars(seg) <= 250 for seg in segs)
    assert max(map(len, segs)) < 120  # far fewer characters than 250 letters of prose
    assert segs == _segments(text, range(len(text)), max_chars=250)


def test_a_list_marker_opening_a_segment_is_not_a_sentence_end():
    text = "Things to do:\n1. Buy milk.\n2. Call Dr. Lee at 3 p.m.\nb. Rest. Then 4. items."
    assert _segments(text, []) == ["Things to do:", "1. Buy milk.", "2. Call Dr. Lee at 3 p.m.",
                                   "b. Rest.", "Then 4.", "items."]
    assert _segments(text, range(len(text))) == _segments(text, [])


def test_a_chinese_closing_quote_waits_for_the_next_character():
    buf = SentenceBuffer(language="zh")
    assert buf.push("他说：“好。") == []  # a closer may still follow the full stop
    assert buf.push("”") == []
    assert buf.push("然") == ["他说：“好。”"]
