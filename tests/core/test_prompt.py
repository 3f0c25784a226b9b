from orpheus_svc.core import prompt as P
from orpheus_svc.core.tokens import FRAME_TOKENS, TOKENS_PER_SECOND


def fake_encode(text):
    return [128000] + [ord(c) for c in text]


def test_prompt_layout_matches_orpheus():
    ids = P.build_prompt(fake_encode, "tara", "Hi")
    assert ids == [128259, 128000, *map(ord, "tara: Hi"), 128009, 128260, 128261, 128257]


def test_max_tokens_is_whole_frames_and_grows_with_text():
    short, long = P.max_tokens_for_text("Hi."), P.max_tokens_for_text("Hi. " * 50)
    assert short % FRAME_TOKENS == 0 and long % FRAME_TOKENS == 0
    assert long > short
    # the budget covers speech at half the usual rate, so normal speech never hits it
    assert long / TOKENS_PER_SECOND > len("Hi. " * 50) / 8


def test_max_tokens_respects_limit_in_whole_frames():
    assert P.max_tokens_for_text("x" * 1000, limit=100) == 98


def test_tags_add_budget():
    assert P.max_tokens_for_text("hello <laugh>") > P.max_tokens_for_text("hello")


def test_expected_audio_is_one_character_long_at_least():
    per_char = 1 / P.TYPICAL_CHARS_PER_SECOND
    assert P.expected_audio_seconds("") == per_char
    assert P.expected_audio_seconds("a") == per_char
    assert P.expected_audio_seconds("ab") == 2 * per_char
