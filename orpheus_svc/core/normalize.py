"""Text normalisation for English: the written forms an LLM produces, turned into the words
a speaker would say, before they reach the model. Pure Python (num2words; no torch, no grpc).

    "$3.50 on 12/05/2024 at 3:30 pm"
        -> "three dollars and fifty cents on December fifth, twenty twenty-four at three thirty P M"

Classes, applied in this order to the text between emotion tags (<laugh> etc. and anything
else in angle brackets is passed through untouched):

    URLs and e-mail addresses   www.example.com/docs -> w w w dot example dot com slash docs
    phone numbers               555-123-4567         -> five five five, one two three, ...
    currency                    $3.50, EUR 5 (€5), £2M, $5k, ¥300, ₹100
    percentages                 12.5%
    dates                       2024-05-12, 12/05/2024 (US month/day unless the first part
                                cannot be a month), May 5th, 2024, 5 May 2024
    times                       3:30 pm, 15:45, 7am, 12:00
    units after a number        5 km, 72°F, 3.5 GB, 100 mph
    ordinals                    1st, 22nd, 103rd
    years and decades           in 1999, since 2010, 1990s, '90s
    ranges                      10-20 -> ten to twenty
    numbers                     1,234; 3.14; -5; 007 (digit by digit)
    abbreviations               Mr. Dr. St. vs. etc. e.g. i.e. No. 5 #1 &

Everything else, including the user's own spelling, is left as written. The output is for
the model only: the client keeps seeing its own text (segment events), and the server logs
the spoken form at debug level. The words of the tables (months, currencies, units,
abbreviations) are in core/normalize_tables.py.
"""

from __future__ import annotations

import re
from typing import Callable

from num2words import num2words

from .normalize_tables import (ABBREVIATIONS, CURRENCY, FRACTIONS, MONTH_ABBR, MONTHS, SCALE,
                               TITLES, UNITS)

NORMALIZED_LANGUAGES = ("en",)

_TAG = re.compile(r"(<[^<>\s]+>)")


def has_normalizer(language: str) -> bool:
    """Whether `language` (BCP 47) has a normaliser here: English only for now."""
    return language.replace("_", "-").split("-")[0].lower() in NORMALIZED_LANGUAGES


def normalize_text(text: str, language: str = "en") -> str:
    """The spoken form of `text` (module docstring); unchanged for other languages."""
    if not has_normalizer(language):
        return text
    parts = _TAG.split(text)
    # odd indices are the tags themselves: never touched
    return "".join(p if i % 2 else _normalize_plain(p) for i, p in enumerate(parts))


# -- words for numbers ---------------------------------------------------------------------

_DIGITS = "zero one two three four five six seven eight nine".split()


def cardinal(n: int) -> str:
    # num2words writes "one thousand, two hundred": the commas would be read as pauses
    return num2words(n, lang="en").replace(",", "")


def ordinal(n: int) -> str:
    return num2words(n, lang="en", to="ordinal").replace(",", "")


def year(n: int) -> str:
    return num2words(n, lang="en", to="year").replace(",", "")


def digits(s: str) -> str:
    return " ".join(_DIGITS[int(c)] for c in s if c.isdigit())


def _number(int_part: str, frac: str | None = None) -> str:
    """Words for "1,234" / "3.14" / "007" (leading zeros and long ids digit by digit)."""
    raw = int_part.replace(",", "")
    if raw == "911" and not frac:
        return "nine one one"  # the emergency number is never "nine hundred and eleven"
    if (len(raw) > 1 and raw.startswith("0") and "," not in int_part) or len(raw) > 15:
        words = digits(raw)
    else:
        words = cardinal(int(raw))
    if frac:
        words += " point " + digits(frac)
    return words


def _plural(words: str) -> str:
    if words.endswith("y"):
        return words[:-1] + "ies"
    return words + ("es" if words.endswith("x") else "s")


# -- the rules ------------------------------------------------------------------------------

_NUM = r"\d{1,3}(?:,\d{3})+|\d+"
_B = r"(?<![\w.,])"  # a number starts here: not inside a word, a decimal or a list of digits
_E = r"(?![\w])"

_MONTH_RE = r"(" + "|".join(MONTHS) + r"|(?:" + "|".join(MONTH_ABBR) + r")\.?)"


def _month(name: str) -> str:
    name = name.rstrip(".")
    return MONTH_ABBR.get(name, name)


_UNIT_RE = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))


def _ends_sentence(m: re.Match) -> bool:
    rest = m.string[m.end():]
    return not rest.strip() or re.match(r"\s+[A-Z\"'(]", rest) is not None


def _url(m: re.Match) -> str:
    url = re.sub(r"^https?://", "", m.group(0))
    words = []
    for sep, piece in re.findall(r"([./:\-_?=&#]?)([^./:\-_?=&#]*)", url):
        if sep:
            words.append({".": "dot", "/": "slash", ":": "colon", "-": "dash", "_": "underscore",
                          "?": "question mark", "=": "equals", "&": "and", "#": "hash"}[sep])
        if piece:
            words.append(" ".join(piece) if piece.lower() == "www" else _speak_token(piece))
    return " ".join(words)


def _speak_token(piece: str) -> str:
    return digits(piece) if piece.isdigit() and len(piece) > 4 else (
        cardinal(int(piece)) if piece.isdigit() else piece)


def _email(m: re.Match) -> str:
    user, domain = m.group(1), m.group(2)
    spoken_user = re.sub(r"[._\-+]", lambda s: {".": " dot ", "_": " underscore ", "-": " dash ",
                                                "+": " plus "}[s.group(0)], user)
    spoken_user = re.sub(r"\d+", lambda d: " " + digits(d.group(0)) + " ", spoken_user)
    return (re.sub(r"\s+", " ", spoken_user).strip() + " at "
            + " dot ".join(domain.split(".")))


def _phone(m: re.Match) -> str:
    return ", ".join(digits(g) for g in m.groups() if g)


def _money(symbol: str, int_part: str, frac: str | None, scale: str | None) -> str:
    one, many, sub_one, sub_many = CURRENCY[symbol]
    if scale:
        return f"{_number(int_part, frac)} {SCALE[scale]} {many}"
    whole = int(int_part.replace(",", ""))
    cents = int((frac or "0")[:2].ljust(2, "0")) if frac else 0
    if frac and len(frac) > 2 or (cents and not sub_one):
        return f"{_number(int_part, frac)} {many}"
    words = []
    if whole or not cents:
        words.append(f"{cardinal(whole)} {one if whole == 1 else many}")
    if cents:
        words.append(f"{cardinal(cents)} {sub_one if cents == 1 else sub_many}")
    return " and ".join(words)


def _currency_before(m: re.Match) -> str:
    return _money(m.group("sym").strip(), m.group("int"), m.group("frac"), m.group("scale"))


def _currency_after(m: re.Match) -> str:
    return _money(m.group("sym"), m.group("int"), m.group("frac"), None)


def _percent(m: re.Match) -> str:
    sign = "minus " if m.group(1) else ""
    return f"{sign}{_number(m.group(2), m.group(3))} percent"


def _date_words(month: int, day: int, yr: str | None) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    words = f"{MONTHS[month - 1]} {ordinal(day)}"
    return f"{words}, {year(int(yr))}" if yr else words


def _iso_date(m: re.Match) -> str:
    return _date_words(int(m.group(2)), int(m.group(3)), m.group(1)) or m.group(0)


def _slash_date(m: re.Match) -> str:
    a, b, yr = int(m.group(1)), int(m.group(2)), m.group(3)
    if len(yr) == 2:
        yr = ("20" if int(yr) < 50 else "19") + yr
    month, day = (a, b) if a <= 12 else (b, a)  # US order unless a cannot be a month
    return _date_words(month, day, yr) or m.group(0)


def _month_day(m: re.Match) -> str:
    day = int(m.group(2))
    if not 1 <= day <= 31:
        return m.group(0)
    words = f"{_month(m.group(1))} {ordinal(day)}"
    return f"{words}, {year(int(m.group(3)))}" if m.group(3) else words


def _day_month(m: re.Match) -> str:
    day = int(m.group(1))
    if not 1 <= day <= 31:
        return m.group(0)
    the = "" if re.search(r"\bthe\s+$", m.string[:m.start()], re.IGNORECASE) else "the "
    words = f"{the}{ordinal(day)} of {_month(m.group(2))}"
    return f"{words}, {year(int(m.group(3)))}" if m.group(3) else words


def _ampm(raw: str | None) -> str:
    if not raw:
        return ""
    return " A M" if raw.lower().startswith("a") else " P M"


def _time(m: re.Match) -> str:
    hour, minute, meridiem = int(m.group(1)), int(m.group(2)), m.group(3)
    if hour > 24 or minute > 59 or (meridiem and not 1 <= hour <= 12):
        return m.group(0)
    if minute == 0:
        words = cardinal(hour) + ("" if meridiem else " o'clock")
    elif minute < 10:
        words = f"{cardinal(hour)} oh {cardinal(minute)}"
    else:
        words = f"{cardinal(hour)} {cardinal(minute)}"
    dot = "." if meridiem and meridiem.endswith(".") and _ends_sentence(m) else ""
    return words + _ampm(meridiem) + dot


def _hour_ampm(m: re.Match) -> str:
    first, hour = m.group(1), int(m.group(2))
    if not 1 <= hour <= 12 or (first and not 1 <= int(first) <= 12):
        return m.group(0)
    dot = "." if m.group(3).endswith(".") and _ends_sentence(m) else ""
    span = f"{cardinal(int(first))} to " if first else ""  # "2-3 pm"
    return span + cardinal(hour) + _ampm(m.group(3)) + dot


def _unit(m: re.Match) -> str:
    sign = "minus " if m.group(1) else ""
    one, many = UNITS[m.group(4)]
    amount = m.group(2)
    singular = amount == "1" and not m.group(3) and not sign
    return f"{sign}{_number(amount, m.group(3))} {one if singular else many}"


def _ordinal(m: re.Match) -> str:
    return ordinal(int(m.group(1).replace(",", "")))


def _year_after_word(m: re.Match) -> str:
    return f"{m.group(1)} {year(int(m.group(2)))}"


def _decade(m: re.Match) -> str:
    if m.group(1):  # '90s
        return _plural(cardinal(int(m.group(1))))
    n = int(m.group(2))
    # the 1900s are "the nineteen hundreds" (year() says "nineteen hundred"); only a
    # whole thousand is a cardinal: "the two thousands"
    return _plural(year(n) if n % 1000 else cardinal(n))


def _fraction(m: re.Match) -> str:
    return FRACTIONS.get((int(m.group(1)), int(m.group(2))), m.group(0))


def _range(m: re.Match) -> str:
    return f"{_number(m.group(1))} to {_number(m.group(2))}"


def _dotted_numbers(m: re.Match) -> str:
    return " dot ".join(_number(p) for p in m.group(0).split("."))


def _plain_number(m: re.Match) -> str:
    sign = "minus " if m.group(1) else ""
    return sign + _number(m.group(2), m.group(3))


def _abbreviation(table: dict[str, str], keep_dot: bool) -> Callable[[re.Match], str]:
    def sub(m: re.Match) -> str:
        word = table[m.group(0)]
        # a title's dot ends the sentence only when nothing follows ("I saw the Dr.")
        ends = _ends_sentence(m) if keep_dot else not m.string[m.end():].strip()
        return word + "." if ends else word
    return sub


def _saint_or_street(m: re.Match) -> str:
    rest = m.string[m.end():]
    if re.match(r"\s+[A-Z]", rest) and not _ends_sentence_strict(m):
        return "Saint"
    return "Street." if _ends_sentence(m) else "Street"


def _ends_sentence_strict(m: re.Match) -> bool:
    # "St. Louis" names a saint; "Main St. The ..." ends a sentence: a preceding capitalised
    # word (the street's name) says which
    before = m.string[:m.start()].rstrip()
    return re.search(r"[A-Z][a-z]+$", before) is not None


def _abbr_pattern(words) -> str:
    return r"(?<![\w.])(?:" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")"


_Rule = tuple[re.Pattern, Callable[[re.Match], str] | str]
# In order. The number rules match only where the text holds a digit (a number, a date, a
# time...), so text without one, most of a conversation, skips them.
_LINKS: list[_Rule] = [
    (re.compile(r"\b([A-Za-z0-9][A-Za-z0-9._%+\-]*)@([A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+)\b"), _email),
    (re.compile(r"(?:https?://|www\.)[^\s<>\"']*[^\s<>\"'.,;:!?)\]]"), _url),
]
_NUMBERS: list[_Rule] = [
    (re.compile(r"(?<![\w\d])\(?(\d{3})\)?[\s.-](\d{3})[\s.-](\d{4})(?![\w\d])"), _phone),
    (re.compile(r"(?<![\w])(?P<sym>[$€£¥₹]|(?:USD|EUR|GBP)\s?)(?P<int>" + _NUM + r")(?:\.(?P<frac>\d+))?"
                r"(?:\s?(?P<scale>thousand|million|billion|trillion|bn|mn|[kKmMbBtT])(?![\w]))?"),
     _currency_before),
    (re.compile(_B + r"(?P<int>" + _NUM + r")(?:\.(?P<frac>\d+))?\s?(?P<sym>[€£¥₹])"), _currency_after),
    (re.compile(r"(?:(?<=\s)|^)(-)?" + r"(" + _NUM + r")(?:\.(\d+))?\s?%"), _percent),
    (re.compile(_B + r"(?<![\w-])(\d{4})-(\d{2})-(\d{2})" + _E), _iso_date),
    (re.compile(_B + r"(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})" + _E), _slash_date),
    (re.compile(r"\b" + _MONTH_RE + r"\s(\d{1,2})(?:st|nd|rd|th)?(?:,?\s(\d{4}))?" + _E), _month_day),
    (re.compile(_B + r"(\d{1,2})(?:st|nd|rd|th)?\s(?:of\s)?" + _MONTH_RE + r"(?:,?\s(\d{4}))?" + _E), _day_month),
    (re.compile(_B + r"(\d{1,2}):(\d{2})(?::\d{2})?(?:\s?([AaPp]\.?[Mm]\.?)(?![\w]))?"), _time),
    (re.compile(_B + r"(?:(\d{1,2})\s?[-\u2013]\s?)?(\d{1,2})\s?([AaPp]\.[Mm]\.|[AaPp][Mm])(?![\w])"),
     _hour_ampm),
    (re.compile(r"(?:(?<=\s)|(?<=^)|(?<=\())(-)?(" + _NUM + r")(?:\.(\d+))?\s?(" + _UNIT_RE + r")(?![\w/])"),
     _unit),
    (re.compile(_B + r"(" + _NUM + r")(?:st|nd|rd|th)\b", re.IGNORECASE), _ordinal),
    (re.compile(r"\b(in|In|since|Since|by|until|from|From|of|year|circa|around|before|after|during)"
                r"\s(1[1-9]\d\d|20\d\d)" + _E), _year_after_word),
    (re.compile(r"(?:'(\d0)s|" + _B + r"(1[1-9]\d0|20\d0)s)\b"), _decade),
    (re.compile(_B + r"(\d)/(\d)" + _E), _fraction),
    (re.compile(_B + r"(\d+(?:\.\d+){2,})" + _E), _dotted_numbers),
    (re.compile(_B + r"(" + _NUM + r")\s?[-\u2013]\s?(" + _NUM + r")" + _E), _range),
    (re.compile(r"(?<![\w])#\s?(?=\d)"), "number "),
    (re.compile(r"\bNo\.\s?(?=\d)"), "number "),
]
_WORDS: list[_Rule] = [
    (re.compile(_abbr_pattern(TITLES)), _abbreviation(TITLES, keep_dot=False)),
    (re.compile(r"(?<![\w.])St\."), _saint_or_street),
    (re.compile(_abbr_pattern(ABBREVIATIONS)), _abbreviation(ABBREVIATIONS, keep_dot=True)),
    (re.compile(r"(?<=\s)&(?=\s)"), "and"),
]
_PLAIN_NUMBERS: list[_Rule] = [
    (re.compile(r"(?<![\w.])(-(?=\d))?(" + _NUM + r")(?:\.(\d+))?(?![\w])"), _plain_number),
]
_RULES = _LINKS + _NUMBERS + _WORDS + _PLAIN_NUMBERS
_RULES_WITHOUT_DIGITS = _LINKS + _WORDS
_DIGIT_RE = re.compile(r"\d")


def _normalize_plain(text: str) -> str:
    rules = _RULES if _DIGIT_RE.search(text) else _RULES_WITHOUT_DIGITS
    for pattern, repl in rules:
        text = pattern.sub(repl, text)
    return text
