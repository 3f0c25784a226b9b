"""English text normalisation (core/normalize.py): a table of written forms and their spoken
forms, plus the properties that must hold for any text (tags and plain words untouched)."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orpheus_svc.core.normalize import has_normalizer, normalize_text
from orpheus_svc.core.tokens import EMOTION_TAGS

TABLE = [
    # numbers
    ("It costs 3.", "It costs three."),
    ("Room 101", "Room one hundred and one"),
    ("1,234 people", "one thousand two hundred and thirty-four people"),
    ("pi is 3.14", "pi is three point one four"),
    ("it fell to -5 today", "it fell to minus five today"),
    ("agent 007", "agent zero zero seven"),
    ("1,000,000", "one million"),
    ("0.5", "zero point five"),
    ("2024 people", "two thousand and twenty-four people"),
    ("version 1.2.3", "version one dot two dot three"),
    # ordinals
    ("the 1st time", "the first time"),
    ("her 22nd birthday", "her twenty-second birthday"),
    ("the 103rd floor", "the one hundred and third floor"),
    ("the 4TH of them", "the fourth of them"),
    # currency
    ("$3.50", "three dollars and fifty cents"),
    ("$1", "one dollar"),
    ("$0.99", "ninety-nine cents"),
    ("$1.01", "one dollar and one cent"),
    ("$1,000,000", "one million dollars"),
    ("$5k", "five thousand dollars"),
    ("$2.5 billion", "two point five billion dollars"),
    ("£20", "twenty pounds"),
    ("£2M", "two million pounds"),
    ("€5.20", "five euros and twenty cents"),
    ("5€", "five euros"),
    ("¥300", "three hundred yen"),
    ("USD 5", "five dollars"),
    # percentages
    ("50% off", "fifty percent off"),
    ("rates of 12.5%", "rates of twelve point five percent"),
    ("down -3%", "down minus three percent"),
    # dates
    ("on 12/05/2024", "on December fifth, twenty twenty-four"),
    ("on 25/12/2024", "on December twenty-fifth, twenty twenty-four"),
    ("on 2024-05-12", "on May twelfth, twenty twenty-four"),
    ("May 5th, 2024", "May fifth, twenty twenty-four"),
    ("Jan. 3", "January third"),
    ("5 May 2024", "the fifth of May, twenty twenty-four"),
    ("the 4th of July", "the fourth of July"),
    ("1/1/99", "January first, nineteen ninety-nine"),
    # years and decades
    ("in 1999", "in nineteen ninety-nine"),
    ("since 2010", "since twenty ten"),
    ("the 1990s", "the nineteen nineties"),
    ("the '80s", "the eighties"),
    ("from 1905", "from nineteen oh-five"),
    # times
    ("at 3:30 pm", "at three thirty P M"),
    ("at 15:45", "at fifteen forty-five"),
    ("at 12:00", "at twelve o'clock"),
    ("at 3:05", "at three oh five"),
    ("at 7am", "at seven A M"),
    ("Meet at 5 p.m.", "Meet at five P M."),
    ("at 9:00 AM", "at nine A M"),
    ("open 9-5 pm", "open nine to five P M"),
    ("call 911 now", "call nine one one now"),
    # units
    ("5 km", "five kilometers"),
    ("1 km", "one kilometer"),
    ("2 kg", "two kilograms"),
    ("72°F", "seventy-two degrees Fahrenheit"),
    ("20°C", "twenty degrees Celsius"),
    ("100 mph", "one hundred miles per hour"),
    ("3.5 GB", "three point five gigabytes"),
    ("250ms", "two hundred and fifty milliseconds"),
    ("2 lbs", "two pounds"),
    ("6 ft", "six feet"),
    # ranges, fractions, phone numbers
    ("pages 10-20", "pages ten to twenty"),
    ("1/2 cup", "one half cup"),
    ("3/4 of it", "three quarters of it"),
    ("call 555-123-4567", "call five five five, one two three, four five six seven"),
    ("(555) 123-4567", "five five five, one two three, four five six seven"),
    # abbreviations and symbols
    ("Mr. Smith", "Mister Smith"),
    ("Dr. Jones and Mrs. Lee", "Doctor Jones and Missus Lee"),
    ("I saw the Dr.", "I saw the Doctor."),
    ("St. Louis", "Saint Louis"),
    ("5 Main St. The end.", "five Main Street. The end."),
    ("cats vs. dogs", "cats versus dogs"),
    ("apples, pears, etc. Then more.", "apples, pears, et cetera. Then more."),
    ("fruit, e.g. apples", "fruit, for example apples"),
    ("one, i.e. this", "one, that is this"),
    ("No. 5", "number five"),
    ("#1 hit", "number one hit"),
    ("salt & pepper", "salt and pepper"),
    # URLs and e-mail
    ("see www.example.com", "see w w w dot example dot com"),
    ("go to https://example.com/docs.", "go to example dot com slash docs."),
    ("mail jane.doe@example.com", "mail jane dot doe at example dot com"),
    ("write to bob_99@mail.co.uk!", "write to bob underscore nine nine at mail dot co dot uk!"),
    # left alone: tags, words, the user's own spellings of things we do not normalise
    ("Hello <laugh> there", "Hello <laugh> there"),
    ("I <sigh> paid $5", "I <sigh> paid five dollars"),
    ("COVID-19", "COVID-nineteen"),
    ("mp3 files in 4K and v2.0", "mp3 files in 4K and v2.0"),
    ("Nothing to change here.", "Nothing to change here."),
    ("ratio 3:1", "ratio three:one"),
]


def test_the_table_has_at_least_fifty_cases():
    assert len(TABLE) >= 50


@pytest.mark.parametrize("written, spoken", TABLE)
def test_written_forms_become_spoken_forms(written, spoken):
    assert normalize_text(written) == spoken


def test_the_issue_example():
    assert normalize_text("$3.50 on 12/05/2024") == \
        "three dollars and fifty cents on December fifth, twenty twenty-four"


@pytest.mark.parametrize("language", ["fr", "de", "zh", "hi", "es-ES"])
def test_other_languages_are_left_as_written(language):
    assert not has_normalizer(language)
    assert normalize_text("$3.50 le 12/05/2024", language) == "$3.50 le 12/05/2024"


@pytest.mark.parametrize("language", ["en", "en-US", "en_GB", "EN"])
def test_english_variants_have_a_normaliser(language):
    assert has_normalizer(language)


_TAG_TEXT = st.lists(st.one_of(st.sampled_from(EMOTION_TAGS + ("<custom_tag>",)),
                               st.text(alphabet=st.characters(blacklist_characters="<>"),
                                       max_size=40)), max_size=8)


@settings(max_examples=300, deadline=None)
@given(_TAG_TEXT)
def test_any_text_normalises_without_error_and_keeps_its_tags_in_order(parts):
    text = "".join(parts)
    out = normalize_text(text)
    assert re.findall(r"<[^<>\s]+>", out) == re.findall(r"<[^<>\s]+>", text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(whitelist_categories=("Lu", "Ll", "Zs"),
                                      blacklist_characters="\u00b5"), max_size=80))
def test_plain_words_are_unchanged(text):
    # letters and spaces only: nothing for any rule to change (except the & and abbreviations,
    # which need punctuation)
    assert normalize_text(text) == text


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-10**12, max_value=10**12))
def test_every_integer_becomes_words(n):
    out = normalize_text(f"x {n} y")
    assert not re.search(r"\d", out), out


def test_text_without_digits_skips_only_rules_that_could_not_match_it():
    """The number rules match only where a digit is: on text without one, skipping them
    changes nothing (compared with running every rule, in order)."""
    import random

    from orpheus_svc.core import normalize as N

    pieces = ["Dr. Smith", "St. Mary St.", "No. one", "a & b", "mail bob@example.com",
              "see www.example.org/path", "e.g. this", "etc.", "No.", "#tag", "half/quarter",
              "Jan. the first", "three-four", "ten %", "$ and €", "It's me.", "U.S. Army"]
    rng = random.Random(16)
    for _ in range(300):
        text = " ".join(rng.choice(pieces) for _ in range(rng.randrange(1, 8)))
        every = text
        for pattern, repl in N._RULES:
            every = pattern.sub(repl, every)
        assert N._normalize_plain(text) == every, text
