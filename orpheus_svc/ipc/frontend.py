"""A front-end process's side of the split topology: the engine process as an Engine.

    session -> FrontRuntime.open -> GenerationHandle -> RemoteEngine.submit/cancel -> PUSH
    DEALER (identity fe<i>) -> EngineLink thread -> EventRouter (one batch per message)

RemoteEngine implements the Engine protocol of engine/handle.py (new_id, submit, cancel),
plus what GetStatus reads of an engine (stats(), settings.max_batch_size, failed_rows),
served from the latest snapshot the engine published. Its ids start at
wire.first_id(i, incarnation), so they are unique across front-ends and across a front-end's
restarts. EngineLink is the one thread that reads the engine's messages: each event batch
goes to the router in one call (so the asyncio loop wakes once per batch), each STATS
message replaces the snapshot and counts as a heartbeat.

Slow is not dead. The link judges the engine by a StallPolicy (engine/watchdog.py) applied to

    stalled = the snapshot's stalled_s (how long the engine's current step had run)
            + the silence since the last message (counted by this thread's own ticks)

so a long step (heartbeats go on) and a frozen engine process (silence) count alike, and a
freeze of this process does not: health NOT_SERVING from 2 s (`on_health(False)`, then
`on_health(True)` once steps move again); at server.engine_stall_timeout_seconds the open
generations end Rejected(UNAVAILABLE) and are cancelled on the engine (new ones too, while
the stall lasts). The engine is dead only when `engine_gone()` says so (the parent saw its
process exit: app/supervision.py) or a command cannot be queued: then every generation ends
UNAVAILABLE at once, `on_down` is called once, and new ones are refused.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable

import zmq

from orpheus_svc.core.events import Rejected
from orpheus_svc.core.output import SchedulerStats
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.status import Status
from orpheus_svc.engine.handle import EventRouter
from orpheus_svc.engine.registry import load_tokenizer
from orpheus_svc.engine.watchdog import StallMeter, StallPolicy
from orpheus_svc.runtime import FrontRuntime
from orpheus_svc.threads import os_named

from . import wire
from .engine import identity

log = logging.getLogger(__name__)

RECV_HWM = 4096        # event batches this front-end may have queued unread
POLL_S = 0.1           # the link's tick while no message comes
ENGINE_GONE = "the engine process is unreachable; retry (another replica, or after restart)"
# a stall this long ends calls unless the front-end is told otherwise (the config's default)
DEFAULT_POLICY = StallPolicy(10.0)


class RemoteEngine:
    def __init__(self, commands_addr: str, index: int, router: EventRouter, *,
                 context: zmq.Context | None = None, incarnation: int = 0) -> None:
        ctx = context or zmq.Context.instance()
        self.index = index
        self._router = router
        self._first = wire.first_id(index, incarnation)
        self._ids = itertools.count()
        self._push = ctx.socket(zmq.PUSH)
        self._push.setsockopt(zmq.LINGER, 0)
        self._push.setsockopt(zmq.SNDHWM, 65536)
        self._push.connect(commands_addr)
        self._lock = threading.Lock()
        self.snapshot: wire.EngineSnapshot | None = None  # replaced by the link thread
        self.down = False

    def new_id(self) -> int:
        return self._first + next(self._ids) % wire.ID_SPAN

    def submit(self, request: GenerationRequest, gen_id: int | None = None) -> int:
        gen_id = self.new_id() if gen_id is None else gen_id
        if self.down or not self._send(wire.encode_submit(gen_id, request)):
            self._router([Rejected(gen_id, ENGINE_GONE, Status.UNAVAILABLE)])
        return gen_id

    def cancel(self, gen_id: int) -> None:
        if not self.down:
            self._send(wire.encode_cancel(gen_id))

    def _send(self, data: bytes) -> bool:
        with self._lock:
            try:
                self._push.send(data, zmq.NOBLOCK)
                return True
            except zmq.ZMQError:
                return False

    def close(self) -> None:
        with self._lock:
            self._push.close(0)

    # what GetStatus and metrics read of an engine (server/state.py)

    def stats(self) -> SchedulerStats:
        snap = self.snapshot
        return snap.stats if snap is not None else SchedulerStats(*[0] * 12)

    @property
    def settings(self) -> Any:
        snap = self.snapshot
        return SimpleNamespace(max_batch_size=snap.info.max_batch_size
                               if snap is not None and snap.info is not None else 0)

    @property
    def failed_rows(self) -> int:
        return self.snapshot.failed_rows if self.snapshot is not None else 0


class EngineLink:
    """The thread that reads the engine process's messages for front-end `index`."""

    def __init__(self, events_addr: str, index: int, router: EventRouter, engine: RemoteEngine,
                 *, on_down: Callable[[], None] | None = None,
                 on_health: Callable[[bool], None] | None = None,
                 engine_gone: Callable[[], bool] | None = None,
                 policy: StallPolicy = DEFAULT_POLICY,
                 context: zmq.Context | None = None) -> None:
        ctx = context or zmq.Context.instance()
        self.index = index
        self.router, self.engine = router, engine
        self.on_down = on_down
        self.on_health = on_health
        self.engine_gone = engine_gone
        self.policy = policy
        self.healthy = True  # as last told to on_health
        self.stall_ended = 0  # generations ended because the engine stalled
        self._sock = ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.IDENTITY, identity(index))
        self._sock.setsockopt(zmq.RCVHWM, RECV_HWM)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(events_addr)
        self.warm = threading.Event()
        self.batches = 0
        self.lost = 0  # generations the engine gave up on (this front-end fell behind)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=os_named(self._run), name=f"ipc-link-{index}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        silence = StallMeter()
        received = 0
        try:
            while not self._stop.is_set():
                if poller.poll(int(POLL_S * 1000)):
                    while True:
                        try:
                            data = self._sock.recv(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        received += 1
                        self._message(data)
                if self.engine.down or not self.warm.is_set():
                    continue
                if self.engine_gone is not None and self.engine_gone():
                    self._engine_down()
                    continue
                silent = silence.update(time.monotonic(), True, received)
                self._judge(self.engine.snapshot.stalled_s + silent)
        finally:
            self._sock.close(0)

    def _judge(self, stalled: float) -> None:
        """Apply the stall policy to `stalled` seconds without progress."""
        healthy = self.policy.healthy(stalled)
        if healthy != self.healthy:
            self.healthy = healthy
            if healthy:
                log.warning("front-end %d: the engine steps again: SERVING", self.index)
            else:
                log.warning("front-end %d: no engine progress for %.1f s: NOT_SERVING until "
                            "it steps again", self.index, stalled)
            if self.on_health is not None:
                self.on_health(healthy)
        if self.policy.ends_calls(stalled):
            ended = self.router.end_all(self.policy.reason(stalled))
            for gen_id in ended:
                self.engine.cancel(gen_id)  # freed on the engine if it ever steps again
            if ended:
                self.stall_ended += len(ended)
                log.error("front-end %d: no engine progress for %.1f s: %d generations ended "
                          "UNAVAILABLE", self.index, stalled, len(ended))

    def _message(self, data: bytes) -> None:
        kind, body = wire.decode_message(data)
        if kind == wire.EVENTS:
            self.batches += 1
            self.router(body)
        elif kind == wire.STATS:
            self.engine.snapshot = body
            self.router.failed_audio = body.failed_audio
            if body.warm and body.info is not None and not self.warm.is_set():
                self.warm.set()
        else:
            gen_ids, reason = body
            self.lost += len(gen_ids)
            log.warning("front-end %d: the engine gave up %d generations: %s", self.index,
                        len(gen_ids), reason)
            self.router([Rejected(g, reason, Status.UNAVAILABLE) for g in gen_ids])

    def _engine_down(self) -> None:
        self.engine.down = True
        gens = self.router.end_all(ENGINE_GONE)
        log.error("front-end %d: the engine process exited: %d generations ended UNAVAILABLE",
                  self.index, len(gens))
        if self.on_down is not None:
            self.on_down()


@dataclass
class RemoteRuntime(FrontRuntime):
    """A front-end's runtime: prompts built here, generations run by the engine process."""

    link: EngineLink | None = None

    def stop(self) -> None:
        if self.link is not None:
            self.link.close()
        self.engine.close()


def connect(commands_addr: str, events_addr: str, index: int, *,
            on_down: Callable[[], None] | None = None,
            on_health: Callable[[bool], None] | None = None,
            engine_gone: Callable[[], bool] | None = None,
            policy: StallPolicy = DEFAULT_POLICY, incarnation: int = 0,
            context: zmq.Context | None = None) -> EngineLink:
    """Open front-end `index`'s sockets (as its `incarnation`-th process) and start
    reading; wait on `link.warm`, then build the runtime with remote_runtime()."""
    router = EventRouter()
    engine = RemoteEngine(commands_addr, index, router, context=context, incarnation=incarnation)
    link = EngineLink(events_addr, index, router, engine, on_down=on_down, on_health=on_health,
                      engine_gone=engine_gone, policy=policy, context=context)
    link.start()
    return link


def remote_runtime(config, link: EngineLink) -> RemoteRuntime:
    """The front-end runtime once the engine is warm (its snapshot carries the EngineInfo)."""
    info = link.engine.snapshot.info
    encode = load_tokenizer(info.tokenizer)  # the engine's: a file, or a built-in's name
    return RemoteRuntime(config=config, engine=link.engine, router=link.router, encode=encode,
                         model_name=info.model_name, is_demo=info.is_demo, device=info.device,
                         voices=info.voices, adapters=dict(info.adapters),
                         references={r.name.casefold(): r for r in info.references},
                         link=link)
