"""The edges of core/normalize.py's rules that the table of tests/core/test_normalize.py
leaves open: each range's both bounds and one past them (a day 1..31, an hour 1..12 before
am/pm), what an impossible date or time keeps, and the words that only some inputs reach
(a decade of whole hundreds, a currency after the number, ordinals with commas)."""

import pytest

from orpheus_svc.core.normalize import normalize_text

EDGES = [
    # a day of the month is 1..31, on either side of the month's name
    ("May 1", "May first"),
    ("May 31", "May thirty-first"),
    ("May 31, 2024", "May thirty-first, twenty twenty-four"),
    ("May 32", "May thirty-two"),
    ("May 0", "May zero"),
    ("1 May", "the first of May"),
    ("31 May", "the thirty-first of May"),
    ("31 May 2024", "the thirty-first of May, twenty twenty-four"),
    ("32 May", "thirty-two May"),
    ("0 May", "zero May"),
    # "the" is not said twice, whatever its case
    ("on the 5 May", "on the fifth of May"),
    ("on The 5th of May", "on The fifth of May"),
    ("THE 5 May", "THE fifth of May"),
    # an hour before am/pm is 1..12, and so is the first of a span
    ("at 1 pm", "at one P M"),
    ("at 12 pm", "at twelve P M"),
    ("at 13 pm", "at thirteen pm"),
    ("at 0 am", "at zero am"),
    ("1-12 pm", "one to twelve P M"),
    ("12-1 pm", "twelve to one P M"),
    ("13-3 pm", "thirteen to three pm"),
    ("0-3 pm", "zero to three pm"),
    ("1-13 pm", "one to thirteen pm"),
    # clock times: hours up to 24, minutes up to 59, 1..12 before am/pm; "oh" below 10
    ("at 24:00", "at twenty-four o'clock"),
    ("at 23:59", "at twenty-three fifty-nine"),
    ("at 12:30 pm", "at twelve thirty P M"),
    ("at 1:30 am", "at one thirty A M"),
    ("at 3:09", "at three oh nine"),
    ("at 3:10", "at three ten"),
    ("at 3:00 pm", "at three P M"),
    # the dot of "p.m." also ends the sentence only where the sentence ends
    ("It is 3:30 p.m.", "It is three thirty P M."),
    ("It is 3:30 p.m. Then", "It is three thirty P M. Then"),
    ("It is 3:30 p.m. and then", "It is three thirty P M and then"),
    ("It is 3:30 pm.", "It is three thirty P M."),
    # decades: a year's words, or a cardinal's for whole thousands
    ("the 2000s", "the two thousands"),
    ("the 2010s", "the twenty tens"),
    ("the 1900s", "the nineteen hundreds"),
    ("the 1100s", "the eleven hundreds"),
    ("the '60s", "the sixties"),
    # a currency sign after the number keeps the cents
    ("3.50€", "three euros and fifty cents"),
    ("3€", "three euros"),
    ("1.01£", "one pound and one penny"),
    # an ordinal with thousands separators
    ("the 1,000th time", "the one thousandth time"),
    ("the 1,234,567th", "the one million two hundred and thirty-four thousand five hundred "
                        "and sixty-seventh"),
    ("the 1234th", "the one thousand two hundred and thirty-fourth"),
    ("1.2.3.4", "one dot two dot three dot four"),
    # dates in figures: the bounds of a month and a day, US order unless the first part is
    # no month, two-digit years below 50 in this century
    ("12/31/2024", "December thirty-first, twenty twenty-four"),
    ("13/12/2024", "December thirteenth, twenty twenty-four"),
    ("1/2/49", "January second, twenty forty-nine"),
    ("1/2/50", "January second, nineteen fifty"),
    ("1/2/51", "January second, nineteen fifty-one"),
    ("2024-12-31", "December thirty-first, twenty twenty-four"),
    ("2024-01-01", "January first, twenty twenty-four"),
    # links: every separator has its word
    ("mail john+tts@example.com now", "mail john plus tts at example dot com now"),
    ("see www.example.com/a?b=1 now",
     "see w w w dot example dot com slash a question mark b equals one now"),
    # a sign before a unit
    ("it was -5 °C", "it was minus five degrees Celsius"),
    ("a -5 km run", "a minus five kilometers run"),
    ("1/2 done", "one half done"),
    ("3/4 done", "three quarters done"),
]


@pytest.mark.parametrize("written, spoken", EDGES)
def test_each_rule_at_its_edges(written, spoken):
    assert normalize_text(written) == spoken


@pytest.mark.parametrize("written, numbers", [
    ("2024-13-45", ("twenty-four", "thirteen", "forty-five")),   # no month 13
    ("2024-12-32", ("twenty-four", "twelve", "thirty-two")),     # no day 32
    ("2024-13-01", ("twenty-four", "thirteen", "one")),
    ("13/13/2024", ("thirteen/thirteen", "twenty-four")),
    ("12/32/2024", ("twelve", "thirty-two", "twenty-four")),
    ("at 25:00", ("twenty-five:",)),                              # no hour 25
    ("at 23:60", ("twenty-three:sixty",)),                        # no minute 60
    ("at 13:30 pm", ("thirteen:thirty",)),                        # no 13 pm
    ("at 0:30 am", ("zero:thirty",)),
    ("5/7 done", ("five", "seven")),                             # not a common fraction
    ("2/5 of it", ("two", "five")),
])
def test_what_is_no_date_time_or_fraction_keeps_every_number(written, numbers):
    """Refused by the date, time or fraction rule, the text goes on to the others: no number in it
    is dropped and no month is made up."""
    spoken = normalize_text(written)
    assert all(n in spoken for n in numbers), spoken
    assert "December" not in spoken and "half" not in spoken
