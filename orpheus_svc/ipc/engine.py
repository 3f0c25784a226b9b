"""The engine process's side of the split topology: commands in, event batches out.

    front-ends --PUSH--> [PULL  commands]  -- command thread --> engine.submit / cancel
    engine thread, flusher thread --> SplitRouter --> [ROUTER events] --> front-end i's DEALER
    command thread, every STATS_INTERVAL s --> [ROUTER events] --> every front-end (STATS)

The SplitRouter is the runtime's EventRouter: events of the engine's own generations (ids
below REMOTE_BASE: warm-up) are routed in-process as usual; each other batch is split by
front-end (the id says which, wire.frontend_of) and sent as one message per front-end.

One lock guards the ROUTER socket (three threads send on it, nobody receives) and the
per-front-end sets of live generations. Sends never block the engine or flusher thread:
the socket is ROUTER_MANDATORY with a per-front-end high-water mark (SEND_HWM batches);
when a front-end stops reading and its queue is full, the send fails at once and that
front-end's live generations are cancelled (their slots free at the next step), their
later events dropped, and a LOST message naming them is sent as soon as the queue has room
again (each ends UNAVAILABLE on the front-end). A front-end that is gone (not connected)
is treated the same way.

A front-end that died is restarted by the parent under the same index and identity
(ROUTER_HANDOVER: the new connection takes the identity over). The parent raises that
front-end's incarnation first (`incarnation`, app/supervision.py); the command thread sees
it within a heartbeat interval, before it reads any command of the new process, and forgets
the old one: its live generations are cancelled (slots free at the next step), their later
events dropped, and commands still in flight from the dead process are ignored (their ids
carry the old incarnation: ipc/wire.py).

The heartbeat comes from the command thread, never from the engine thread, so a long step
is not silence; the snapshot says how long the current step has run (`stalled_s`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Sequence

import zmq

from orpheus_svc.core.events import EngineEvent
from orpheus_svc.engine.handle import Engine, EventRouter, is_end
from orpheus_svc.threads import os_named

from . import wire

log = logging.getLogger(__name__)

SEND_HWM = 4096      # event batches queued per front-end before its generations are dropped
STATS_INTERVAL = 0.25
LOST_REASON = ("the front-end fell behind the engine's event stream ({} batches queued); "
               "its generations were cancelled; retry")


def identity(index: int) -> bytes:
    return b"fe%d" % index


class SplitRouter(EventRouter):
    """The EventRouter of an engine process: local ids in-process, the rest to front-ends."""

    def __init__(self, send: Callable[[int, Sequence[EngineEvent]], None]) -> None:
        super().__init__()
        self._send = send

    def __call__(self, batch: Sequence[EngineEvent]) -> None:
        local: list = []
        remote: dict[int, list] = {}
        for ev in batch:
            fe = wire.frontend_of(ev.gen_id)
            if fe is None:
                local.append(ev)
            else:
                remote.setdefault(fe, []).append(ev)
        if local:
            super().__call__(local)
        for fe, events in remote.items():
            self._send(fe, events)


class EngineServer:
    """Serves one engine to `frontends` front-end processes over ZeroMQ.

    Start it before the engine is built (start(): heartbeats say "not warm", so front-ends
    can tell loading from gone), build the runtime with `self.router`, then serve(engine)."""

    def __init__(self, commands_addr: str, events_addr: str, frontends: int, *,
                 context: zmq.Context | None = None, send_hwm: int = SEND_HWM,
                 stats_interval: float = STATS_INTERVAL,
                 incarnation: Callable[[int], int] | None = None,
                 on_beat: Callable[[], None] | None = None, observer: Any = None) -> None:
        self._ctx = context or zmq.Context.instance()
        # told of each submit and each event batch sent (telemetry/engine.py EngineSpans,
        # when tracing is on); None: nothing is
        self.observer = observer
        self.frontends = frontends
        self.send_hwm = send_hwm
        self.stats_interval = stats_interval
        self._events = self._ctx.socket(zmq.ROUTER)
        self._events.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._events.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a restarted front-end's identity
        self._events.setsockopt(zmq.SNDHWM, send_hwm)
        self._events.setsockopt(zmq.LINGER, 0)
        self._events.bind(events_addr)
        self._commands = self._ctx.socket(zmq.PULL)
        self._commands.setsockopt(zmq.LINGER, 0)
        self._commands.bind(commands_addr)
        self._lock = threading.Lock()
        self._live: list[set[int]] = [set() for _ in range(frontends)]
        self._lost: list[set[int]] = [set() for _ in range(frontends)]
        self._notices: list[set[int]] = [set() for _ in range(frontends)]
        self.dropped_batches = [0] * frontends
        # each front-end's current incarnation (a restart count: `incarnation(fe)`, read
        # from the parent's shared memory; None: front-ends are never restarted)
        self._incarnation = incarnation
        self._known = [incarnation(fe) % wire.INCARNATIONS if incarnation else 0
                       for fe in range(frontends)]
        self._on_beat = on_beat
        self.router = SplitRouter(self.send_events)
        self.engine: Engine | None = None
        self._snapshot: Callable[[], wire.EngineSnapshot] = self._not_warm
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=os_named(self._run), name="ipc-commands",
                                        daemon=True)
        self._thread.start()

    def serve(self, engine: Engine, snapshot: Callable[[], wire.EngineSnapshot]) -> None:
        """Take commands for `engine` from now on; `snapshot` is published as the heartbeat."""
        self.engine = engine
        self._snapshot = snapshot

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        with self._lock:
            self._events.close(0)
        self._commands.close(0)

    def _not_warm(self) -> wire.EngineSnapshot:
        from orpheus_svc.core.output import SchedulerStats
        return wire.EngineSnapshot(warm=False, stats=SchedulerStats(*[0] * 12), pid=os.getpid())

    # -- the command thread: commands in, heartbeats out --------------------------------------

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._commands, zmq.POLLIN)
        next_stats = 0.0
        while not self._stop.is_set():
            self._sync_incarnations()
            now = time.monotonic()
            if now >= next_stats:
                self.publish_stats()
                if self._on_beat is not None and self.engine is not None:
                    self._on_beat()  # serving: the parent may judge this process by it
                next_stats = now + self.stats_interval
            timeout_ms = max(1, int((next_stats - time.monotonic()) * 1000))
            if not poller.poll(timeout_ms):
                continue
            while True:
                try:
                    data = self._commands.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                except zmq.ZMQError:
                    return  # closed
                self._command(data)

    def _command(self, data: bytes) -> None:
        kind, gen_id, req = wire.decode_command(data)
        engine = self.engine
        fe = wire.frontend_of(gen_id)
        if engine is None or fe is None or fe >= self.frontends:
            log.warning("ignoring a command for generation %d (engine not serving yet, or "
                        "not a front-end's id)", gen_id)
            return
        self._sync_incarnations()
        if self._incarnation is not None and wire.incarnation_of(gen_id) != self._known[fe]:
            log.info("ignoring a command of front-end %d's previous process (generation %d)",
                     fe, gen_id)
            return
        if kind == wire.CANCEL:
            engine.cancel(gen_id)
            return
        with self._lock:
            self._live[fe].add(gen_id)
        if self.observer is not None:
            self.observer.submitted(gen_id, req)
        engine.submit(req, gen_id)

    def _sync_incarnations(self) -> None:
        """Forget the generations of every front-end whose process was replaced."""
        if self._incarnation is None:
            return
        cancel: list[int] = []
        with self._lock:
            for fe in range(self.frontends):
                now = self._incarnation(fe) % wire.INCARNATIONS
                if now == self._known[fe]:
                    continue
                self._known[fe] = now
                old = self._live[fe]
                log.warning("front-end %d was restarted: cancelling the %d generations of its "
                            "previous process", fe, len(old))
                cancel += old
                self._lost[fe] |= old  # their later events are dropped until their ends
                self._live[fe] = set()
                self._notices[fe].clear()  # nobody is left to tell
        if cancel and self.engine is not None:
            for gen_id in cancel:  # outside the lock: an engine may answer on this thread
                self.engine.cancel(gen_id)

    def publish_stats(self) -> None:
        data = wire.encode_stats(self._snapshot())
        with self._lock:
            for fe in range(self.frontends):
                self._flush_notice(fe)
                try:
                    self._events.send_multipart((identity(fe), data), zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass  # not connected yet, or behind: a heartbeat is not worth more

    # -- any engine thread: event batches out --------------------------------------------------

    def send_events(self, fe: int, events: Sequence[EngineEvent]) -> None:
        if fe >= self.frontends:
            return
        if self.observer is not None:
            self.observer.ended(events)
        cancel: set[int] = set()
        with self._lock:
            lost, live = self._lost[fe], self._live[fe]
            keep = []
            for ev in events:
                if ev.gen_id in lost:  # given up: drop until its end comes by
                    if is_end(ev):
                        lost.discard(ev.gen_id)
                    continue
                keep.append(ev)
            if not keep:
                return
            self._flush_notice(fe)
            ended = {ev.gen_id for ev in keep if is_end(ev)}
            try:
                self._events.send_multipart((identity(fe), wire.encode_events(keep)), zmq.NOBLOCK)
            except zmq.ZMQError as exc:
                cancel = self._give_up(fe, keep, ended, exc)
            else:
                live -= ended
        for gen_id in cancel:  # outside the lock: an engine may answer on this thread
            self.engine.cancel(gen_id)

    def _give_up(self, fe: int, keep: list, ended: set[int], exc: zmq.ZMQError) -> set[int]:
        """Lock held: front-end `fe` cannot take this batch; its generations to cancel."""
        live = self._live[fe]
        live |= {ev.gen_id for ev in keep}
        running = live - ended
        if self.dropped_batches[fe] == 0 or not self._notices[fe]:
            log.warning("front-end %d is not reading (%s): cancelling its %d live generations",
                        fe, "queue full" if isinstance(exc, zmq.Again) else exc, len(running))
        self.dropped_batches[fe] += 1
        self._notices[fe] |= live
        self._lost[fe] |= running
        live.clear()
        return running

    def _flush_notice(self, fe: int) -> None:
        """Lock held: tell `fe` which of its generations were given up, once it has room."""
        ids = self._notices[fe]
        if not ids:
            return
        data = wire.encode_lost(sorted(ids), LOST_REASON.format(self.send_hwm))
        try:
            self._events.send_multipart((identity(fe), data), zmq.NOBLOCK)
        except zmq.ZMQError:
            return
        ids.clear()

    def live(self, fe: int) -> int:
        with self._lock:
            return len(self._live[fe])
