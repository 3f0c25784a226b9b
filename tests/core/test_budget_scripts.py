"""The token budget and the expected length count characters by how long they take to say
(core/sentences.speech_chars): a Chinese segment is not budgeted as if it were spoken at the
rate of English letters."""

import pytest

from orpheus_svc.core.prompt import expected_audio_seconds, max_audio_seconds, max_tokens_for_text
from orpheus_svc.core.sentences import speech_chars


def test_latin_text_counts_one_per_character_and_keeps_its_budget():
    assert speech_chars("Hello there.") == 12
    assert max_tokens_for_text("Hello there.") == 308  # 2 s + 12/7 s -> 44 frames
    assert speech_chars("Ça va? ß ø") == 10


@pytest.mark.parametrize("text, per_char", [("你好世界", 3.3), ("ひらがなカタカナ", 3.3),
                                            ("안녕하세요", 2.2), ("नमस्ते", 1.25)])
def test_other_scripts_count_as_the_latin_letters_they_take_to_say(text, per_char):
    assert speech_chars(text) == pytest.approx(len(text) * per_char)


def test_a_full_chinese_segment_is_budgeted_for_slow_mandarin():
    segment = "今天天气很好我们一起去公园散步然后在湖边喝茶聊天" * 3  # 72 characters
    normal = len(segment) / 4.5  # Mandarin speaks about 4 to 5 characters per second
    assert max_audio_seconds(segment) >= 2 * normal  # the same margin English text gets
    assert expected_audio_seconds(segment) == pytest.approx(normal, rel=0.05)
    # as Latin letters it would have been budgeted 2 + 72/7 = 12.3 s, less than normal speech
    assert 2 + len(segment) / 7 < normal


def test_tags_are_not_counted_as_text():
    assert max_audio_seconds("你好<laugh>") == pytest.approx(2 + 2 * 3.3 / 7 + 1.5)


def test_digits_and_currency_signs_count_as_the_words_they_are_said_as():
    assert speech_chars("2024") == 20  # "twenty twenty-four" has 18
    assert speech_chars("$3.50") == 7 + 5 + 1 + 10  # "three dollars and fifty cents": 29
    # unnormalised digits (a French voice, or normalize_text off) get a budget that fits them
    assert max_audio_seconds("1234567") > 2 + len("one million two hundred thirty-four "
                                                   "thousand five hundred sixty-seven") / 15
