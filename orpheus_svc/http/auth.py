"""The one place where authentication and per-key limits plug into the HTTP edge.

Every HTTP route and the WebSocket call `authorize()` before doing any work. With no keys
configured it admits everyone, as the gRPC edge does. With keys (docs/security.md) it
resolves the caller from the `Authorization: Bearer <key>` header (the `openai` SDK sends
its api_key there; browsers' WebSockets pass it as the `api_key` query parameter) and raises ApiError(Status.UNAUTHENTICATED, ...) -> 401 or
ApiError(Status.RESOURCE_EXHAUSTED, ...) -> 429, using the same key store and limiter as the gRPC
interceptor, so both edges share one implementation.
"""

from __future__ import annotations

import structlog
from starlette.requests import HTTPConnection

from orpheus_svc.core.status import Status

from .errors import ApiError

log = structlog.get_logger("orpheus_svc.http.auth")

_LEASE = "orpheus_api_key_lease"
_KEY = "orpheus_api_key"  # the caller's key name, for its call's span


def api_key_name(conn: HTTPConnection) -> str | None:
    """The name of the key `authorize` admitted this request with (None: keys are off)."""
    return conn.scope.get("state", {}).get(_KEY)


def authenticate(conn: HTTPConnection):
    """The caller's key, or None when keys are off; raises ApiError(UNAUTHENTICATED) -> 401
    (counted and logged) without a known key. No lease is taken: `authorize` does that.
    limits.BoundedBody calls it before reading a request body, so an unknown caller's body
    is never read."""
    guard = getattr(conn.app.state.server_state, "auth", None)
    if guard is None:
        return None
    header = conn.headers.get("authorization")
    if header is None and conn.scope["type"] == "websocket" and conn.query_params.get("api_key"):
        header = f"Bearer {conn.query_params['api_key']}"
    result = guard.store.authenticate(header)
    if result.key is None:
        guard.unauthenticated_total += 1
        log.warning("request refused", path=conn.url.path, status="UNAUTHENTICATED",
                    reason=result.error)
        raise ApiError(Status.UNAUTHENTICATED, result.error)
    return result.key


async def authorize(conn: HTTPConnection) -> None:
    """Admit or refuse a request or WebSocket before any work (raises ApiError to refuse).

    With API keys on (state.auth, built by the gRPC server from the same settings), every
    route needs `Authorization: Bearer <key>` (WebSockets may pass `?api_key=<key>`, as
    browsers cannot set headers). Session routes (POST, WebSocket) also take a per-key lease,
    released by `ReleaseLeases` when the response or socket ends.
    """
    key = authenticate(conn)
    if key is None:
        return None
    guard = conn.app.state.server_state.auth
    conn.scope.setdefault("state", {})[_KEY] = key.name
    is_session = conn.scope["type"] == "websocket" or conn.scope.get("method") == "POST"
    if is_session and _LEASE not in conn.scope.setdefault("state", {}):
        lease, refusal = guard.limiter.acquire(key)
        if lease is None:
            log.warning("request refused", path=conn.url.path, status="RESOURCE_EXHAUSTED",
                        api_key=key.name, reason=refusal)
            raise ApiError(Status.RESOURCE_EXHAUSTED, refusal)
        conn.scope["state"][_LEASE] = lease
    return None


class ReleaseLeases:
    """ASGI middleware: end the per-key lease `authorize` took once the response is sent or
    the WebSocket closed (the app call returns then), however it ended."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        def release() -> None:
            lease = scope.get("state", {}).pop(_LEASE, None)
            if lease is not None:
                lease.release()

        async def sending(message) -> None:
            # release before the last body chunk or the close goes out, so a client that
            # starts its next session the moment this one ended is not refused
            kind = message.get("type")
            if kind == "http.response.body" and not message.get("more_body") or \
                    kind == "websocket.close":
                release()
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            release()
