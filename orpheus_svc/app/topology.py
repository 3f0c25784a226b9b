"""`server.topology: split`: one engine process and server.frontends gRPC front-ends.

    orpheus-svc serve (this parent: supervises, serves nothing)
      |- engine process   build_runtime (scheduler, slots, backend, flusher, SNAC), warm-up,
      |                   EngineServer (orpheus_svc/ipc/engine.py) on two ipc:// sockets
      |- front-end 0..N-1 app/server.py Server with a FrontendSpec: grpc.aio on server.port
                          (SO_REUSEPORT), sessions, encoding; RemoteEngine over ZeroMQ

On SIGTERM/SIGINT the parent stops the front-ends (SIGTERM: drain delay, grace) and, once
they exited, the engine (an Event; the engine ignores signals, so one sent to the whole
process group cannot stop it under draining front-ends); it exits 0 when they all did.
A child whose parent vanished (SIGKILL) stops by itself. The processes are started with
multiprocessing's spawn method (no fork of a process holding threads).

Faults (docs/deploy.md, "Faults of our own processes"; app/supervision.py):
- engine slow (a long step, a paused process): front-ends wait, and end calls only past
  server.engine_stall_timeout_seconds (ipc/frontend.py);
- engine cannot recover: its own watchdog (the engine process's main thread) exits
  EXIT_ENGINE_FAILED when its thread died or one step ran server.engine_stall_exit_seconds;
  a process that cannot even run its watchdog (no heartbeat for that long, not stopped by
  a signal) is killed by this parent;
- engine exited: the parent sets Shared.engine_gone (front-ends end every call
  UNAVAILABLE at once), stops the front-ends and exits with the engine's code (1 if killed);
- front-end died: logged with its exit code or signal, counted, and restarted under a
  RestartPolicy (backoff; a crash loop stops everything with EXIT_CRASH_LOOP); the engine
  cancels the dead process's generations; other front-ends go on untouched.
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
from orpheus_svc.engine.watchdog import StallMeter, StallPolicy
from orpheus_svc.threads import name_os_thread, os_named

from orpheus_svc.ipc import wire

from .supervision import (EXIT_CRASH_LOOP, EXIT_ENGINE_FAILED, EXIT_MODEL_LOAD, RestartPolicy,
                          Shared, describe_exit)

log = logging.getLogger("orpheus_svc.topology")

WATCH_TICK_S = 0.25  # the engine process's watchdog
SUPERVISE_TICK_S = 0.1  # the parent's look at its processes (an exit is seen this soon)


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


def _hard_exit(code: int, why: str) -> None:
    log.critical("engine process exiting (code %d): %s", code, why)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no orderly stop: the engine thread may be wedged in a step


def engine_main(config: Config, commands_addr: str, events_addr: str, stop,
                shared: Shared | None = None, priority=None) -> None:
    """The engine process: build, warm up, then serve the front-ends until the parent sets
    `stop` (a multiprocessing Event) after they drained. SIGTERM and SIGINT are ignored
    here: a signal sent to the whole process group (Ctrl-C, `timeout`, some supervisors)
    must not stop the engine under front-ends that are still draining. Its main thread
    is the engine's watchdog (engine/watchdog.py): it exits EXIT_ENGINE_FAILED when the
    engine thread died or one step ran server.engine_stall_exit_seconds. `shared`: the
    parent's (app/supervision.py); None runs the process alone (tests)."""
    from orpheus_svc.engine.watchdog import EngineWatch
    from orpheus_svc.ipc.engine import EngineServer
    from orpheus_svc.ipc.histograms import EngineHistograms
    from orpheus_svc.runtime import build_runtime
    from orpheus_svc.server.logs import configure_logging

    configure_logging(config.server.log_format, config.server.log_level)
    name_os_thread("orpheus-engine")  # the process's name in ps and top
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _watch_parent(stop.set)

    def beat() -> None:
        shared.engine_beat.value = time.monotonic()  # CLOCK_MONOTONIC: one for all processes
    spans = _engine_spans(config)  # the trace continues here (telemetry/engine.py)
    server = EngineServer(commands_addr, events_addr, config.server.frontends,
                          incarnation=None if shared is None else shared.incarnations.__getitem__,
                          on_beat=None if shared is None else beat, observer=spans)
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
        sys.exit(EXIT_MODEL_LOAD)
    # Start-up objects live for good: out of the cyclic collector's view (as in
    # app/server.py Server.load; GC was 4.3% of the server's CPU under load, 2.1% frozen).
    gc.freeze()
    info = wire.EngineInfo(
        model_name=runtime.model_name, is_demo=runtime.is_demo, device=str(runtime.device),
        backend=config.engine.backend, tokenizer=runtime.tokenizer,
        voices=runtime.voices, max_batch_size=runtime.engine.settings.max_batch_size,
        adapters=runtime.adapters, references=tuple(runtime.references.values()))
    engine, router = runtime.engine, runtime.router
    watch = EngineWatch(engine)

    def snapshot() -> wire.EngineSnapshot:
        return wire.EngineSnapshot(warm=True, stats=engine.stats(), failed_rows=engine.failed_rows,
                                   failed_audio=router.failed_audio, info=info, pid=os.getpid(),
                                   extra={"dropped_batches": sum(server.dropped_batches),
                                          "histograms": hists.state()},
                                   stalled_s=watch.stalled_s)

    server.serve(engine, snapshot)
    log.info("engine process serving: model %s, backend %s, %d front-ends, warm-up %.2f s "
             "of audio", runtime.model_name, config.engine.backend, config.server.frontends,
             audio_s)
    policy = StallPolicy.from_config(config.server)
    while not stop.wait(WATCH_TICK_S):
        stalled = watch.poll()
        if watch.failure is not None:
            _hard_exit(EXIT_ENGINE_FAILED, f"the engine thread died: "
                       f"{type(watch.failure).__name__}: {watch.failure}")
        if policy.exits(stalled):
            _hard_exit(EXIT_ENGINE_FAILED, f"one engine step has run {stalled:.0f} s "
                       f"(server.engine_stall_exit_seconds={policy.exit_s:g}): it cannot recover")
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


def frontend_main(config: Config, index: int, commands_addr: str, events_addr: str,
                  shared: Shared | None = None, incarnation: int = 0) -> None:
    """Front-end `index` (its `incarnation`-th restart): the gRPC server (app/server.py)
    with the engine over ZeroMQ."""
    from orpheus_svc.server import eventloop
    from orpheus_svc.app.server import FrontendSpec, serve
    from orpheus_svc.server.logs import configure_logging

    configure_logging(config.server.log_format, config.server.log_level)
    name_os_thread(f"orpheus-fe-{index}")  # the process's name in ps and top
    _watch_parent(lambda: os.kill(os.getpid(), signal.SIGTERM))  # drain, then exit
    spec = FrontendSpec(index, commands_addr, events_addr, incarnation, shared)
    sys.exit(eventloop.run(serve(config, frontend=spec), config.server.event_loop))


def _stopped(pid: int) -> bool:
    """Stopped by a signal (SIGSTOP, a debugger): paused on purpose, not wedged. Linux
    (/proc); elsewhere False."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


class _Supervisor:
    """The parent's processes and what it does when one of them ends (module docstring)."""

    def __init__(self, config: Config, ctx, commands: str, events: str, priority) -> None:
        self.config, self.ctx = config, ctx
        s = config.server
        self.commands, self.events = commands, events
        self.shared = Shared(ctx, s.frontends)
        self.engine_stop = ctx.Event()
        self.engine = ctx.Process(target=engine_main, name="orpheus-engine", args=(
            config, commands, events, self.engine_stop, self.shared, priority))
        self.fronts: list = [None] * s.frontends
        self.restart_at: dict[int, float] = {}  # front-end index -> when to start it again
        self.restarts = RestartPolicy(s.frontend_max_restarts, s.frontend_restart_window_seconds)
        self.exit_s = s.engine_stall_exit_seconds
        self._silence = StallMeter()

    def start(self) -> None:
        self.engine.start()
        for i in range(len(self.fronts)):
            self.fronts[i] = self._frontend(i)
        log.info("split topology: engine pid %d, front-end pids %s, port %d", self.engine.pid,
                 [f.pid for f in self.fronts], self.config.server.port)

    def _frontend(self, i: int):
        p = self.ctx.Process(target=frontend_main, name=f"orpheus-frontend-{i}", args=(
            self.config, i, self.commands, self.events, self.shared, self.shared.incarnations[i]))
        p.start()
        return p

    def tick(self, now: float) -> int | None:
        """One look at the processes; an exit code once the server must stop."""
        engine = self.engine
        if engine.exitcode is not None:
            self.shared.engine_gone.set()  # front-ends end their calls now
            log.error("engine process exited (%s): stopping the front-ends",
                      describe_exit(engine.exitcode))
            return engine.exitcode if engine.exitcode > 0 else 1
        beat = self.shared.engine_beat.value
        if beat > 0 and self.exit_s > 0:  # serving: silence means wedged (or frozen)
            silent = self._silence.update(now, not _stopped(engine.pid), beat)
            if silent >= self.exit_s:
                log.critical("engine process (pid %d) has sent no heartbeat for %.0f s "
                             "(server.engine_stall_exit_seconds): killing it", engine.pid, silent)
                engine.kill()
                engine.join(10)
                self.shared.engine_gone.set()
                return EXIT_ENGINE_FAILED
        for i, f in enumerate(self.fronts):
            if f is not None and f.exitcode is not None:
                code = self._frontend_died(i, f, now)
                if code is not None:
                    return code
        for i, at in list(self.restart_at.items()):
            if now >= at:
                del self.restart_at[i]
                self.fronts[i] = self._frontend(i)
                log.warning("front-end %d restarted: pid %d (incarnation %d)", i,
                            self.fronts[i].pid, self.shared.incarnations[i])
        return None

    def _frontend_died(self, i: int, f, now: float) -> int | None:
        self.fronts[i] = None
        self.shared.deaths[i] += 1
        self.shared.incarnations[i] += 1  # the engine forgets its generations now
        delay = self.restarts.on_death(now)
        log.error("front-end %d (pid %d) died: %s", i, f.pid, describe_exit(f.exitcode))
        if delay is None:
            log.error("front-ends died %d times within %g s (server.frontend_max_restarts=%d): "
                      "a crash loop; stopping", self.restarts.max_restarts + 1,
                      self.restarts.window_s, self.restarts.max_restarts)
            return EXIT_CRASH_LOOP
        self.restart_at[i] = now + delay
        log.warning("restarting front-end %d in %.1f s", i, delay)
        return None

    def stop(self, code: int) -> int:
        """Drain the front-ends, then stop the engine; the exit code."""
        s = self.config.server
        fronts = [f for f in self.fronts if f is not None]
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
        engine = self.engine
        if engine.exitcode is None:
            self.engine_stop.set()
            engine.join(30)
            if engine.exitcode is None:
                engine.kill()
                engine.join()
            if engine.exitcode != 0 and code == 0:
                code = 1
        return code


def serve_split(config: Config, *, priority=None) -> int:
    """The split topology's supervisor: an engine process and server.frontends gRPC
    front-end processes (app/server.py), until a signal, the engine's end or a crash loop."""
    from orpheus_svc.app.server import serving_prelude

    code = serving_prelude(config)
    if code is not None:
        return code
    s = config.server
    port = s.port or _free_port(s.host)
    config = dataclasses.replace(config, server=dataclasses.replace(s, port=port))
    tmp = tempfile.mkdtemp(prefix="orpheus-ipc-")
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    sup = _Supervisor(config, multiprocessing.get_context("spawn"), f"ipc://{tmp}/commands",
                      f"ipc://{tmp}/events", priority)
    code = 0
    try:
        sup.start()
        while not stopping.is_set():
            ended = sup.tick(time.monotonic())
            if ended is not None:
                code = ended
                if sup.shared.engine_gone.is_set():
                    time.sleep(0.5)  # the front-ends end their calls (they poll every 0.1 s)
                break
            stopping.wait(SUPERVISE_TICK_S)
        code = sup.stop(code)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("split topology stopped (exit %d)", code)
    return code
