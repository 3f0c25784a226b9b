"""How a call fails, once for every edge: the domain error a refusal raises, the error ids
that tie a client's INTERNAL message to the server's log line, and the classifier that
turns how a call ended into its status, outcome and log level. Pure: no grpc, no asyncio
(the edges pass in what they caught and whether a time limit cut the call).
"""

from __future__ import annotations

import uuid
from typing import NamedTuple

from .status import Status


class SessionError(Exception):
    """Ends a call with a domain Status (core/status.py; its name is accepted) and a message
    a person can act on; `cause` names a time limit that ended it ("idle"), for the counters;
    `field` names the setting a refusal is about (a SessionSettings or SamplingParams field:
    "voice", "seed", ...), which the HTTP edge reports as its error's `param`."""

    def __init__(self, code: Status | str, message: str, cause: str | None = None,
                 field: str | None = None) -> None:
        super().__init__(message)
        self.code = Status(code)
        self.message = message
        self.cause = cause
        self.field = field


def new_error_id() -> str:
    """A short id that ties a client's INTERNAL message to the server log line."""
    return uuid.uuid4().hex[:10]


def internal_message(what: str, error_id: str) -> str:
    """What a client learns about an internal failure: what failed and the id, never the
    exception's text."""
    return f"{what} (error id {error_id}; the server log has details)"


class Outcome(NamedTuple):
    """How a call ended: `code` the status it ends with (None: OK, or a cancel the client
    made itself, which needs no status); `outcome` what the counters and the trace record
    (a Status, "ok", "cancelled", or the time limit that cut it); `level` the log level of
    its closing line."""

    code: Status | None
    outcome: str
    level: str

    @property
    def traced(self) -> str:
        """What the call's span records: the status it ended with, else "ok"/"cancelled"."""
        return self.outcome if self.code is None else self.code


OK = Outcome(None, "ok", "info")
CANCELLED = Outcome(None, "cancelled", "info")


def classify(exc: BaseException | None, *, cut_by: str | None = None,
             cancelled: bool = False) -> Outcome:
    """The outcome of a call that raised `exc` (None: it ended normally). `cut_by`: the time
    limit that cut it (the watchdog's name for it), if one did; `cancelled`: the exception is
    the edge's cancellation (asyncio's, a generator closed early)."""
    if cut_by is not None:
        return Outcome(Status.DEADLINE_EXCEEDED, cut_by, "warning")
    if exc is None:
        return OK
    if isinstance(exc, SessionError):
        noisy = exc.cause or exc.code in (Status.INTERNAL, Status.UNAVAILABLE)
        return Outcome(exc.code, exc.cause or exc.code, "warning" if noisy else "info")
    if cancelled:
        return CANCELLED
    return Outcome(Status.INTERNAL, Status.INTERNAL, "error")
