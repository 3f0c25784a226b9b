"""The one place where authentication and per-key limits plug into the HTTP edge.

Every HTTP route and the WebSocket call `authorize()` before doing any work. Today it
admits everyone, as the gRPC edge does. When API keys land (the security issue), this
function resolves the caller from the `Authorization: Bearer <key>` header (the `openai`
SDK sends its api_key there; browsers' WebSockets pass it as the `api_key` query parameter
or a `Sec-WebSocket-Protocol` entry) and raises ApiError("UNAUTHENTICATED", ...) -> 401 or
ApiError("RESOURCE_EXHAUSTED", ...) -> 429, using the same key store and limiter as the gRPC
interceptor, so both edges share one implementation.
"""

from __future__ import annotations

from starlette.requests import HTTPConnection


async def authorize(conn: HTTPConnection) -> None:
    """Admit or refuse a request or WebSocket before any work (raises ApiError to refuse)."""
    return None
