"""Sentence-end rules per language, for the segmenter (server/segmenter.py). Pure Python.

    language   sentence ends                          needs after the mark       abbreviations
    en de      . ! ? ... (+ closing quotes/brackets)  whitespace                 per language
    fr         as above, closers after a space too   whitespace + next word     per language
    es it ...  as above; "¿" / "¡" may follow at once  whitespace, ¿ or ¡         per language
    zh ja      。 ！ ？ (+ closing 」』”）】 ...)        any character but a closer  -
               and . ! ? before whitespace (embedded Latin text)
    hi         । ॥ ? ! . (+ closers)                   whitespace                 -
    ko and others: the Latin rules

Every rule decides from text that has already arrived, including the one character after
the mark (so "3." followed by "5" is not cut, and a Chinese closing quote that follows 。
stays with its sentence); that is what keeps the same text cutting into the same segments
however it is fragmented.

Lengths (the segment limit, the token budget, the expected utterance) are counted in Latin
characters of speech, `speech_chars`: a character carries different amounts of speech per
script and class. A Mandarin character is a syllable (about 4-5 per second of speech, against
about 15 Latin letters), a Hangul block about one, and a digit or a currency sign is said as a
word ("7" -> "seven", "$" -> "dollars"). So `text.max_segment_chars` = 250 allows 250 letters
of English, 75 Chinese characters, or about 50 characters of prices and phone numbers, all
about as long to say.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# closing quotes and brackets that belong to the sentence before them (German closes with
# \u201c and \u2018; CJK with its corner brackets and full-width parentheses)
CLOSERS = ("\"')]}\u201d\u2019\u201c\u2018\u00bb\u300d\u300f\uff09\u3011\u300b\u3009"
           "\uff3d\uff5d")

_LATIN_END = r"[.!?\u2026]+[" + re.escape(CLOSERS) + r"]*"
_CJK_MARKS = "\u3002\uff01\uff1f\uff61"
_CJK_END = r"[" + _CJK_MARKS + r"]+[" + re.escape(CLOSERS) + r"]*"
_LATIN_CLAUSE = r"(?:[,;:]|\s[-\u2013\u2014]{1,2})(?=\s)"

_EN = ("mr mrs ms dr prof sr jr st vs etc e.g i.e a.m p.m approx dept est fig inc ltd no vol "
       "jan feb mar apr jun jul aug sep sept oct nov dec mt ft")
_ABBREVIATIONS = {
    "en": _EN,
    "fr": "m mm mme mmes mlle mlles dr pr me st ste etc cf p ex av apr j.-c env n no vol fig "
          "janv févr avr juil sept oct nov déc",
    "de": "z.b d.h u.a usw bzw ca nr dr hr fr prof evtl ggf inkl vgl bspw s.o s.u u.ä o.ä "
          "str jan feb märz apr aug sep sept okt nov dez mio mrd",
    "es": "sr sra srta dr dra ud uds etc p.ej pág núm no vol av avda ee.uu",
    "it": "sig sigg sig.ra dott prof ing avv ecc es pag n no vol",
}


@dataclass(frozen=True)
class SentenceRules:
    """How one language ends sentences; `is_abbreviation` says whether the mark at an index
    of the buffer is not a sentence end after all."""

    language: str
    sentence_end: re.Pattern  # its lookahead is group "la": the text the decision needs
    clause_end: re.Pattern
    abbreviations: frozenset[str]
    ordinal_dot: bool = False  # German "am 3. Oktober": a dot after a day number is no end

    @staticmethod
    def decided_at(m: re.Match) -> int:
        """Index of the last character a sentence-end match needed: the segmenter cuts at
        the end that can be decided first, as it would when fed one character at a time."""
        return m.end("la") - 1

    def is_abbreviation(self, buf: str, dot: int) -> bool:
        if buf[dot] != ".":
            return False
        if re.fullmatch(r"\s*(?:\d{1,3}|[a-z])", buf[:dot]):
            return True  # a list marker opening the segment ("1. Buy milk", "b. Then")
        if self.ordinal_dot and re.search(r"(?<!\d)\d{1,2}$", buf[:dot]):
            return True
        word = re.search(r"([^\W\d_][\w.\-]*)$", buf[:dot])
        if word is None:
            return False
        raw = word.group(1)
        w = raw.lower().strip(".")
        initials = re.fullmatch(r"(?:[A-Z]\.)+[A-Z]", raw) is not None  # U.S. / J.R.R.
        return (w in self.abbreviations or initials
                or (len(w) == 1 and w.isalpha() and raw[0].isupper()))


# Latin characters of speech per character, by script: a Han character or kana is a
# syllable, a Hangul block about one, so they take about as long to say as 3.3 and 2.2 Latin
# letters; a Devanagari code point a little over one.
_SCRIPT_WEIGHTS = (
    (0x3040, 0x30FF, 3.3),      # Hiragana, Katakana
    (0x3400, 0x4DBF, 3.3),      # CJK Extension A
    (0x4E00, 0x9FFF, 3.3),      # CJK Unified Ideographs
    (0xF900, 0xFAFF, 3.3),      # CJK Compatibility Ideographs
    (0x20000, 0x3FFFF, 3.3),    # CJK Extensions B and later
    (0x1100, 0x11FF, 2.2),      # Hangul Jamo
    (0x3130, 0x318F, 2.2),      # Hangul Compatibility Jamo
    (0xAC00, 0xD7AF, 2.2),      # Hangul syllables
    (0x0900, 0x097F, 1.25),     # Devanagari
)


# A digit is said as a word or more ("7" -> "seven", "2024" -> "twenty twenty-four", "$3.50"
# -> "three dollars and fifty cents"), and so are these signs.
_DIGIT = 5.0
_SIGNS = {"$": 7.0, "\u20ac": 5.0, "\u00a3": 6.0, "\u00a5": 4.0, "\u20b9": 6.0, "%": 8.0,
          "@": 4.0, "&": 4.0, "#": 6.0}


def char_weight(ch: str) -> float:
    """Latin characters of speech in one character (module docstring)."""
    if "0" <= ch <= "9":
        return _DIGIT
    sign = _SIGNS.get(ch)
    if sign is not None:  # before the script ranges: the euro and rupee signs are above 0x0900
        return sign
    cp = ord(ch)
    if cp < 0x0900:
        return 1.0
    return next((w for lo, hi, w in _SCRIPT_WEIGHTS if lo <= cp <= hi), 1.0)


class _Weights(dict):
    """char_weight per character, each worked out once (every segment of every call is
    weighed character by character on the serving loop); at most _WEIGHTS_KEPT characters
    are kept, so text with every code point in it cannot grow it without bound."""

    def __missing__(self, ch: str) -> float:
        weight = char_weight(ch)
        if len(self) < _WEIGHTS_KEPT:
            self[ch] = weight
        return weight


_WEIGHTS_KEPT = 8192


_WEIGHTS = _Weights()


def speech_chars(text: str) -> float:
    """How long `text` takes to say, in Latin characters (an English letter counts 1, a
    Chinese character 3.3, a digit 5): what the segment limit, the token budget and the
    expected length are computed from."""
    return sum(map(_WEIGHTS.__getitem__, text))


def fit(text: str, limit: float) -> int:
    """The longest prefix of `text` (its length) whose speech_chars is at most `limit`."""
    total = 0.0
    weight = _WEIGHTS.__getitem__
    for i, ch in enumerate(text):
        total += weight(ch)
        if total > limit + 1e-9:  # 75 x 1/0.3 is 250.00000000000003 in floating point
            return i
    return len(text)


def _base(language: str) -> str:
    return language.replace("_", "-").split("-")[0].lower() or "en"


def rules_for(language: str | None) -> SentenceRules:
    """The rules for a BCP 47 language (unknown languages get the Latin rules, no
    abbreviations beyond initials)."""
    lang = _base(language or "en")
    abbreviations = frozenset(_ABBREVIATIONS.get(lang, "").split())
    if lang in ("zh", "ja", "yue"):
        # no spaces between sentences: the mark ends one once any non-closer follows
        # (the character after must be neither a closer nor another mark: "。。" is one end)
        end = re.compile(r"(?:" + _CJK_END + r"|" + _LATIN_END + r"(?=\s))(?=(?P<la>[^"
                         + re.escape(CLOSERS) + _CJK_MARKS + r"]))")
        clause = re.compile(r"[\uff0c\uff1b\uff1a\u3001](?=.)|" + _LATIN_CLAUSE, re.DOTALL)
        return SentenceRules(lang, end, clause, abbreviations)
    if lang == "hi":
        end = re.compile(r"[\u0964\u0965.!?\u2026]+[" + re.escape(CLOSERS) + r"]*(?=(?P<la>\s))")
        return SentenceRules(lang, end, re.compile(_LATIN_CLAUSE), abbreviations)
    if lang in ("es", "ca", "gl"):
        # "¡Hola!¿Qué tal?": an opening inverted mark may follow the end without a space
        end = re.compile(_LATIN_END + r"(?=(?P<la>[\s\u00bf\u00a1]))")
        return SentenceRules(lang, end, re.compile(_LATIN_CLAUSE), abbreviations)
    if lang == "fr":
        # "« Très bien. »": the closing guillemet comes after a (no-break) space, so the end
        # is decided at the next word (whose first character is not a closer)
        end = re.compile(r"[.!?\u2026]+(?:[ \u00a0\u202f]?[" + re.escape(CLOSERS) + r"])*"
                         r"(?=(?P<la>\s+[^\s" + re.escape(CLOSERS) + r"]))")
        return SentenceRules(lang, end, re.compile(_LATIN_CLAUSE), abbreviations)
    end = re.compile(_LATIN_END + r"(?=(?P<la>\s))")
    return SentenceRules(lang, end, re.compile(_LATIN_CLAUSE), abbreviations or frozenset(),
                         ordinal_dot=lang == "de")
