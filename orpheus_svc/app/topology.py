"""`server.topology: split`: one engine process and server.frontends gRPC front-ends.

    orpheus-svc serve (this parent: supervises, serves nothing)
      |- engine process   build_runtime (scheduler, slots, backend, flusher, SNAC), warm-up,
      |                   EngineServer (orpheus_svc/ipc/engine.py) on two ipc:// sockets
      |- front-end 0..N-1 app/server.py Server with a FrontendSpec: grpc.aio on server.port
                          (SO_REUSEPORT), sessions, encoding; RemoteEngine over ZeroMQ

On SIGTERM/SIGINT the parent stops the front-ends (SIGTERM: drain delay, grace) and, once
they exited, the engine (an Event; the engine ignores signals, so one sent to the whole
process group cannot stop it under draining front-ends); it exits 0 when they all did.
A child whose parent vanished (SIGKILL) stops by itself. If the engine process dies, the
front-ends notice (no heartbeat for ipc.frontend.DOWN_AFTER s: NOT_SERVING, calls in flight end
UNAVAILABLE), the parent stops them and exits with the engine's code (1 if it had none).
If a front-end dies, the parent stops the rest and exits non-zero. The processes are
started with multiprocessing's spawn method (no fork of a process holding threads).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time

from orpheus_svc.config import Config
from orpheus_svc.threads import name_os_thread, os_named

from orpheus_svc.ipc import wire
from orpheus_svc.ipc.frontend import DOWN_AFTER

log = logging.getLogger("orpheus_svc.topology")


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host if host not in ("", "0.0.0.0") else "0.0.0.0", 0))
        return s.getsockname()[1]


def _watch_parent(on_gone) -> None:
    """Call `on_gone` (once) if the supervising parent disappears (killed with SIGKILL)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        on_gone()
    threading.Thread(target=os_named(watch), name="parent-watch", daemon=True).start()


def engine_main(config: Config, commands_addr: str, events_addr: str, stop, priority=None) -> None:
    """The engine process: build, warm up, then serve the front-ends until the parent sets
    `stop` (a multiprocessing Event) after they drained. SIGTERM and SIGINT are ignored
    here: a signal sent to the whole process group (Ctrl-C, `timeout`, some supervisors)
    must not stop the engine under front-ends that are still draining."""
    from orpheus_svc.ipc.engine import EngineServer
    from orpheus_svc.ipc.histograms import EngineHistograms
    from orpheus_svc.runtime import build_runtime
    from orpheus_svc.server.logs import configure_logging

    configure_logging(config.server.log_format, config.server.log_level)
    name_os_thread("orpheus-engine")  # the process's name in ps and top
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _watch_parent(stop.set)
    spans = _engine_spans(config)  # the trace continues here (telemetry/engine.py)
    server = EngineServer(commands_addr, events_addr, config.server.frontends, observer=spans)
    server.start()
    try:
        # the engine's per-step histograms, served by front-end 0 (ipc/histograms.py)
        hists = EngineHistograms()
        runtime = build_runtime(config, router=server.router, on_step=hists.on_step,
                                on_decode=hists.on_decode)
        if priority is not None:
            runtime.engine.settings = dataclasses.replace(runtime.engine.settings,
                                                          priority=priority)
        if runtime.tokenizer is None:
            raise RuntimeError("split topology: the prompt tokenizer's file was not found "
                               "(the front-ends load it); set model.path")
        runtime.start()
        audio_s = runtime.warm_up()
    except Exception as exc:  # noqa: BLE001 - any load failure: say it, exit 3 like serve
        log.error("engine process: model failed to load: %s: %s", type(exc).__name__, exc)
        server.close()
        sys.exit(3)
    # Start-up objects live for good: out of the cyclic collector's view (as in
    # app/server.py Server.load; GC was 4.3% of the server's CPU under load, 2.1% frozen).
    gc.freeze()
    info = wire.EngineInfo(
        model_name=runtime.model_name, is_demo=runtime.is_demo, device=str(runtime.device),
        backend=config.engine.backend, tokenizer=runtime.tokenizer,
        voices=runtime.voices, max_batch_size=runtime.engine.settings.max_batch_size)
    engine, router = runtime.engine, runtime.router

    def snapshot() -> wire.EngineSnapshot:
        return wire.EngineSnapshot(warm=True, stats=engine.stats(), failed_rows=engine.failed_rows,
                                   failed_audio=router.failed_audio, info=info, pid=os.getpid(),
                                   extra={"dropped_batches": sum(server.dropped_batches),
                                          "histograms": hists.state()})

    server.serve(engine, snapshot)
    log.info("engine process serving: model %s, backend %s, %d front-ends, warm-up %.2f s "
             "of audio", runtime.model_name, config.engine.backend, config.server.frontends,
             audio_s)
    stop.wait()
    server.close()
    runtime.stop()
    if spans is not None:
        spans.close()
        spans.tracing.shutdown()
    log.info("engine process stopped")


def _engine_spans(config: Config):
    """The engine process's EngineSpans when the OTEL_* environment turns tracing on."""
    from orpheus_svc.telemetry.engine import EngineSpans
    from orpheus_svc.telemetry.tracing import start_tracing

    t = config.telemetry
    tracing = start_tracing(trace_text=t.trace_text, sample_ratio=t.trace_sample_ratio,
                            role="engine")
    return None if tracing is None else EngineSpans(tracing)


def frontend_main(config: Config, index: int, commands_addr: str, events_addr: str) -> None:
    """Front-end `index`: the gRPC server (app/server.py) with the engine over ZeroMQ."""
    from orpheus_svc.server import eventloop
    from orpheus_svc.app.server import FrontendSpec, serve
    from orpheus_svc.server.logs import configure_logging

    configure_logging(config.server.log_format, config.server.log_level)
    name_os_thread(f"orpheus-fe-{index}")  # the process's name in ps and top
    _watch_parent(lambda: os.kill(os.getpid(), signal.SIGTERM))  # drain, then exit
    spec = FrontendSpec(index, commands_addr, events_addr)
    sys.exit(eventloop.run(serve(config, frontend=spec), config.server.event_loop))


def serve_split(config: Config, *, priority=None) -> int:
    """The split topology's supervisor: an engine process and server.frontends gRPC
    front-end processes (app/server.py), until a signal or one of them ends."""
    from orpheus_svc.app.server import serving_prelude

    code = serving_prelude(config)
    if code is not None:
        return code
    s = config.server
    port = s.port or _free_port(s.host)
    config = dataclasses.replace(config, server=dataclasses.replace(s, port=port))
    tmp = tempfile.mkdtemp(prefix="orpheus-ipc-")
    commands, events = f"ipc://{tmp}/commands", f"ipc://{tmp}/events"
    ctx = multiprocessing.get_context("spawn")
    engine_stop = ctx.Event()
    engine = ctx.Process(target=engine_main, args=(config, commands, events, engine_stop, priority),
                         name="orpheus-engine")
    fronts = [ctx.Process(target=frontend_main, args=(config, i, commands, events),
                          name=f"orpheus-frontend-{i}") for i in range(s.frontends)]
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    engine.start()
    for f in fronts:
        f.start()
    log.info("split topology: engine pid %d, front-end pids %s, port %d", engine.pid,
             [f.pid for f in fronts], port)
    code = 0
    try:
        while not stopping.is_set():
            if engine.exitcode is not None:
                code = engine.exitcode or 1
                log.error("engine process exited with %s: stopping the front-ends",
                          engine.exitcode)
                time.sleep(DOWN_AFTER + 0.5)  # they report NOT_SERVING and end their calls
                break
            dead = [f for f in fronts if f.exitcode is not None]
            if dead:
                code = dead[0].exitcode or 1
                log.error("front-end %s exited with %s: stopping", dead[0].name, dead[0].exitcode)
                break
            stopping.wait(0.1)
        # drain: front-ends first (they finish their calls on the engine), then the engine
        for f in fronts:
            if f.exitcode is None:
                f.terminate()  # SIGTERM: drain delay, then grace
        budget = s.drain_delay_seconds + s.grace_seconds + 15
        for f in fronts:
            f.join(budget)
            if f.exitcode is None:
                f.kill()
                f.join()
            if f.exitcode != 0 and code == 0:
                code = f.exitcode if f.exitcode and f.exitcode > 0 else 1
        if engine.exitcode is None:
            engine_stop.set()
            engine.join(30)
            if engine.exitcode is None:
                engine.kill()
                engine.join()
            if engine.exitcode != 0 and code == 0:
                code = 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("split topology stopped (exit %d)", code)
    return code
