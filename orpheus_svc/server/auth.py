"""The gRPC edge of API keys: one grpc.aio server interceptor (docs/security.md).

Every call but health presents `authorization: Bearer <key>`; a missing, malformed or unknown
key ends the call with UNAUTHENTICATED before the servicer sees it. Synthesis calls
(StreamingSynthesize, Synthesize) then take a per-key lease (KeyLimiter) held for the whole
call; a key at its limit gets RESOURCE_EXHAUSTED naming the limit. The admin service
(orpheus.admin.v1) needs a key with the admin scope: any other key gets PERMISSION_DENIED
(an admin key may still synthesize, like any key). Health is always open
(Kubernetes probes carry no key); reflection and GetStatus are open only when
server.auth_open_reflection / server.auth_open_status say so. Logs name the key, never the key.
"""

from __future__ import annotations

import grpc
import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from orpheus_svc.security.keys import KeyLimiter, KeyStore

log = structlog.get_logger("orpheus_svc.auth")

_HEALTH = "/grpc.health.v1.Health/"
_REFLECTION = ("/grpc.reflection.v1alpha.ServerReflection/", "/grpc.reflection.v1.ServerReflection/")
_STATUS = "/orpheus.tts.v1.TTSService/GetStatus"
_SESSIONS = ("/orpheus.tts.v1.TTSService/StreamingSynthesize",
             "/orpheus.tts.v1.TTSService/Synthesize")
ADMIN_PREFIX = "/orpheus.admin.v1.AdminService/"  # every method needs the admin scope


class AuthGuard:
    """The key store, the limiter and the counters both edges share (state.auth)."""

    def __init__(self, store: KeyStore, limiter: KeyLimiter | None = None) -> None:
        self.store = store
        self.limiter = limiter or KeyLimiter()
        self.unauthenticated_total = 0

    @classmethod
    def from_config(cls, s) -> "AuthGuard | None":
        """The guard for server settings `s`, or None when no keys are configured."""
        store = KeyStore(s.api_keys_file, s.api_keys or "",
                         on_reload=lambda names: log.info("api keys reloaded", keys=names),
                         on_error=lambda msg: log.error("api keys not reloaded; keeping the "
                                                        "previous keys", error=msg))
        return cls(store) if store.enabled else None


def _metadata(details, name: str) -> str | None:
    for k, v in details.invocation_metadata or ():
        if k == name:
            return v if isinstance(v, str) else v.decode("utf-8", "replace")
    return None


def _same_kind(handler, behavior):
    """A handler of `handler`'s kind (unary/stream) whose body is `behavior`."""
    kw = dict(request_deserializer=handler.request_deserializer,
              response_serializer=handler.response_serializer)
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(behavior, **kw)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(behavior, **kw)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(behavior, **kw)
    return grpc.unary_unary_rpc_method_handler(behavior, **kw)


def _inner(handler):
    return (handler.stream_stream or handler.stream_unary or handler.unary_stream
            or handler.unary_unary)


class ApiKeyInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, guard: AuthGuard, open_reflection: bool = False,
                 open_status: bool = False) -> None:
        self.guard = guard
        self.open = [_HEALTH] + (list(_REFLECTION) if open_reflection else []) \
            + ([_STATUS] if open_status else [])

    async def intercept_service(self, continuation, details):
        method = details.method or ""
        if any(method.startswith(p) for p in self.open):
            return await continuation(details)
        handler = await continuation(details)
        if handler is None:  # unknown method: grpc answers UNIMPLEMENTED
            return None
        result = self.guard.store.authenticate(_metadata(details, "authorization"))
        if result.key is None:
            self.guard.unauthenticated_total += 1
            log.warning("call refused", rpc=method, status="UNAUTHENTICATED", reason=result.error)
            return _same_kind(handler, _refuse(grpc.StatusCode.UNAUTHENTICATED, result.error))
        key = result.key
        if method.startswith(ADMIN_PREFIX):
            return self._admin(handler, method, key)
        if method not in _SESSIONS:
            return handler
        inner = _inner(handler)
        limiter = self.guard.limiter

        async def limited(request, context):
            lease, refusal = limiter.acquire(key)
            if lease is None:
                log.warning("call refused", rpc=method, status="RESOURCE_EXHAUSTED",
                            api_key=key.name, reason=refusal)
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
            structlog.contextvars.bind_contextvars(api_key=key.name)
            try:
                return await inner(request, context)  # the servicer's handlers are coroutines
            finally:
                lease.release()
                structlog.contextvars.unbind_contextvars("api_key")
        return _same_kind(handler, limited)

    def _admin(self, handler, method: str, key):
        """An admin method: refused unless `key` has the admin scope; the call's log lines
        name the key (its name: never the key)."""
        if not key.admin:
            log.warning("call refused", rpc=method, status="PERMISSION_DENIED",
                        api_key=key.name, reason="no admin scope")
            return _same_kind(handler, _refuse(
                grpc.StatusCode.PERMISSION_DENIED,
                f"the API key '{key.name}' may not call the admin service: it needs the admin "
                f"scope (scopes: [admin] in the key file, docs/security.md)"))
        inner = _inner(handler)

        async def named(request, context):
            structlog.contextvars.bind_contextvars(api_key=key.name)
            try:
                return await inner(request, context)
            finally:
                structlog.contextvars.unbind_contextvars("api_key")
        return _same_kind(handler, named)


def _refuse(code, message):
    async def refuse(request, context):
        await context.abort(code, message)
    return refuse


class AuthCollector:
    """Per-key counters for Prometheus, one series per configured key name."""

    def __init__(self, guard: AuthGuard) -> None:
        self.guard = guard

    def collect(self):
        snap = self.guard.limiter.snapshot()
        names = sorted(set(self.guard.store.names()) | set(snap))
        active = GaugeMetricFamily("orpheus_api_key_sessions_open",
                                   "Open synthesis calls per API key", labels=["key"])
        started = CounterMetricFamily("orpheus_api_key_sessions",
                                      "Synthesis calls admitted per API key", labels=["key"])
        refused = CounterMetricFamily("orpheus_api_key_refused",
                                      "Calls refused by a per-key limit", labels=["key", "limit"])
        for name in names:
            s = snap.get(name, {"active": 0, "sessions_total": 0,
                                "refused": {"max_concurrent_sessions": 0,
                                            "sessions_per_minute": 0}})
            active.add_metric([name], s["active"])
            started.add_metric([name], s["sessions_total"])
            for limit, n in sorted(s["refused"].items()):
                refused.add_metric([name, limit], n)
        yield active
        yield started
        yield refused
        yield CounterMetricFamily("orpheus_unauthenticated",
                                  "Calls refused for a missing or unknown API key",
                                  value=self.guard.unauthenticated_total)
