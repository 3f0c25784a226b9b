"""Per-session text segmentation: fragments of any size in, speakable segments out. Pure.

A voice agent pushes text as its LLM writes it ("Hel", "lo the", "re. How"), so a boundary
is only certain once the character after it has arrived:

    buffer:  "Hello there. How are"      ". " seen -> cut "Hello there."
    buffer:  "It costs 3."               "." last  -> wait: "3.5" or "3. Then"?

Cuts happen at
  * a sentence end: . ! ? (or a run like ?! ...) plus closing quotes/brackets, followed by
    whitespace, unless the word is a known abbreviation (Mr. Dr. e.g. ...) or a single
    letter (initials); a newline also ends a segment. These are the English rules: the
    session's language (its voice's) picks others from core/sentences.py (CJK 。！？ without
    spaces, Spanish ¡¿, Hindi danda, French guillemets, German "3. Oktober", abbreviations
    per language);
  * the first segment of a session may end early at a clause mark (, ; : -- ) once it is
    `first_clause_min_chars` long, so that the first audio does not wait for a long
    sentence to finish streaming in;
  * `max_chars`: a segment that grows past it is cut at the last clause mark or space
    before the limit (mid-word only when there is no space at all); a sentence end beyond
    the limit does not count, however large the fragment that brought it. Lengths count
    Latin characters of speech (core/sentences.speech_chars): a Chinese character counts
    3.3, a digit 5, so a segment is about as long to say whatever it is written in;
  * flush() and close(): whatever is buffered.
Segments are stripped; whitespace-only text never becomes a segment.

push_cuts / flush_cuts return each segment as a Cut: its text, why it ended, and where it lies
in the session's text (the concatenation of every fragment pushed, counted in code points):

    session text: "  Hello there. How are"
                     ^start      ^end         Cut("Hello there.", 2, 14, "sentence")
"""

from __future__ import annotations

from dataclasses import dataclass

from orpheus_svc.core.sentences import SentenceRules, fit, rules_for, speech_chars


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
    def __init__(self, max_chars: int = 300, first_clause_min_chars: int = 0,
                 language: str = "en") -> None:
        if max_chars < 20:
            raise ValueError(f"max_chars must be >= 20, got {max_chars}")
        # sentence ends and abbreviations of the voice's language (core/sentences.py); both
        # lengths are in Latin characters of speech (speech_chars), not code points
        self.rules: SentenceRules = rules_for(language)
        self.max_chars = max_chars
        self.first_clause_min_chars = min(first_clause_min_chars, max_chars)
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
        # Each rule can decide at some index of the buffer (the character after a mark, a
        # newline); the cut is the one that can be decided first, and only within the
        # prefix that fits max_chars (`limit` characters) plus one character. Pushing the text
        # one character at a time would find exactly that cut, so any fragmentation gives
        # the same segments (and one long fragment cannot make a segment too long).
        buf, rules = self._buf, self.rules
        limit = fit(buf, self.max_chars)
        found: list[tuple[int, int, str]] = []  # (decided at, cut at, cause)
        for m in rules.sentence_end.finditer(buf):
            if rules.decided_at(m) > limit:
                break
            if not rules.is_abbreviation(buf, m.start()):
                found.append((rules.decided_at(m), m.end(), SENTENCE))
                break
        newline = buf.find("\n")
        if newline != -1 and newline <= limit:
            found.append((newline, newline + 1, SENTENCE))
        if self._emitted == 0 and self.first_clause_min_chars:
            for m in rules.clause_end.finditer(buf):
                if m.end() <= limit and speech_chars(buf[:m.end()]) >= self.first_clause_min_chars:
                    found.append((m.end(), m.end(), CLAUSE))
                    break
        if found:
            _, cut, cause = min(found)
            return cut, cause
        if limit < len(buf):
            return self._forced_cut(buf[:limit + 1]), MAX_LENGTH
        return None

    def _forced_cut(self, head: str) -> int:
        clause = [m.end() for m in self.rules.clause_end.finditer(head)]
        if clause and clause[-1] >= len(head) // 2:
            return clause[-1]
        space = head.rfind(" ")
        return space if space > 0 else len(head) - 1
