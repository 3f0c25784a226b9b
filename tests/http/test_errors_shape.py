"""OpenAI's error shape and the HTTP status of each refusal (no server needed)."""

import json

import pytest

from orpheus_svc.http.errors import ApiError


@pytest.mark.parametrize("code,status,kind", [
    ("INVALID_ARGUMENT", 400, "invalid_request_error"),
    ("FAILED_PRECONDITION", 400, "invalid_request_error"),
    ("UNAUTHENTICATED", 401, "authentication_error"),
    ("NOT_FOUND", 404, "invalid_request_error"),
    ("RESOURCE_EXHAUSTED", 429, "rate_limit_error"),
    ("UNAVAILABLE", 503, "server_error"),
    ("INTERNAL", 500, "server_error"),
])
def test_grpc_codes_map_to_openai_statuses_and_types(code, status, kind):
    response = ApiError(code, "why", "voice").response()
    body = json.loads(response.body)
    assert response.status_code == status
    assert body == {"error": {"message": "why", "type": kind, "param": "voice", "code": code.lower()}}
    assert ("retry-after" in response.headers) == (status in (429, 503))
