"""uvicorn serving the Starlette app inside the running asyncio loop (no thread, no process).

The gRPC server owns SIGTERM/SIGINT and the drain sequence (app/server.py), so uvicorn's own
signal capture is switched off: the app tells it when to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

import structlog
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import Route, WebSocketRoute

from orpheus_svc.core.status import Status
from orpheus_svc.server.state import ServerState

from . import speech
from .auth import ReleaseLeases
from .errors import ApiError
from .limits import BoundedBody, BoundedWebSocket, bounded_h11

log = structlog.get_logger("orpheus_svc.http")


def build_app(state: ServerState) -> Starlette:
    """The HTTP edge's routes over `state` (its Runtime may still be loading)."""
    from . import playground, ws

    app = Starlette(routes=[
        Route("/v1/audio/speech", speech.speech, methods=["POST"]),
        Route("/v1/audio/voices", speech.voices, methods=["GET"]),
        Route("/v1/models", speech.models, methods=["GET"]),
        WebSocketRoute("/v1/audio/speech/stream", ws.stream),
        Route("/", playground.page, methods=["GET"]),
    ], exception_handlers={HTTPException: _http_error, Exception: _internal})
    app.state.server_state = state
    app.add_middleware(ReleaseLeases)  # per-key session leases end with the response
    # outermost: the whole body, within http.max_body_bytes / body_timeout_seconds, before
    # any route (or authorisation) runs
    app.add_middleware(BoundedBody, state=state)
    return app


async def _http_error(request, exc: HTTPException):
    """Starlette's own refusals (no such route: 404, wrong method: 405) in the same JSON
    shape as every other error of this edge."""
    if exc.status_code == 404:
        error = ApiError(Status.NOT_FOUND, f"no route {request.url.path[:100]!r}; this server "
                         "offers /v1/audio/speech, /v1/audio/voices, /v1/models and "
                         "/v1/audio/speech/stream (WebSocket)")
    else:
        error = ApiError(Status.INVALID_ARGUMENT, str(exc.detail), http_status=exc.status_code)
    response = error.response()
    response.headers.update(exc.headers or {})  # 405: Allow
    return response


async def _internal(request, exc: Exception):
    """A bug's last answer: the documented JSON shape, not a text/plain 500 (Starlette
    still logs the traceback: a bug is an error)."""
    return ApiError(Status.INTERNAL, "internal error; the server log has details").response()


class _Uvicorn(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):  # uvicorn >= 0.29: the app owns the signals
        yield

    def install_signal_handlers(self) -> None:  # older uvicorn
        pass


class HttpServer:
    """Start/stop the HTTP edge on `host:port` in the current event loop."""

    def __init__(self, state: ServerState, host: str, port: int, grace_seconds: float,
                 ssl: dict | None = None) -> None:
        # ssl: uvicorn's ssl_* settings when the server runs TLS (docs/security.md)
        config = uvicorn.Config(build_app(state), host=host, port=port, lifespan="off",
                                log_config=None, access_log=False,
                                # h11 always (not httptools, when installed): the head
                                # bounds read its parser state (http/limits.py)
                                http=bounded_h11(state), ws=BoundedWebSocket,
                                ws_max_size=state.config.http.max_body_bytes,
                                timeout_graceful_shutdown=max(grace_seconds, 0.1),
                                **(ssl or {}))
        self._server = _Uvicorn(config)
        self._task: asyncio.Task | None = None
        self.port = port
        self._host = host

    async def start(self) -> None:
        # Bound here, not by uvicorn: its bind failure is a sys.exit inside our loop.
        sock = socket.socket(socket.AF_INET6 if ":" in self._host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self._host, self.port))
        except OSError as exc:
            sock.close()
            raise OSError(f"cannot bind HTTP {self._host}:{self.port}: {exc}") from exc
        self.port = sock.getsockname()[1]
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started and not self._task.done():
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()  # raises what stopped it
        log.info("http listening", host=self._host, port=self.port)

    async def stop(self) -> None:
        """Stop accepting, let responses in flight finish (up to the grace), then close."""
        if self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, SystemExit):
            await self._task
        self._task = None
