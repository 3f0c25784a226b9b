"""How a call ends, in domain terms: the status codes the service answers with.

The names are gRPC's (docs/api.md lists them per RPC), so the gRPC edge maps them one to
one (server/servicer.py) and the HTTP edge maps each to an HTTP status (http/errors.py);
nothing between the edges imports grpc. A StrEnum, so a code is also its name: it logs,
counts (the orpheus_errors{code} metric) and compares as the plain string.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    OK = "OK"
    CANCELLED = "CANCELLED"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    INTERNAL = "INTERNAL"
    UNAVAILABLE = "UNAVAILABLE"
    UNAUTHENTICATED = "UNAUTHENTICATED"
