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
    Status.ALREADY_EXISTS: (409, "invalid_request_error"),
    Status.RESOURCE_EXHAUSTED: (429, "rate_limit_error"),
    Status.CANCELLED: (499, "cancelled"),
    Status.UNIMPLEMENTED: (501, "server_error"),
    Status.UNAVAILABLE: (503, "server_error"),
    Status.DEADLINE_EXCEEDED: (504, "server_error"),
}


class ApiError(Exception):
    """An error answered before any audio: `code` is a domain Status (its name accepted).

    `http_status` replaces the code's HTTP status where HTTP has a more exact one for the
    same gRPC code (413 body too large, 408 body too slow, 415 not JSON); such a refusal
    is a client error (`invalid_request_error`)."""

    def __init__(self, code: Status | str, message: str, param: str | None = None,
                 http_status: int | None = None) -> None:
        super().__init__(message)
        self.code = Status(code)
        self.message = message
        self.param = param
        self.http_status = http_status

    @property
    def status(self) -> int:
        return self.http_status or STATUS.get(self.code, (500, "server_error"))[0]

    def body(self) -> dict:
        kind = "invalid_request_error" if self.http_status else \
            STATUS.get(self.code, (500, "server_error"))[1]
        return {"error": {"message": self.message, "type": kind, "param": self.param,
                          "code": self.code.lower()}}

    def response(self) -> JSONResponse:
        headers = {"Retry-After": "1"} if self.status in (429, 503) else {}
        if self.status in (408, 413):  # the body was not read: the connection cannot go on
            headers["Connection"] = "close"
        return JSONResponse(self.body(), status_code=self.status, headers=headers or None)
