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
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any, Callable, Iterable, Sequence

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
    """How many attempts a call has had and may still have, within its deadline."""

    def __init__(self, retries: int, timeout: float | None,
                 clock: Callable[[], float] = time.monotonic,
                 rand: Callable[[], float] = random.random) -> None:
        self.retries = retries
        self.number = 1
        self._clock = clock
        self._rand = rand
        self._deadline = None if timeout is None else clock() + timeout

    def timeout(self) -> float | None:
        """The time left for the next attempt (None: no deadline)."""
        return None if self._deadline is None else max(0.0, self._deadline - self._clock())

    def may_retry(self, unavailable: bool, was_accepted: bool) -> bool:
        """Whether a call that ended so may have another attempt (deadline aside)."""
        return unavailable and not was_accepted and self.number <= self.retries

    def next_wait(self, unavailable: bool, was_accepted: bool) -> float | None:
        """The backoff before one more attempt, or None when the call must not be retried
        (another status, accepted, attempts used up, or the deadline would pass first)."""
        if not self.may_retry(unavailable, was_accepted):
            return None
        wait = backoff_s(self.number + 1, self._rand)
        left = self.timeout()
        if left is not None and left <= wait:
            return None
        return wait

    def advance(self) -> None:
        self.number += 1


class ReplayInput:
    """A session's input items, taken once from ``source`` and shared by every attempt of
    the call (each item as ``convert`` makes it; None: skipped): the current attempt reads
    item i with ``get(attempt, i)``, so a new attempt replays what earlier ones sent, in
    order, then goes on with new items. A reader of an earlier attempt gets END.

    Only one thread reads ``source`` at a time (an earlier attempt's gRPC thread may still be
    blocked in it; the item it gets is kept for the current attempt, not lost). Until
    ``accept()`` every item is kept for a replay; after it (or with ``keep=False``: no
    retries) the current attempt's reads drop the items before the one it reads, so a long
    session keeps only what has not been sent. An exception from ``source`` or ``convert``
    ends the input and is re-raised to every reader after it.
    """

    def __init__(self, source: Iterable[Any],
                 convert: Callable[[Any], Any] = lambda item: item, keep: bool = True) -> None:
        self._source = iter(source)
        self._convert = convert
        self._lock = threading.Lock()   # everything below
        self._pull = threading.Lock()   # one reader of the source at a time
        self._log: list[Any] = []
        self._base = 0                  # index of _log[0]
        self._keep = keep
        self._attempt = 1
        self._ended = False
        self.error: BaseException | None = None

    def begin(self, attempt: int) -> None:
        """Attempt ``attempt`` reads from now on; earlier ones' readers get END."""
        with self._lock:
            self._attempt = attempt

    def accept(self) -> None:
        """The server accepted the current attempt: no replay will be needed."""
        with self._lock:
            self._keep = False

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
                        self._ended = True
                    else:
                        self._log.append(item)

    def _logged(self, attempt: int, i: int) -> tuple[Any] | None:
        with self._lock:
            if attempt != self._attempt:  # a later attempt has taken over
                return (END,)
            if not self._keep and i > self._base:
                del self._log[:i - self._base]
                self._base = i
            k = i - self._base
            if k < len(self._log):
                return (self._log[k],)
            if self._ended:
                if self.error is not None:
                    raise self.error
                return (END,)
            return None

    def buffered(self) -> int:
        """Items kept for a replay (for tests)."""
        with self._lock:
            return len(self._log)
