"""Errors in OpenAI's JSON shape, with the HTTP status of the gRPC code they stand for.

    {"error": {"message": "...", "type": "invalid_request_error", "param": "voice",
               "code": "invalid_argument"}}
"""

from __future__ import annotations

from starlette.responses import JSONResponse

from orpheus_svc.core.status import Status

# The HTTP edge's one mapping: domain status -> (HTTP status, OpenAI error type); any code
# not listed (INTERNAL) is a 500 server_error.
STATUS = {
    Status.INVALID_ARGUMENT: (400, "invalid_request_error"),
    Status.FAILED_PRECONDITION: (400, "invalid_request_error"),
    Status.OUT_OF_RANGE: (400, "invalid_request_error"),
    Status.UNAUTHENTICATED: (401, "authentication_error"),
    Status.PERMISSION_DENIED: (403, "permission_error"),
    Status.NOT_FOUND: (404, "invalid_request_error"),
    Status.RESOURCE_EXHAUSTED: (429, "rate_limit_error"),
    Status.CANCELLED: (499, "cancelled"),
    Status.UNAVAILABLE: (503, "server_error"),
    Status.DEADLINE_EXCEEDED: (504, "server_error"),
}


class ApiError(Exception):
    """An error answered before any audio: `code` is a domain Status (its name accepted)."""

    def __init__(self, code: Status | str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = Status(code)
        self.message = message
        self.param = param

    @property
    def status(self) -> int:
        return STATUS.get(self.code, (500, "server_error"))[0]

    def body(self) -> dict:
        kind = STATUS.get(self.code, (500, "server_error"))[1]
        return {"error": {"message": self.message, "type": kind, "param": self.param,
                          "code": self.code.lower()}}

    def response(self) -> JSONResponse:
        headers = {"Retry-After": "1"} if self.status in (429, 503) else None
        return JSONResponse(self.body(), status_code=self.status, headers=headers)
