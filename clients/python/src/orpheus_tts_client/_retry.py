"""Retrying a StreamingSynthesize call that a replica refused, in the clients themselves.

gRPC's own retryPolicy replays a client-streaming call's messages inside gRPC core. With
grpcio 1.85 that replay lost a request message about once in 300 retried calls (a text
fragment sent while a new attempt was starting never reached the server; the call then
succeeded without it). A lost fragment is silently missing speech, so the service config
leaves StreamingSynthesize out of its retryPolicy (``_target.service_config``) and the
clients retry it here: a new call, the config and every input item so far sent again in
order, then the rest as it comes. Unary and server-streaming calls (one request message)
keep gRPC's retries.

The rule is gRPC's (gRFC A6): only UNAVAILABLE, and only while the server has not accepted
the call, i.e. it sent no response message and no response headers carrying
``orpheus-session-id`` (orpheus-svc sends them as it accepts a session, before any audio).
A refusal while loading or draining comes with no headers, so it is retried; a call cut
after the server accepted it never is (audio may have been played). Backoff is gRPC's: a
random wait up to 0.05 s, doubling per attempt, at most 1 s; a deadline covers all attempts.
gRPC's transparent retry (of a call that never left the client) stays on for every method;
it is not what lost the fragments (bench/stream_retry_loss.py: those calls reached the
draining replica and were refused there).

A call the server accepted and then failed with UNAVAILABLE is resumed instead, when the
client's ``resume`` policy allows (``_resume``): a new call sends the text again from the
first segment that had not ended. Once a session has been accepted, every further attempt
counts against that policy, not against ``retries``.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any, Callable, Iterable, Sequence

from ._resume import Resume, ended_before, text_length

#: response header orpheus-svc sends when it accepts a session
SESSION_HEADER = "orpheus-session-id"
INITIAL_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0
BACKOFF_MULTIPLIER = 2.0

END = object()  # ReplayInput.get: the input has ended


def accepted(got_response: bool, headers: Sequence[tuple[str, Any]] | None) -> bool:
    """Whether the server accepted the call: a response message, or its session header."""
    return got_response or any(k == SESSION_HEADER for k, _ in headers or ())


def backoff_s(attempt: int, rand: Callable[[], float] = random.random) -> float:
    """The wait before attempt ``attempt`` (2 = the first retry), as gRPC's retryPolicy."""
    cap = min(MAX_BACKOFF_S, INITIAL_BACKOFF_S * BACKOFF_MULTIPLIER ** (attempt - 2))
    return rand() * cap


class Attempts:
    """How many attempts a call has had and may still have, within its deadline: ``retries``
    for refusals before the server accepted the session, then the ``resume`` policy for
    every attempt after it had (``_resume``)."""

    def __init__(self, retries: int, timeout: float | None,
                 clock: Callable[[], float] = time.monotonic,
                 rand: Callable[[], float] = random.random,
                 resume: Resume | None = None) -> None:
        self.retries = retries
        self.resume = resume
        self.number = 1
        self.resumes = 0              # attempts opened to resume the session
        self.was_accepted = False     # some attempt of the session was accepted
        self._failed_at: float | None = None  # when the accepted attempt to replace failed
        self._clock = clock
        self._rand = rand
        self._deadline = None if timeout is None else clock() + timeout

    def timeout(self) -> float | None:
        """The time left for the next attempt (None: no deadline)."""
        return None if self._deadline is None else max(0.0, self._deadline - self._clock())

    def accepted(self) -> None:
        """The server accepted the current attempt."""
        self.was_accepted = True
        self._failed_at = None

    def may_retry(self, unavailable: bool, was_accepted: bool) -> bool:
        """Whether a call that ended so may have another attempt (deadline aside);
        ``was_accepted``: the server had accepted this attempt."""
        if not unavailable:
            return False
        if was_accepted or self.was_accepted:
            r = self.resume
            return (r is not None and self.resumes < r.max_attempts
                    and (self._failed_at is None or self._clock() - self._failed_at < r.max_seconds))
        return self.number <= self.retries

    def next_wait(self, unavailable: bool, was_accepted: bool) -> float | None:
        """The backoff before one more attempt, or None when the call must not be retried
        or resumed (another status, attempts used up, or the deadline or the resume window
        would pass first)."""
        if was_accepted:
            self.accepted()
            self._failed_at = self._clock()  # ... and it has failed now
        if not self.may_retry(unavailable, was_accepted):
            return None
        resuming = self.was_accepted
        wait = backoff_s((self.resumes if resuming else self.number - 1) + 2, self._rand)
        left = self.timeout()
        if left is not None and left <= wait:
            return None
        if resuming and self._failed_at is not None and \
                self._clock() + wait - self._failed_at >= self.resume.max_seconds:
            return None
        return wait

    def advance(self) -> None:
        """A new attempt starts (a resume, once the session has been accepted)."""
        self.number += 1
        if self.was_accepted:
            self.resumes += 1


class ReplayInput:
    """A session's input items, taken once from ``source`` and shared by every attempt of
    the call (each item as ``convert`` makes it; None: skipped): the current attempt reads
    its item i with ``get(attempt, i)``, so a new attempt replays what earlier ones sent, in
    order, then goes on with new items. A reader of an earlier attempt gets END.

    Only one thread reads ``source`` at a time (an earlier attempt's gRPC thread may still be
    blocked in it; the item it gets is kept for the current attempt, not lost).

    What is kept for a new attempt: with ``resume``, every item from the cut on (the start
    of the first segment that has not ended, ``segment_ended``), and a new attempt starts
    there, a text straddling the cut sliced (``_resume``); without it, every item until
    ``accept()``, and after that (or with ``keep=False``: no retries) nothing but what the
    current attempt has not read. An exception from ``source`` or ``convert`` ends the input
    and is re-raised to every reader after it.
    """

    def __init__(self, source: Iterable[Any],
                 convert: Callable[[Any], Any] = lambda item: item, keep: bool = True,
                 resume: bool = False) -> None:
        self._source = iter(source)
        self._convert = convert
        self._lock = threading.Lock()   # everything below
        self._pull = threading.Lock()   # one reader of the source at a time
        self._log: list[tuple[int, Any]] = []  # (code point it starts at, item)
        self._base = 0                  # index of _log[0]
        self._start = 0                 # index of the current attempt's item 0
        self._next = 0                  # index the current attempt reads next
        self._pos = 0                   # code points taken from the source so far
        self._cut = 0
        self._keep = keep or resume
        self._resume = resume
        self._attempt = 1
        self.ended = False              # the source has ended
        self.error: BaseException | None = None

    def begin(self, attempt: int) -> None:
        """Attempt ``attempt`` reads from now on (from the cut, with ``resume``); earlier
        ones' readers get END."""
        with self._lock:
            self._attempt = attempt
            if self._resume:
                self._drop_ended(len(self._log))
                if self._log and self._log[0][0] < self._cut:  # a text straddling the cut
                    start, req = self._log[0]
                    self._log[0] = (self._cut, type(req)(text=req.text[self._cut - start:]))
            self._start = self._next = self._base

    def accept(self) -> None:
        """The server accepted the current attempt: without ``resume`` no replay will be
        needed."""
        with self._lock:
            if not self._resume:
                self._keep = False
                # what the current attempt has read is needed by no replay now: dropped at
                # once (its reader may have read everything, END included, before the
                # server's first answer, and then never asks again)
                read = self._next - self._base
                if read > 0:
                    del self._log[:read]
                    self._base += read

    def segment_ended(self, text_end: int) -> None:
        """A segment ended at code point ``text_end`` (its SegmentEnd): a resumed call starts
        at or after it, so what lies wholly before it, and was sent, is dropped."""
        with self._lock:
            self._cut = max(self._cut, text_end)
            if self._resume:
                self._drop_ended(self._next - self._base)

    def remaining(self) -> list[Any]:
        """What a new attempt would be sent (from the cut), for the session to check."""
        with self._lock:
            return [item for start, item in self._log if not ended_before(start, item, self._cut)]

    def get(self, attempt: int, i: int) -> Any:
        """Item i for ``attempt`` (blocking until the source gives it), or END."""
        while True:
            item = self._logged(attempt, i)
            if item is not None:
                return item[0]
            with self._pull:
                if self._logged(attempt, i) is not None:
                    continue
                try:
                    item = self._convert(next(self._source))
                    if item is None:  # nothing to send for it
                        continue
                except StopIteration:
                    item = END
                except Exception as e:  # noqa: BLE001 - handed to the session
                    self.error = e
                    item = END
                with self._lock:
                    if item is END:
                        self.ended = True
                    else:
                        self._log.append((self._pos, item))
                        if self._resume:
                            self._pos += text_length(item)

    def _drop_ended(self, upto: int) -> None:
        """Drop the leading items (of the first ``upto``) that lie wholly before the cut."""
        n = 0
        while n < upto and n < len(self._log) and ended_before(*self._log[n], self._cut):
            n += 1
        del self._log[:n]
        self._base += n

    def _logged(self, attempt: int, i: int) -> tuple[Any] | None:
        with self._lock:
            if attempt != self._attempt:  # a later attempt has taken over
                return (END,)
            at = self._start + i
            if not self._keep and at > self._base:
                del self._log[:at - self._base]
                self._base = at
            k = at - self._base
            if k < len(self._log):
                self._next = max(self._next, at + 1)  # read by the current attempt
                return (self._log[k][1],)
            if self.ended:
                if self.error is not None:
                    raise self.error
                return (END,)
            return None

    def buffered(self) -> int:
        """Items kept for a replay (for tests)."""
        with self._lock:
            return len(self._log)
