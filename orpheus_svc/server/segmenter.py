"""Per-session text segmentation: fragments of any size in, speakable segments out. Pure.

A voice agent pushes text as its LLM writes it ("Hel", "lo the", "re. How"), so a boundary
is only certain once the character after it has arrived:

    buffer:  "Hello there. How are"      ". " seen -> cut "Hello there."
    buffer:  "It costs 3."               "." last  -> wait: "3.5" or "3. Then"?

Cuts happen at
  * a sentence end: . ! ? (or a run like ?! ...) plus closing quotes/brackets, followed by
    whitespace, unless the word is a known abbreviation (Mr. Dr. e.g. ...) or a single
    letter (initials); a newline also ends a segment;
  * the first segment of a session may end early at a clause mark (, ; : -- ) once it is
    `first_clause_min_chars` long, so that the first audio does not wait for a long
    sentence to finish streaming in;
  * `max_chars`: a segment that grows past it is cut at the last clause mark or space
    before the limit (mid-word only when there is no space at all);
  * flush() and close(): whatever is buffered.
Segments are stripped; whitespace-only text never becomes a segment.

push_cuts / flush_cuts return each segment as a Cut: its text, why it ended, and where it lies
in the session's text (the concatenation of every fragment pushed, counted in code points):

    session text: "  Hello there. How are"
                     ^start      ^end         Cut("Hello there.", 2, 14, "sentence")
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e a.m p.m approx dept est fig inc ltd no vol jan "
    "feb mar apr jun jul aug sep sept oct nov dec mt ft".split())
_CLOSERS = "\"')]}\u201d\u2019\u00bb"
_SENTENCE_END = re.compile(r"[.!?\u2026]+[" + re.escape(_CLOSERS) + r"]*(?=\s)")
_CLAUSE_END = re.compile(r"(?:[,;:]|\s[-\u2013\u2014]{1,2})(?=\s)")


#: Why a segment ended (the proto's SegmentEndCause, in words).
SENTENCE, CLAUSE, MAX_LENGTH, FLUSH, END_OF_INPUT = (
    "sentence", "clause", "max_length", "flush", "end_of_input")


@dataclass(frozen=True)
class Cut:
    """One segment: ``text`` (stripped) == session_text[start:end]; ``cause`` one of SENTENCE
    (sentence end or newline), CLAUSE (an early first segment), MAX_LENGTH, FLUSH,
    END_OF_INPUT."""

    text: str
    start: int
    end: int
    cause: str


class SentenceBuffer:
    def __init__(self, max_chars: int = 300, first_clause_min_chars: int = 0) -> None:
        if max_chars < 20:
            raise ValueError(f"max_chars must be >= 20, got {max_chars}")
        self.max_chars = max_chars
        self.first_clause_min_chars = first_clause_min_chars
        self._buf = ""
        self._base = 0  # code points of the session's text before the buffer
        self._emitted = 0  # segments cut so far

    @property
    def pending(self) -> str:
        return self._buf

    def push(self, fragment: str) -> list[str]:
        """Add text; return the segments it completed (possibly none)."""
        return [c.text for c in self.push_cuts(fragment)]

    def flush(self) -> list[str]:
        """Cut everything buffered (the client asked for it, or input ended)."""
        return [c.text for c in self.flush_cuts()]

    close = flush

    def push_cuts(self, fragment: str) -> list[Cut]:
        """push(), returning each segment as a Cut."""
        self._buf += fragment
        out: list[Cut] = []
        while True:
            cut = self._next_cut()
            if cut is None:
                break
            self._take(cut[0], cut[1], out)
        return out

    def flush_cuts(self, cause: str = FLUSH) -> list[Cut]:
        """flush(), returning the segment (if any) as a Cut with ``cause`` (FLUSH or
        END_OF_INPUT)."""
        out: list[Cut] = []
        self._take(len(self._buf), cause, out)
        return out

    def _take(self, cut: int, cause: str, out: list[Cut]) -> None:
        head, self._buf = self._buf[:cut], self._buf[cut:]
        segment = head.strip()
        if segment:
            start = self._base + len(head) - len(head.lstrip())
            out.append(Cut(segment, start, start + len(segment), cause))
            self._emitted += 1
        self._base += len(head)

    def _next_cut(self) -> tuple[int, str] | None:
        buf = self._buf
        newline = buf.find("\n")
        for m in _SENTENCE_END.finditer(buf):
            if newline != -1 and newline < m.start():
                break
            if not self._is_abbreviation(buf, m.start()):
                return m.end(), SENTENCE
        if newline != -1:
            return newline + 1, SENTENCE
        if self._emitted == 0 and self.first_clause_min_chars:
            for m in _CLAUSE_END.finditer(buf):
                if m.end() >= self.first_clause_min_chars and m.end() <= self.max_chars:
                    return m.end(), CLAUSE
        if len(buf) > self.max_chars:
            return self._forced_cut(buf[:self.max_chars + 1]), MAX_LENGTH
        return None

    @staticmethod
    def _is_abbreviation(buf: str, dot: int) -> bool:
        if buf[dot] != ".":
            return False
        word = re.search(r"([A-Za-z.]+)$", buf[:dot])
        if word is None:
            return False
        raw = word.group(1)
        w = raw.lower().strip(".")
        initials = re.fullmatch(r"(?:[A-Z]\.)+[A-Z]", raw) is not None  # U.S. / J.R.R.
        return (w in _ABBREVIATIONS or initials
                or (len(w) == 1 and w.isalpha() and raw[0].isupper()))

    @staticmethod
    def _forced_cut(head: str) -> int:
        clause = [m.end() for m in _CLAUSE_END.finditer(head)]
        if clause and clause[-1] >= len(head) // 2:
            return clause[-1]
        space = head.rfind(" ")
        return space if space > 0 else len(head) - 1
