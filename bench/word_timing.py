"""How far core/word_timing.py's word starts are from real ones, on espeak-ng's speech.

espeak-ng (libespeak-ng, through ctypes) speaks each sentence at three rates and reports, in
its synthesis events, the audio sample at which each word starts (espeakEVENT_WORD: its
`text_position` is the word's 1-based character offset, its `sample` the sample the word's
audio starts at). The estimator gets the same text and the true length of the audio, and
places the words; the error of a word start is |estimated - true| in ms, and a start is
"inside the right word" when it falls in [the word's true start, the next word's true start).

    python bench/word_timing.py                 # the table: held-out sentences, code defaults
    python bench/word_timing.py --tune          # the grid search over the constants, on the
                                                # tuning half only (it prints the best ones)

What espeak-ng speaks is each word's spoken form as the estimator weighs it (core/normalize.py
applied to that word alone, "$3.50" -> "three dollars and fifty cents"), so numbers are said
the way the estimator thinks they are; events are mapped back to the client's words through
those per-word spans. Sentences at even indices tune the constants, those at odd indices
are reported (the held-out half). The first word of every sentence is left out of the error
figures: it starts at the segment's start by construction. espeak-ng starts its first word
at sample 0, so the estimator runs with lead_in_s=0 here (Orpheus's lead-in is LEAD_IN_S).

Needs `apt-get install espeak-ng` (libespeak-ng.so.1); results in
bench/results/word-timing-espeak/ (summary.json, table.txt). Labelled in every output as
measured on espeak-ng speech, not Orpheus's.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import itertools
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orpheus_svc.core import word_timing as wt  # noqa: E402
from orpheus_svc.core.normalize import normalize_text  # noqa: E402

RATES = (130, 175, 230)  # espeak-ng words per minute (-s)
OUT = Path(__file__).resolve().parent / "results" / "word-timing-espeak"
LABEL = "measured on espeak-ng speech, not Orpheus's"

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello there, how are you doing today?",
    "Your order of 3 items will arrive on 12/05/2024, before noon.",
    "It costs $3.50, or about 3 euros, depending on the exchange rate.",
    "Please call me back at 555-123-4567 when you get a chance.",
    "Unbelievably, the extraordinarily complicated instructions were completely incomprehensible.",
    "Yes.",
    "No, I don't think so; not today, anyway.",
    "The meeting starts at 3:30 pm in room 204, on the second floor.",
    "She sells sea shells by the sea shore.",
    "Wait... are you sure? I thought we agreed on Tuesday!",
    "Approximately 45% of respondents preferred the first option.",
    "Dr. Smith will see you now, Mr. Jones.",
    "In 1999, the population was roughly 6 billion people.",
    "I'd like a large coffee, two croissants, and a glass of orange juice, please.",
    "Temperature tomorrow: a high of 72 degrees and a low of 55.",
    "Okay.",
    "Let me check that for you - it should only take a moment.",
    "Communication between departments has improved significantly since last quarter.",
    "The train leaves from platform 9 at 7:15, so don't be late!",
    "Why would anyone do that?",
    "My favourite colours are red, green, blue, and yellow.",
    "According to the report, revenue grew by 12.5% to $4,200,000 last year.",
    "Turn left at the second traffic light, then continue straight for 2 miles.",
    "Thanks so much for your help; I really appreciate it.",
    "A cat sat on a mat.",
    "Internationalisation and localisation are often abbreviated as i18n and l10n.",
    "Sorry, could you repeat that? The line is a little noisy.",
    "We have 24 hours, 60 minutes, and 3600 seconds in every single day.",
    "Good morning! It's a beautiful day, isn't it?",
    "The password must contain at least 8 characters, including 1 number.",
    "He walked slowly, carefully, deliberately, towards the door.",
    "Your account balance is $1,234.56 as of today.",
    "Great, that sounds perfect. See you on Friday at 10.",
    "Notwithstanding the aforementioned considerations, we shall proceed.",
    "Is it raining outside, or is that just the sprinklers?",
    "Flight BA 117 to New York is now boarding at gate 22.",
    "I can't believe it's already December; where did the year go?",
    "Press 1 for sales, 2 for support, or stay on the line for an operator.",
    "The end.",
]


# -- espeak-ng through ctypes -----------------------------------------------------------------

_EVENT_WORD, _EVENT_LIST_TERMINATED = 1, 0
_AUDIO_OUTPUT_SYNCHRONOUS, _CHARS_UTF8, _POS_CHARACTER, _RATE = 2, 1, 1, 1


class _Event(ctypes.Structure):  # espeak_EVENT (speak_lib.h)
    _fields_ = [("type", ctypes.c_int), ("unique_identifier", ctypes.c_uint),
                ("text_position", ctypes.c_int), ("length", ctypes.c_int),
                ("audio_position", ctypes.c_int), ("sample", ctypes.c_int),
                ("user_data", ctypes.c_void_p), ("id", ctypes.c_char * 8)]


_Callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                             ctypes.POINTER(_Event))


def load_espeak() -> ctypes.CDLL | None:
    """libespeak-ng, or None where it is not installed."""
    name = ctypes.util.find_library("espeak-ng") or "libespeak-ng.so.1"
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


class Espeak:
    """One espeak-ng instance in synchronous mode: speak() returns the word events (0-based
    character offset, start sample) and the audio's length in samples."""

    def __init__(self, lib: ctypes.CDLL, voice: str = "en-us"):
        self.lib = lib
        self.sample_rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, None, 0)
        if self.sample_rate <= 0:
            raise RuntimeError("espeak_Initialize failed")
        self._events: list[tuple[int, int]] = []
        self._samples = 0
        self._cb = _Callback(self._on_audio)  # kept: espeak-ng holds only the pointer
        lib.espeak_SetSynthCallback(self._cb)
        lib.espeak_SetVoiceByName(voice.encode())

    def _on_audio(self, wav, n, events) -> int:
        i = 0
        while events[i].type != _EVENT_LIST_TERMINATED:
            e = events[i]
            if e.type == _EVENT_WORD:
                self._events.append((e.text_position - 1, e.sample))
            i += 1
        self._samples += n
        return 0

    def speak(self, text: str, rate: int) -> tuple[list[tuple[int, int]], int]:
        self._events, self._samples = [], 0
        self.lib.espeak_SetParameter(_RATE, rate, 0)
        data = text.encode()
        self.lib.espeak_Synth(data, len(data) + 1, 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
        self.lib.espeak_Synchronize()
        return self._events, self._samples


# -- the measurement (pure) -------------------------------------------------------------------

def spoken_text(words: list[wt.Word]) -> tuple[str, list[tuple[int, int]]]:
    """The text espeak-ng speaks, each word's spoken form joined by spaces, and each word's
    [start, end) in it."""
    parts, spans, pos = [], [], 0
    for w in words:
        spoken = normalize_text(w.text) if not w.is_tag else ""
        parts.append(spoken)
        spans.append((pos, pos + len(spoken)))
        pos += len(spoken) + 1
    return " ".join(parts), spans


def true_starts(spans: list[tuple[int, int]], events: list[tuple[int, int]]) -> list[int | None]:
    """Each word's start sample: its first word event whose character offset lies in the
    word's span (a number espeak-ng says as several words has several); None for a word
    espeak-ng says nothing for (a lone dash)."""
    out: list[int | None] = [None] * len(spans)
    for pos, sample in events:
        for i, (lo, hi) in enumerate(spans):
            if lo <= pos < hi:
                if out[i] is None or sample < out[i]:
                    out[i] = sample
                break
    return out


@dataclass(frozen=True)
class Scored:
    errors_ms: list[float]
    inside: list[bool]


def score(estimated: list[int], truth: list[int | None], total: int, rate_hz: int) -> Scored:
    """Errors (ms) and "inside the right word" for every word after the first that has a
    true start; estimated and truth in samples at `rate_hz`, total the audio's length."""
    timed = [(e, t) for e, t in zip(estimated, truth) if t is not None]
    errors, inside = [], []
    for k, (e, t) in enumerate(timed):
        if k == 0:
            continue
        nxt = timed[k + 1][1] if k + 1 < len(timed) else total
        errors.append(abs(e - t) * 1000.0 / rate_hz)
        inside.append(t <= e < max(nxt, t + 1))
    return Scored(errors, inside)


def summarise(scored: list[Scored]) -> dict:
    errors = [x for s in scored for x in s.errors_ms]
    inside = [x for s in scored for x in s.inside]
    if not errors:
        return {"words": 0}
    errors.sort()
    return {"words": len(errors),
            "median_ms": round(statistics.median(errors), 1),
            "p90_ms": round(errors[min(len(errors) - 1, int(0.9 * len(errors)))], 1),
            "inside_share": round(sum(inside) / len(inside), 3)}


@dataclass(frozen=True)
class Spoken:
    sentence: int
    rate: int
    words: list[wt.Word]
    truth: list[int | None]
    total: int
    sample_rate: int


def synthesise(espeak: Espeak, sentences: list[str], rates=RATES) -> list[Spoken]:
    out = []
    for i, text in enumerate(sentences):
        words = wt.split_words(text)
        spoken, spans = spoken_text(words)
        for rate in rates:
            events, total = espeak.speak(spoken, rate)
            out.append(Spoken(i, rate, words, true_starts(spans, events), total,
                              espeak.sample_rate))
    return out


def estimate(s: Spoken) -> Scored:
    timings = wt.place_words(s.words, wt.word_weights(s.words), 0, s.total, True,
                             lead_in_s=0.0, sample_rate=s.sample_rate)
    return score([t.start_sample for t in timings], s.truth, s.total, s.sample_rate)


def report(spoken: list[Spoken], held_out: bool) -> dict:
    part = [s for s in spoken if s.sentence % 2 == (1 if held_out else 0)]
    rows = {str(rate): summarise([estimate(s) for s in part if s.rate == rate])
            for rate in sorted({s.rate for s in part})}
    rows["all"] = summarise([estimate(s) for s in part])
    return rows


_GRID = {"VOWEL_S": (0.03, 0.04, 0.05, 0.065), "WORD_S": (0.04, 0.06, 0.08, 0.1),
         "CLAUSE_PAUSE_S": (0.35, 0.4, 0.45, 0.5), "SENTENCE_PAUSE_S": (0.15, 0.2, 0.25)}


def tune(spoken: list[Spoken]) -> dict:
    """The grid's best constants on the tuning half (CONSONANT_S fixed: only ratios matter)."""
    tuning = [s for s in spoken if s.sentence % 2 == 0]
    saved = {k: getattr(wt, k) for k in _GRID}
    best = None
    try:
        for values in itertools.product(*_GRID.values()):
            for k, v in zip(_GRID, values):
                setattr(wt, k, v)
            got = summarise([estimate(s) for s in tuning])
            key = (got["median_ms"], got["p90_ms"])
            if best is None or key < best[0]:
                best = (key, dict(zip(_GRID, values)), got)
    finally:
        for k, v in saved.items():
            setattr(wt, k, v)
    return {"constants": best[1], "tuning_half": best[2]}


def table(rows: dict, title: str) -> str:
    lines = [title, f"{'rate (wpm)':>10} {'words':>6} {'median ms':>10} {'p90 ms':>8} "
             f"{'inside word':>12}"]
    for rate, r in rows.items():
        lines.append(f"{rate:>10} {r['words']:>6} {r['median_ms']:>10} {r['p90_ms']:>8} "
                     f"{r['inside_share']:>12.1%}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tune", action="store_true", help="grid-search the constants (tuning half)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    lib = load_espeak()
    if lib is None:
        print("libespeak-ng not found: apt-get install espeak-ng", file=sys.stderr)
        return 2
    spoken = synthesise(Espeak(lib), SENTENCES)
    if args.tune:
        print(json.dumps(tune(spoken), indent=2))
        return 0
    held_out, tuning = report(spoken, True), report(spoken, False)
    summary = {"label": LABEL, "rates_wpm": list(RATES), "sentences": len(SENTENCES),
               "held_out": held_out, "tuning_half": tuning,
               "constants": {k: getattr(wt, k) for k in
                             ("VOWEL_S", "CONSONANT_S", "WORD_S", "CLAUSE_PAUSE_S",
                              "SENTENCE_PAUSE_S")},
               "method": "held_out: odd-index sentences, not used to choose the constants; "
                         "the first word of each sentence is left out; lead_in_s=0"}
    text = (table(held_out, f"Word-start error, held-out sentences ({LABEL})") + "\n\n"
            + table(tuning, f"Tuning half, for reference ({LABEL})") + "\n")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "table.txt").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
