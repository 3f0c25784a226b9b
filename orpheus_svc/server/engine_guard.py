"""The single topology's engine guard: a slow engine is waited for, a dead one is not.

One asyncio task while the server serves (app/server.py starts it), every TICK_S:

    EngineLoop.failure set (the engine thread died: an exception past the loop's handlers,
    or a FatalBackendError), or one step running >= server.engine_stall_exit_seconds
        -> every open generation ends UNAVAILABLE, then on_fatal(why): the server turns
           NOT_SERVING and exits non-zero within a few seconds
    one step running >= 2 s          -> health NOT_SERVING; SERVING again once steps move
    ... >= server.engine_stall_timeout_seconds
        -> the open generations end UNAVAILABLE (and are cancelled on the engine)

The stall is measured by engine/watchdog.py's EngineWatch on this loop's own ticks, so a
process frozen as a whole (SIGSTOP, a VM pause) is not judged stalled for that time; the
split topology applies the same StallPolicy in ipc/frontend.py and app/topology.py.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import structlog

from orpheus_svc.engine.handle import EventRouter
from orpheus_svc.engine.watchdog import EngineWatch, StallPolicy

log = structlog.get_logger("orpheus_svc.engine_guard")

TICK_S = 0.25


class EngineGuard:
    """Watches an EngineLoop (`engine`) for the server whose calls `router` feeds."""

    def __init__(self, engine, router: EventRouter, policy: StallPolicy, *,
                 set_health: Callable[[bool], Awaitable[None]],
                 on_fatal: Callable[[str], None], tick: float = TICK_S) -> None:
        self.engine, self.router, self.policy = engine, router, policy
        self._set_health = set_health
        self._on_fatal = on_fatal
        self.tick = tick
        self.healthy = True

    async def run(self) -> None:
        watch = EngineWatch(self.engine)
        while True:
            await asyncio.sleep(self.tick)
            stalled = watch.poll()
            failure = watch.failure
            if failure is not None or self.policy.exits(stalled):
                why = (f"engine thread died: {type(failure).__name__}: {failure}"
                       if failure is not None else
                       f"one engine step has run {stalled:.0f} s "
                       f"(server.engine_stall_exit_seconds={self.policy.exit_s:g})")
                ended = self.router.end_all("the engine failed; this server is restarting; "
                                            "retry (another replica)")
                log.critical("engine cannot recover: exiting", why=why, calls_ended=len(ended))
                self._on_fatal(why)
                return
            healthy = self.policy.healthy(stalled)
            if healthy != self.healthy:
                self.healthy = healthy
                log.warning("engine step stalled: NOT_SERVING" if not healthy else
                            "engine steps again: SERVING", stalled_s=round(stalled, 1))
                await self._set_health(healthy)
            if self.policy.ends_calls(stalled):
                ended = self.router.end_all(self.policy.reason(stalled))
                for gen_id in ended:
                    self.engine.cancel(gen_id)
                if ended:
                    log.error("engine stalled: generations ended UNAVAILABLE",
                              stalled_s=round(stalled, 1), generations=len(ended))


class StallGauge:
    """Prometheus collector: orpheus_engine_stalled, 1 while this server judges the engine
    stalled (health NOT_SERVING until it steps again), in either topology."""

    def __init__(self, stalled: Callable[[], bool]) -> None:
        self._stalled = stalled

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily
        yield GaugeMetricFamily("orpheus_engine_stalled", "1 while the engine's current step "
                                "has run over 2 s: health NOT_SERVING until it steps again",
                                value=int(self._stalled()))
