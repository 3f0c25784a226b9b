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
"""

from __future__ import annotations

import re

_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e a.m p.m approx dept est fig inc ltd no vol jan "
    "feb mar apr jun jul aug sep sept oct nov dec mt ft".split())
_CLOSERS = "\"')]}\u201d\u2019\u00bb"
_SENTENCE_END = re.compile(r"[.!?\u2026]+[" + re.escape(_CLOSERS) + r"]*(?=\s)")
_CLAUSE_END = re.compile(r"(?:[,;:]|\s[-\u2013\u2014]{1,2})(?=\s)")


class SentenceBuffer:
    def __init__(self, max_chars: int = 300, first_clause_min_chars: int = 0) -> None:
        if max_chars < 20:
            raise ValueError(f"max_chars must be >= 20, got {max_chars}")
        self.max_chars = max_chars
        self.first_clause_min_chars = first_clause_min_chars
        self._buf = ""
        self._emitted = 0  # segments cut so far

    @property
    def pending(self) -> str:
        return self._buf

    def push(self, fragment: str) -> list[str]:
        """Add text; return the segments it completed (possibly none)."""
        self._buf += fragment
        out: list[str] = []
        while True:
            cut = self._next_cut()
            if cut is None:
                break
            self._take(cut, out)
        return out

    def flush(self) -> list[str]:
        """Cut everything buffered (the client asked for it, or input ended)."""
        out: list[str] = []
        self._take(len(self._buf), out)
        return out

    close = flush

    def _take(self, cut: int, out: list[str]) -> None:
        segment, self._buf = self._buf[:cut].strip(), self._buf[cut:]
        if segment:
            out.append(segment)
            self._emitted += 1

    def _next_cut(self) -> int | None:
        buf = self._buf
        newline = buf.find("\n")
        for m in _SENTENCE_END.finditer(buf):
            if newline != -1 and newline < m.start():
                break
            if not self._is_abbreviation(buf, m.start()):
                return m.end()
        if newline != -1:
            return newline + 1
        if self._emitted == 0 and self.first_clause_min_chars:
            for m in _CLAUSE_END.finditer(buf):
                if m.end() >= self.first_clause_min_chars and m.end() <= self.max_chars:
                    return m.end()
        if len(buf) > self.max_chars:
            return self._forced_cut(buf[:self.max_chars + 1])
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
