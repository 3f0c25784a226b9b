"""core/sentences.py's lengths and rules, at their edges: each script range's first and
last code point and the ones just outside, the digits' bounds, the cap on the weight cache,
`fit` at exactly the limit, the language's base, and what counts as an abbreviation."""

import pytest

from orpheus_svc.core import sentences as S
from orpheus_svc.core.sentences import char_weight, fit, rules_for, speech_chars


@pytest.mark.parametrize("ch, weight", [
    ("0", 5.0), ("9", 5.0), ("/", 1.0), (":", 1.0),          # the digits and their neighbours
    ("$", 7.0), ("£", 6.0), ("%", 8.0), ("#", 6.0), ("€", 5.0), ("₹", 6.0), ("¥", 4.0), ("a", 1.0), ("\u08ff", 1.0),
    ("\u0900", 1.25), ("\u097f", 1.25), ("\u0980", 1.0),      # Devanagari
    ("\u303f", 1.0), ("\u3040", 3.3), ("\u30ff", 3.3), ("\u3100", 1.0),   # kana
    ("\u3400", 3.3), ("\u4dbf", 3.3), ("\u4e00", 3.3), ("\u9fff", 3.3), ("\ua000", 1.0),
    ("\uf900", 3.3), ("\ufaff", 3.3), ("\U00020000", 3.3), ("\U0003ffff", 3.3),
    ("\U00040000", 1.0),
    ("\u1100", 2.2), ("\u11ff", 2.2), ("\u3130", 2.2), ("\u318f", 2.2), ("\uac00", 2.2),
    ("\ud7af", 2.2), ("\ud7b0", 1.0),                         # Hangul
])
def test_each_characters_weight_at_the_edges_of_its_range(ch, weight):
    assert char_weight(ch) == weight


def test_speech_chars_adds_the_weights():
    assert speech_chars("") == 0
    assert speech_chars("a1$") == 13.0
    assert speech_chars("中文") == pytest.approx(6.6)


def test_fit_is_the_longest_prefix_within_the_limit_bound_included():
    assert fit("abc", 3) == 3 and fit("abc", 2) == 2 and fit("abc", 2.5) == 2
    assert fit("abc", 0) == 0 and fit("", 5) == 0
    assert fit("a1", 5) == 1 and fit("a1", 6) == 2
    assert fit("a" * 10, 9.999999) == 9


def test_the_weight_cache_is_capped_and_still_answers_past_its_cap():
    cache = S._Weights()
    chars = [chr(0x4E00 + i) for i in range(S._WEIGHTS_KEPT + 50)]
    assert [cache[c] for c in chars] == [3.3] * len(chars)
    assert len(cache) == S._WEIGHTS_KEPT
    assert chars[S._WEIGHTS_KEPT - 1] in cache and chars[S._WEIGHTS_KEPT] not in cache


@pytest.mark.parametrize("language, base", [
    ("", "en"), (None, "en"), ("EN_us", "en"), ("de-AT", "de"), ("zh-Hans-CN", "zh"),
    ("pt", "pt")])
def test_rules_are_chosen_by_the_languages_base(language, base):
    assert rules_for(language).language == base


def test_only_german_reads_a_dot_after_a_day_number_as_an_ordinal():
    assert rules_for("de").ordinal_dot and not rules_for("en").ordinal_dot
    assert rules_for("pt").abbreviations == frozenset()
    assert "dr" in rules_for("en").abbreviations and "z.b" in rules_for("de").abbreviations


@pytest.mark.parametrize("language, buf, abbreviation", [
    ("en", "Dr.", True), ("en", "ask Dr.", True), ("en", "the U.S.", True),
    ("en", "J.", True), ("en", "ok x.", False), ("en", "1.", True), ("en", "  b.", True),
    ("en", "123.", True), ("en", "1234.", False), ("en", "in 2024.", False),
    ("en", "it is 3.", False), ("en", "Hi!", False), ("en", "done.", False),
    ("en", "e.g.", True), ("en", "ETC.", True),
    ("de", "am 3.", True), ("de", "am 31.", True), ("de", "am 123.", False),
    ("de", "im Jahr 2024.", False), ("de", "z.B.", True),
])
def test_which_dots_are_no_sentence_end(language, buf, abbreviation):
    assert rules_for(language).is_abbreviation(buf, len(buf) - 1) is abbreviation


def test_chinese_clauses_end_at_full_width_commas_and_galician_reads_inverted_marks():
    zh = rules_for("zh").clause_end.search("你好，世界")
    assert zh is not None and zh.group() == "，"
    for language in ("es", "ca", "gl"):
        m = rules_for(language).sentence_end.search("¡Hola!¿Qué tal?")
        assert m is not None and m.group() == "!", language
    assert rules_for("pt").sentence_end.search("¡Hola!¿Qué tal?") is None
