"""The split topology's supervision: what the parent shares with its processes, how it
restarts a front-end that died, and the exit codes of a server that cannot go on.

    parent (app/topology.py) -- spawn args --> engine process, front-end processes
      Shared.engine_beat    written by the engine process at each heartbeat; the parent
                            reads it to tell a frozen or wedged engine process
      Shared.engine_gone    set by the parent the moment the engine process exited: the
                            front-ends end their calls at once (no timeout to wait out)
      Shared.incarnations   a front-end's restart count: the parent raises it when the
                            front-end dies, the engine then forgets that front-end's
                            generations, and the new process opens ids of its own
                            (ipc/wire.py first_id)
      Shared.deaths         front-end deaths, served by front-end 0's /metrics
                            (orpheus_frontend_deaths_total{frontend="i"})

Restarts (RestartPolicy): a dead front-end is started again after 0.5 s, doubling with
each death within server.frontend_restart_window_seconds (at most 10 s); more than
server.frontend_max_restarts deaths within the window is a crash loop, and the parent stops
everything and exits EXIT_CRASH_LOOP.
"""

from __future__ import annotations

import signal
from collections import deque

from prometheus_client.core import CounterMetricFamily

EXIT_MODEL_LOAD = 3      # the model failed to load (as in the single topology)
EXIT_ENGINE_FAILED = 4   # the engine died or stalled past server.engine_stall_exit_seconds
EXIT_CRASH_LOOP = 5      # front-ends died more than server.frontend_max_restarts times


class Shared:
    """The parent's shared memory and event, created before the processes are spawned
    and handed to them as arguments (multiprocessing shares them only that way)."""

    def __init__(self, ctx, frontends: int) -> None:
        self.engine_gone = ctx.Event()
        self.engine_beat = ctx.RawValue("d", 0.0)  # time.monotonic() of the last heartbeat
        self.incarnations = ctx.RawArray("i", frontends)
        self.deaths = ctx.RawArray("i", frontends)


class RestartPolicy:
    """When to start a dead front-end again, or that the deaths are a crash loop."""

    def __init__(self, max_restarts: int, window_s: float, *, base_delay_s: float = 0.5,
                 max_delay_s: float = 10.0) -> None:
        self.max_restarts = max_restarts
        self.window_s = window_s
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self._deaths: deque[float] = deque()

    def on_death(self, now: float) -> float | None:
        """A front-end died at `now`: seconds to wait before restarting it, or None for a
        crash loop (more than max_restarts deaths within window_s, this one included)."""
        self._deaths.append(now)
        while self._deaths and self._deaths[0] <= now - self.window_s:
            self._deaths.popleft()
        n = len(self._deaths)
        if n > self.max_restarts:
            return None
        return min(self.base_delay_s * 2 ** (n - 1), self.max_delay_s)


def describe_exit(exitcode: int | None) -> str:
    """A process's end as a log line says it: 'exit code 3', 'signal SIGKILL'."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


class FrontendDeaths:
    """A Prometheus collector of Shared.deaths (registered by front-end 0)."""

    def __init__(self, deaths) -> None:
        self.deaths = deaths

    def collect(self):
        fam = CounterMetricFamily(
            "orpheus_frontend_deaths", "Split topology: front-end processes that died (each "
            "restarted by the parent unless the deaths were a crash loop)", labels=["frontend"])
        for i, n in enumerate(self.deaths[:]):
            fam.add_metric([str(i)], n)
        yield fam
